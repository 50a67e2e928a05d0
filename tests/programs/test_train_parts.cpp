// tessera-train's parts, each alone: request -> counts, stage count, output mode, loss scale, host,
// dataset shape and session options (programs/train_settings.hpp, train_datasets.hpp); the transformer
// plan search's choices (plan_transformer.hpp).
#include <cstdio>
#include <fstream>
#include <string>

#include <catch2/catch.hpp>

#include "plan_transformer.hpp"
#include "train_datasets.hpp"
#include "train_report.hpp"
#include "train_settings.hpp"

namespace test_train_parts {

namespace programs = tessera::programs;
namespace cfg = tessera::config;

TEST_CASE("a request's counts and stage count", "[programs]") {
    programs::train_request r;
    r.batch_size = 8, r.gradient_accumulation = 7, r.device_iterations = 3, r.replicas = 4, r.instances = 2;
    r.input_replica_group = 2, r.strategy = "pipelined", r.ipus_per_replica = 4;
    const cfg::options o = programs::counts_of(r);
    CHECK(*o.micro_batch == 8);
    CHECK(*o.gradient_accumulation == 7);
    CHECK(*o.device_iterations == 3);
    CHECK(*o.replicas == 4);
    CHECK(*o.instances == 2);
    CHECK(*o.input_group == 2);
    CHECK(*o.stages == 4);
    r.strategy = "single";  // one stage, whatever --ipus-per-replica says (tessera-train refuses it given)
    CHECK(programs::stages_of(r) == 1);
}

TEST_CASE("output modes, loss scales and hosts are parsed or refused by name", "[programs]") {
    const auto every = programs::parse_output_mode("every:3");
    CHECK(every.kind == cfg::output_kind::every_n);
    CHECK(every.period == 3);
    CHECK(programs::parse_output_mode("sum").kind == cfg::output_kind::sum);
    REQUIRE_THROWS_WITH(programs::parse_output_mode("every:0"), Catch::Contains("every:N needs N > 0"));
    REQUIRE_THROWS_AS(programs::parse_output_mode("most"), programs::usage_error);
    // A count is read whole: a sign, trailing characters, no digits or more than a size_t are refused.
    for (const char* bad : {"every:3x", "every:-1", "every:", "every:+3", "every: 3", "every:18446744073709551616"})
        REQUIRE_THROWS_WITH(programs::parse_output_mode(bad),
                            Catch::Contains("takes a whole count N") && Catch::Contains(std::string("'") + bad + "'"));
    CHECK(programs::parse_output_mode("every:18446744073709551615").period == 18446744073709551615u);
    CHECK(programs::static_scale("static:128") == 128.0);
    CHECK_FALSE(programs::static_scale("dynamic").has_value());
    REQUIRE_THROWS_AS(programs::static_scale("static:0"), programs::usage_error);
    CHECK(programs::static_scale("static:0.5e3") == 500.0);
    for (const char* bad : {"static:128x", "static:", "static:inf", "static:nan", "static: 8", "static:-8", "static:1e999"})
        REQUIRE_THROWS_WITH(programs::static_scale(bad), Catch::Contains("needs a positive factor") &&
                                                             Catch::Contains(std::string("'") + bad + "'"));

    programs::train_request r;
    CHECK(programs::host_of(r).dispatch_seconds == tessera::emulator::tutorial_host().dispatch_seconds);
    r.host = "native";
    CHECK(programs::host_of(r).dispatch_seconds == tessera::emulator::native_host().dispatch_seconds);
    r.host = "test_train_parts_host.json";
    {
        std::ofstream f(r.host);
        f << tessera::emulator::to_json(tessera::emulator::host_spec{.cores = 7});
    }
    CHECK(programs::host_of(r).cores == 7);
    std::remove(r.host.c_str());
    REQUIRE_THROWS_WITH(programs::host_of(r), Catch::Contains("--host: ") && Catch::Contains("cannot read"));
}

TEST_CASE("output mode every:N returns a micro-batch of every call: 1 <= N <= D x G", "[programs]") {
    programs::train_request r;  // the main job: D = 4, G = 8, so 32 micro-batches a call per replica
    CHECK(programs::call_micro_batches(r) == 32);
    for (const char* fine : {"final", "all", "sum", "every:1", "every:32"}) {
        r.output_mode = fine;
        CHECK_NOTHROW(programs::check_output_mode(r));
    }
    r.output_mode = "every:33";
    REQUIRE_THROWS_WITH(programs::check_output_mode(r),
                        Catch::Contains("--output-mode every:33 returns one micro-batch in every 33 of a host call, and a "
                                        "call runs 32 per replica (device iterations × gradient accumulation = 4 × 8)") &&
                            Catch::Contains("give N from 1 to 32"));
    r.output_mode = "every:64", r.gradient_accumulation = 16;  // D × G = 64: the last micro-batch of each call
    CHECK_NOTHROW(programs::check_output_mode(r));
    r.output_mode = "every:3x";
    REQUIRE_THROWS_WITH(programs::check_output_mode(r), Catch::Contains("takes a whole count N"));
    r.output_mode = "most";
    REQUIRE_THROWS_WITH(programs::check_output_mode(r), Catch::Contains("is not one of final, all, sum, every:N"));
    // A product beyond a size_t bounds nothing (the sample count is refused on its own).
    r.output_mode = "every:18446744073709551615", r.device_iterations = std::size_t{1} << 62;
    CHECK(programs::call_micro_batches(r) == SIZE_MAX);
    CHECK_NOTHROW(programs::check_output_mode(r));
}

TEST_CASE("a checkpoint's configuration text: what shapes the weights, and nothing else", "[programs]") {
    programs::train_request r;
    r.replicas = 2;
    const std::string text = programs::configuration_text(r, 256);
    CHECK_THAT(text, Catch::Contains(" R=2 input-group=1 "));
    r.input_replica_group = 2;  // the replicas of a group share an input slice: other samples, other weights
    CHECK(programs::configuration_text(r, 256) != text);
    r.input_replica_group = 1;
    r.eight_bit_io = false, r.optimizer_sharding = true, r.workers = 3, r.async_dataloader = false;  // no bit changes
    CHECK(programs::configuration_text(r, 256) == text);
}

TEST_CASE("datasets by shape, and the ones with no reader refused", "[programs]") {
    programs::train_request r;
    r.dataset = "imagenet";
    const auto s = programs::shape_of_dataset(r);
    CHECK(s.channels == 3);
    CHECK(s.height == 224);
    CHECK(s.images == 1'281'167);
    CHECK(s.classes == 1000);
    REQUIRE_THROWS_WITH(programs::load_dataset(r), Catch::Contains("--dataset imagenet has no reader"));
    r.dataset = "cifar10";
    CHECK(programs::shape_of_dataset(r).images == 50'000);
    REQUIRE_THROWS_WITH(programs::load_dataset(r), Catch::Contains("needs the directory"));
    r.dataset = "mnist";
    REQUIRE_THROWS_WITH(programs::shape_of_dataset(r), Catch::Contains("is not one of"));
    r.dataset = "synthetic", r.images = 100;
    CHECK(programs::epoch_images(r, programs::shape_of_dataset(r)) == 100);
}

TEST_CASE("session options: cuts by name, recomputation per stage, the host's processes", "[programs]") {
    const tessera::nn::resnet20<cfg::fp32> net(3, 10);
    programs::train_request r;
    r.strategy = "pipelined", r.ipus_per_replica = 3, r.split = {"layer2[0]", "layer3[0]"}, r.recompute = true;
    r.replicas = 2, r.instances = 2, r.gradient_accumulation = 5, r.loss_scaling = "static:64";
    using C = cfg::dispatched_config<cfg::fp32, cfg::pipelined<cfg::one_f_one_b, cfg::dynamic>, cfg::float_io>;
    const cfg::batching b = cfg::make_batching<C>(programs::counts_of(r));
    const auto settings = programs::session_options_of(r, net, b, programs::loader_options_of<C>(r, {}));
    REQUIRE(settings.first_units.size() == 3);
    CHECK(settings.first_units[1] == net.unit_index("layer2[0]"));
    CHECK(settings.recompute == std::vector<bool>{true, true, true});
    CHECK(settings.loading.instances == 2);
    CHECK(settings.loss_scale == 64.0);
    CHECK(settings.dynamic_loss_scaling == false);
    CHECK(settings.recompute_checkpoints.empty());
    r.recompute_checkpoints = {"layer3[1]", "layer1[2]"};
    CHECK(programs::session_options_of(r, net, b, programs::loader_options_of<C>(r, {})).recompute_checkpoints ==
          std::vector<std::size_t>{net.unit_index("layer3[1]"), net.unit_index("layer1[2]")});
    r.recompute_checkpoints = {"every-unit"};
    CHECK(programs::session_options_of(r, net, b, programs::loader_options_of<C>(r, {})).recompute_checkpoints.size() ==
          net.units() - 1);
    r.recompute_checkpoints = {"every-unit", "head"};
    REQUIRE_THROWS_WITH(programs::session_options_of(r, net, b, programs::loader_options_of<C>(r, {})),
                        Catch::Contains("every-unit stands alone"));
    r.recompute_checkpoints = {"layer9[0]"};
    REQUIRE_THROWS_WITH(programs::session_options_of(r, net, b, programs::loader_options_of<C>(r, {})),
                        Catch::Contains("no unit named 'layer9[0]'"));
    r.recompute_checkpoints = {};
    r.split = {"layer3[0]"};
    REQUIRE_THROWS_WITH(programs::session_options_of(r, net, b, programs::loader_options_of<C>(r, {})),
                        Catch::Contains("--split names 1 cuts, the strategy has 3 stages (give 2)"));
}

TEST_CASE("the IPUs of a replica: a phased model's stages share one", "[programs]") {
    programs::train_request r;
    r.strategy = "phased", r.ipus_per_replica = 3;
    CHECK(programs::stages_of(r) == 3);
    CHECK(programs::ipus_per_replica_of(r) == 1);
    CHECK(cfg::make_batching(cfg::description::of<cfg::dispatched_config<cfg::fp32, cfg::phased<cfg::dynamic>, cfg::float_io>>(), programs::counts_of(r))
              .ipus_per_replica == 1);  // as the batching counts them
    r.strategy = "pipelined";
    CHECK(programs::ipus_per_replica_of(r) == 3);
    r.strategy = "sharded";
    CHECK(programs::ipus_per_replica_of(r) == 3);
    r.strategy = "pipelined", r.schedule = "interleaved", r.virtual_stages = 2, r.ipus_per_replica = 2;
    CHECK(programs::stages_of(r) == 4);
    CHECK(programs::ipus_per_replica_of(r) == 2);
}

TEST_CASE("the transformer plan search: blocks per IPU, G, IPUs per replica and serializations tried",
          "[programs][plan]") {
    // Every split places each block once, every IPU after the first holds one, and IPU 0 (with the
    // embedding and the head) holds at most an even share; Graphcore's splits are among them.
    for (const std::size_t ipus : {2, 3, 4, 8}) {
        INFO(ipus << " IPUs");
        const auto splits = programs::layer_splits(24, ipus);
        CHECK(splits.size() == (24 + ipus - 1) / ipus + 1);
        for (const auto& split : splits) {
            REQUIRE(split.size() == ipus);
            std::size_t sum = 0;
            for (std::size_t i = 0; i < ipus; ++i) {
                sum += split[i];
                if (i > 0) CHECK(split[i] >= 1);
                if (i > 1) CHECK(split[i] >= split[i - 1]);  // the extra blocks on the last IPUs
                if (i > 1) CHECK(split[i] - split[1] <= 1);
            }
            CHECK(sum == 24);
            CHECK(split[0] <= (24 + ipus - 1) / ipus);
        }
    }
    const auto has = [](const auto& splits, std::vector<std::size_t> want) {
        return std::find(splits.begin(), splits.end(), want) != splits.end();
    };
    CHECK(has(programs::layer_splits(24, 4), {3, 7, 7, 7}));               // Graphcore's BERT-Large
    CHECK(has(programs::layer_splits(24, 8), {0, 3, 3, 3, 3, 4, 4, 4}));   // MLPerf v1.0's
    CHECK(has(programs::layer_splits(12, 4), {0, 4, 4, 4}));               // BERT-Base's
    CHECK(programs::layer_splits(24, 1).empty());
    CHECK(programs::layer_splits(2, 4).empty());  // 3 IPUs after the first, 2 blocks
    // The head's stage on IPU 0 makes S + 1 stages: 1F1B needs G >= 2(S + 1) - 1.
    CHECK(programs::transformer_accumulations(4) == std::vector<std::size_t>{9, 36, 144, 576, 2304});
    CHECK(programs::transformer_accumulations(1).front() == 1);
    CHECK(programs::transformer_stage_counts(16, 8) == std::vector<std::size_t>{1, 2, 4, 8});
    CHECK(programs::transformer_stage_counts(6, 8) == std::vector<std::size_t>{1, 2, 3, 6});
    CHECK(programs::serializations_of(30522) == std::vector<std::size_t>{1, 2, 3, 6});  // 2 x 3 x 5,087
    CHECK(programs::serializations_of(50257) == std::vector<std::size_t>{1});  // GPT-2's: 29 x 1,733
}

}  // namespace test_train_parts
