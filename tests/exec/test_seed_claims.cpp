// The PopTorch tutorials' claims, on their model and split (ResNet-101 on CIFAR-10, a 2-IPU pipeline
// cut before layer3[8]): tessera's modelled clock and memory plan must tell the same story.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "published_figures.hpp"
#include "published_transformers.hpp"
#include "tutorial_sweep.hpp"

namespace cfg = tessera::config;
namespace emu = tessera::emulator;
namespace exec = tessera::exec;
namespace programs = tessera::programs;

namespace {
const programs::seed_network& network() {
    static const programs::seed_network net(3, 10);
    return net;
}
}  // namespace

TEST_CASE("seed 000's table on the modelled clock: every step in the seeds' direction, ratios within 20 %",
          "[exec][seeds]") {
    std::vector<exec::epoch_estimate> e;
    for (const auto& row : programs::seed_rows) e.push_back(programs::dry_run_row(network(), row, {}, {}));
    for (std::size_t i = 1; i < programs::seed_rows.size(); ++i) {
        const auto& row = programs::seed_rows[i];
        const auto& before = programs::seed_rows[i - 1];
        if (row.seed != before.seed || row.epoch_seconds == 0) continue;
        const double seed_ratio = row.epoch_seconds / before.epoch_seconds, ratio = e[i].seconds / e[i - 1].seconds;
        INFO(row.seed << " " << row.step << ": modelled ratio " << ratio << ", the seed's " << seed_ratio);
        CHECK((ratio < 1) == (seed_ratio < 1));  // 000 and 001 (calibrated on 000 only): the same direction
        if (row.seed == "000") CHECK(std::abs(ratio / seed_ratio - 1) <= 0.2);
    }
    // 003: four replicas fed by one process stay host-bound, between what the tutorial says ("about
    // the same" as the 1-replica run) and what it measured (tqdm's rates: 6.3 s against 000's 8.5 s,
    // 0.74 of it); two processes sharing the loading are faster.
    const auto& one_replica = e[4];  // 000 +async
    CHECK(e[10].seconds <= one_replica.seconds);
    CHECK(e[10].seconds >= 0.74 * one_replica.seconds);
    CHECK(e[10].host_wait_seconds > e[10].device_seconds);
    CHECK(e[11].seconds < 0.75 * e[10].seconds);
    // Each step of 000 removes host time: the IPUs' own time changes little.
    CHECK(e[0].device_seconds < 0.2 * e[0].seconds);
    CHECK(e[4].host_wait_seconds < e[3].host_wait_seconds);
}

TEST_CASE("seed 001's memory claims: 16.16 needs much less than 32.32, and a larger G no more under 1F1B",
          "[exec][seeds]") {
    const auto& net = network();
    const tessera::optim::sgd sgd({.momentum = 0.9});
    const auto plan = [&]<class P, class Order>(std::size_t G) {
        using c = cfg::config<P, cfg::pipelined<Order, 2>, cfg::gradient_accumulation<cfg::dynamic>,
                              cfg::micro_batch<cfg::dynamic>>;
        const tessera::nn::resnet101<P> model(3, 10);
        return exec::dry_run<c>(model, sgd, programs::seed_sample, {.micro_batch = 64, .gradient_accumulation = G},
                                programs::cifar10_images,
                                {.record_trace = false, .first_units = {0, net.unit_index("layer3[8]")}}, 1)
            .memory;
    };
    const auto bytes_of = [](const exec::ipu_memory_plan& ipu, std::string_view what) {
        std::size_t n = 0;
        for (const auto& item : ipu.items)
            if (item.name.find(what) != std::string::npos) n += item.bytes;
        return n;
    };
    // "Using lower precision can reduce the memory usage dramatically": 16.16 halves the weights and
    // the activations; the gradient accumulators and the momentum stay in float, as PopTorch's SGD
    // keeps them by default (accum_type and velocity_accum_type: torch.float32), and 16-bit data
    // with PopTorch's default float partials adds their temporary float sums.
    const auto fp32 = plan.template operator()<cfg::fp32, cfg::one_f_one_b>(3);
    const auto half = plan.template operator()<cfg::half, cfg::one_f_one_b>(3);
    for (std::size_t i = 0; i < 2; ++i) {
        const double ratio = double(half.ipus[i].on_chip()) / double(fp32.ipus[i].on_chip());
        INFO("IPU " << i << ": 16.16 / 32.32 = " << ratio);
        CHECK(ratio < 0.8);
        CHECK(2 * bytes_of(half.ipus[i], "weights") == bytes_of(fp32.ipus[i], "weights"));
        // (batch norm's per-channel statistics stay in float and max pooling's argmax 32-bit: under 1 %)
        CHECK(2.0 * double(bytes_of(half.ipus[i], "activation")) ==
              Approx(double(bytes_of(fp32.ipus[i], "activation"))).epsilon(0.01));
        CHECK(bytes_of(half.ipus[i], "gradient accumulators") == bytes_of(fp32.ipus[i], "gradient accumulators"));
        CHECK(bytes_of(half.ipus[i], "optimiser state") == bytes_of(fp32.ipus[i], "optimiser state"));
    }
    // "More samples per weight update without increase in memory usage": PopTorch's pipeline stashes by
    // stages, not by G (1F1B); a GPipe schedule stashes every micro-batch.
    const auto g8 = plan.template operator()<cfg::half, cfg::one_f_one_b>(8);
    const auto gpipe3 = plan.template operator()<cfg::half, cfg::gpipe>(3);
    const auto gpipe8 = plan.template operator()<cfg::half, cfg::gpipe>(8);
    for (std::size_t i = 0; i < 2; ++i) {
        CHECK(g8.ipus[i].on_chip() == half.ipus[i].on_chip());
        const std::size_t stash3 = bytes_of(gpipe3.ipus[i], "activation stash");
        REQUIRE(stash3 > 0);
        CHECK(bytes_of(gpipe8.ipus[i], "activation stash") == stash3 / 3 * 8);
        CHECK(gpipe8.ipus[i].on_chip() - gpipe3.ipus[i].on_chip() == stash3 / 3 * 5);
    }
}

TEST_CASE("MLPerf's ResNet-50 configuration fits a GC200 with recomputation checkpoints, not with whole-stage recomputation",
          "[exec][seeds]") {
    // MLPerf Training v1.1, IPU-POD16: one IPU per replica, micro-batch 20, G = 10, 16.16, half partials.
    using c = cfg::config<cfg::half, cfg::gradient_accumulation<10>, cfg::micro_batch<20>, cfg::replication<16>,
                          cfg::eight_bit_io>;
    const tessera::nn::resnet50<cfg::half> net(3, 1000);
    const tessera::optim::sgd sgd({.momentum = 0.9});
    const auto run = [&](const exec::session_options& settings) {
        return exec::dry_run<c>(net, sgd, {1, 224, 224, 3}, {}, 1'281'167, settings, 1, exec::over_budget::reported);
    };
    constexpr auto half = tessera::emulator::partials_type::float16;
    const auto whole = run({.record_trace = false, .partials = half, .recompute = {true}});
    const auto checkpointed =
        run({.record_trace = false, .partials = half, .recompute_checkpoints = exec::checkpoint_every_unit(net)});
    CHECK_FALSE(whole.fits);  // the whole forward recomputed at once: as much as no recomputation
    CHECK(checkpointed.fits);
    // Checkpoints hold the units' inputs and one unit's activations at a time: far less than the
    // whole forward's.
    const auto activations = [](const exec::epoch_estimate& e) {
        std::size_t n = 0;
        for (const auto& item : e.memory.ipus[0].items)
            if (item.name.find("activation") != std::string::npos) n += item.bytes;
        return n;
    };
    CHECK(activations(checkpointed) < activations(whole) / 2);
    // Both recompute the whole forward once: the same modelled time.
    CHECK(checkpointed.call_device_seconds == Approx(whole.call_device_seconds).epsilon(1e-9));
}

TEST_CASE("published ResNet-50 results: training predictions within 25 %, every one within 2x, none fitted",
          "[exec][seeds]") {
    const tessera::nn::resnet50<cfg::half> net(3, 1000);
    std::size_t training = 0;
    for (const auto& f : programs::published_figures) {
        const auto e = programs::dry_run_figure(net, f);
        const double ratio = e.images_per_second / f.images_per_second;
        INFO(f.system << ": modelled " << e.images_per_second << " images/s, published " << f.images_per_second);
        CHECK(ratio > 0.5);  // none off by 2x or more
        CHECK(ratio < 2.0);
        if (f.shape == programs::run_shape::inference_on_one_ipu) continue;
        CHECK(std::abs(ratio - 1) <= 0.25);
        ++training;
    }
    CHECK(training >= 13);
    // Bow is a GC200 at 1.85 GHz and the C600 one at 1.5 GHz: the same cycles at their clock.
    CHECK(tessera::emulator::bow_ipu().fp16_flops == Approx(250e12 * 1.85 / 1.33));
    CHECK(tessera::emulator::c600_ipu().fp16_flops == Approx(250e12 * 1.5 / 1.33));
}

TEST_CASE("published BERT pre-training results: each prediction's error as docs/validation.md gives it, none off by 2x, "
          "every configuration fits as it ran", "[exec][seeds][transformer]") {
    // The errors docs/validation.md prints (tessera-sweep --published), in the rows' order: a change of
    // the model moves them, and the page is then re-run. Not fitted: no constant was chosen by them.
    const std::vector<double> documented = {0.318, 0.575, 0.394, 0.655, 0.219, 0.279, 0.293, 0.389, 0.363, 0.508, 0.400, 0.269, 0.308};
    REQUIRE(programs::published_transformers.size() == documented.size());
    std::vector<std::size_t> sizes;
    for (std::size_t i = 0; i < documented.size(); ++i) {
        const auto& f = programs::published_transformers[i];
        const auto e = programs::dry_run_transformer(f);
        const double ratio = e.images_per_second / f.sequences_per_second;
        INFO(f.system << ": modelled " << e.images_per_second << " sequences/s, published " << f.sequences_per_second);
        CHECK(ratio - 1 == Approx(documented[i]).margin(0.002));
        CHECK(ratio > 0.5);
        CHECK(ratio < 2.0);
        CHECK(e.fits);  // as every configuration ran
        const std::size_t ipus = f.replicas * f.layers_per_ipu.size();
        if (std::find(sizes.begin(), sizes.end(), ipus) == sizes.end()) sizes.push_back(ipus);
    }
    CHECK(sizes.size() >= 3);  // POD16, POD64 and POD128
}
