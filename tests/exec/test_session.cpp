#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "../emulator/deadline.hpp"
#include "tessera/config.hpp"
#include "tessera/data/in_memory.hpp"
#include "tessera/data/loader.hpp"
#include "tessera/data/micro_batches.hpp"
#include "tessera/exec/session.hpp"
#include "tessera/exec/token_feed.hpp"
#include "tiny_model.hpp"

namespace test_session {

namespace cfg = tessera::config;
namespace exec = tessera::exec;
using tessera::test::synthetic_feed;
using tessera::test::tiny_mlp;

namespace {
constexpr std::size_t batch = 4, in_width = 5, out_width = 2;
tiny_mlp model2() { return tiny_mlp({in_width, 7, out_width}, batch, 0.1f, 99); }

// Trains with the plain sequential loop over the same micro-batches (one replica): the reference.
std::vector<float> sequential(tiny_mlp m, std::size_t G, std::size_t D, const synthetic_feed& feed) {
    for (std::size_t d = 0; d < D; ++d) {
        for (std::size_t k = 0; k < G; ++k) {
            auto [x, y] = feed(0, d, k);
            auto [h, s0] = m.forward(0, std::move(x));
            auto [o, s1] = m.forward(1, std::move(h));
            auto g = m.loss(o, y).second;
            g = m.backward(1, std::move(g), std::move(s1));
            (void)m.backward(0, std::move(g), std::move(s0));
        }
        m.update(0, 1.0f / float(G));
        m.update(1, 1.0f / float(G));
    }
    return m.weights();
}
}  // namespace

TEST_CASE("training_model compiles with a progress bar and trains like the sequential loop", "[exec][session][threads]") {
    using c = cfg::config<cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<4>, cfg::device_iterations<3>,
                          cfg::all>;
    const synthetic_feed feed{batch, in_width, out_width};
    tiny_mlp host = model2();
    std::ostringstream progress;
    auto run = exec::training_model<c>(
        host, {.micro_batch = batch},
        {.progress = &progress, .locations = {.optimiser_state = exec::location::streaming_memory}});
    CHECK(run.costs().locations.optimiser_state == exec::location::streaming_memory);
    CHECK(progress.str().rfind("Graph compilation: 100%|", 0) == 0);
    CHECK(run.batching().combined_batch() == batch * 4 * 3);
    CHECK(run.program().request.micro_batches == 4);
    const auto result = tessera::test::within_deadline(60, "session call", [&] { return run(feed); });
    CHECK(result.losses[0].size() == 12);
    run.copy_weights_to(host);
    CHECK(host.weights() == sequential(model2(), 4, 3, feed));
    // Sessions are reusable: a second call continues from the trained weights.
    const auto second = tessera::test::within_deadline(60, "second call", [&] { return run(feed); });
    CHECK(second.losses[0].size() == 12);
    CHECK(run.model().weights() != host.weights());
    // Loading host weights back onto the device restarts from them: the first call again.
    run.load_weights(model2());
    (void)tessera::test::within_deadline(60, "third call", [&] { return run(feed); });
    CHECK(run.model().weights() == host.weights());
}

TEST_CASE("replicas and input groups: replicas of a group get the same slice", "[exec][session][threads]") {
    using grouped = cfg::config<cfg::sharded<2>, cfg::gradient_accumulation<2>, cfg::replication<4, 2>,
                                cfg::all>;
    const synthetic_feed feed{batch, in_width, out_width};
    auto run = exec::training_model<grouped>(model2(), {.micro_batch = batch});
    CHECK(run.batching().local_replicas() == 4);
    const auto result = tessera::test::within_deadline(60, "grouped call", [&] { return run(feed); });
    // Replicas 0 and 1 form group 0, replicas 2 and 3 group 1: the same data, the same losses.
    CHECK(result.losses[0] == result.losses[1]);
    CHECK(result.losses[2] == result.losses[3]);
    CHECK(result.losses[0] != result.losses[2]);
    for (std::size_t r = 1; r < 4; ++r) CHECK(run.replica(r).weights() == run.model().weights());
}

TEST_CASE("a call from a combined batch of micro-batches", "[exec][session][threads]") {
    using c = cfg::config<cfg::pipelined<cfg::gpipe, 2>, cfg::gradient_accumulation<3>, cfg::device_iterations<2>>;
    const synthetic_feed feed{batch, in_width, out_width};
    auto by_feed = exec::training_model<c>(model2(), {.micro_batch = batch});
    auto by_batch = exec::training_model<c>(model2(), {.micro_batch = batch});
    std::vector<std::pair<std::vector<float>, std::vector<float>>> combined;
    for (std::size_t d = 0; d < 2; ++d)
        for (std::size_t m = 0; m < 3; ++m) combined.push_back(feed(0, d, m));
    const auto a = tessera::test::within_deadline(60, "feed", [&] { return by_feed(feed); });
    const auto b = tessera::test::within_deadline(60, "batch", [&] {
        return by_batch(std::span<const std::pair<std::vector<float>, std::vector<float>>>(combined));
    });
    CHECK(a.losses == b.losses);
    CHECK(a.losses[0].size() == 1);  // training default: final
    CHECK(by_feed.model().weights() == by_batch.model().weights());
    combined.pop_back();
    REQUIRE_THROWS_AS(by_batch(std::span<const std::pair<std::vector<float>, std::vector<float>>>(combined)),
                      cfg::batch_error);
}

TEST_CASE("inference_model runs D micro-batches per call and returns all outputs", "[exec][session][threads]") {
    using c = cfg::config<cfg::pipelined<cfg::gpipe, 2>, cfg::gradient_accumulation<4>, cfg::device_iterations<3>>;
    const synthetic_feed feed{batch, in_width, out_width};
    tiny_mlp host = model2();
    auto eval = exec::inference_model<c>(host, {.micro_batch = batch});
    CHECK(eval.program().request.micro_batches == 3);
    CHECK_FALSE(eval.program().request.training);
    const auto result = tessera::test::within_deadline(60, "inference", [&] { return eval(feed); });
    REQUIRE(result.outputs[0].size() == 3);
    for (std::size_t d = 0; d < 3; ++d) {
        tiny_mlp ref = host;
        auto x = feed(0, d, 0).first;
        x = ref.forward(0, std::move(x)).first;
        x = ref.forward(1, std::move(x)).first;
        CHECK(result.outputs[0][d] == x);
    }
}

TEST_CASE("session configuration errors are raised at compilation", "[exec][session]") {
    using two_stage = cfg::config<cfg::sharded<2>>;
    const tiny_mlp three({in_width, 4, 4, out_width}, batch, 0.1f, 1);
    REQUIRE_THROWS_WITH(exec::training_model<two_stage>(three, {.micro_batch = batch}),
                        Catch::Contains("strategy has 2 stages, the model 3"));
    using dyn = cfg::config<cfg::pipelined<cfg::gpipe, 2>, cfg::gradient_accumulation<cfg::dynamic>>;
    REQUIRE_THROWS_AS(exec::training_model<dyn>(model2(), {.micro_batch = batch, .gradient_accumulation = 2}),
                      cfg::pipeline_depth_error);
}

TEST_CASE("token_feed masks each window for BERT alike in every combined batch's layout, next-token labels otherwise",
          "[exec][text][masked_lm]") {
    // 24 windows of 9 tokens (T = 8): window i holds i·9 + t modulo 256.
    constexpr std::size_t windows = 24, T1 = 9, T = T1 - 1;
    std::vector<std::uint16_t> values;
    std::vector<tessera::data::label_t> labels;
    for (std::size_t i = 0; i < windows; ++i) {
        for (std::size_t t = 0; t < T1; ++t) values.push_back(static_cast<std::uint16_t>((i * T1 + t) % 256));
        labels.push_back(0);
    }
    const tessera::data::in_memory_dataset<std::uint16_t> dataset({1, 1, T1}, 256, values, labels, "windows");
    const tessera::data::masked_lm masking{.seed = 3, .probability = 0.5, .mask_token = 300, .vocabulary = 256};
    // Per dataset index: the ids and labels fed, in each layout of an 8-window combined batch.
    using fed = std::map<std::size_t, std::pair<std::vector<std::uint32_t>, std::vector<std::int32_t>>>;
    const auto feed_all = [&](cfg::options counts, bool mask) {
        using c = cfg::config<cfg::fp32, cfg::single, cfg::gradient_accumulation<cfg::dynamic>,
                              cfg::replication<cfg::dynamic>, cfg::micro_batch<cfg::dynamic>>;
        const auto b = cfg::make_batching<c>(counts);
        tessera::data::data_loader<tessera::data::in_memory_dataset<std::uint16_t>> loader(dataset, b, {.shuffle = true, .seed = 5});
        fed out;
        for (auto& batch : loader) {
            const exec::token_feed<cfg::fp32> feed = mask ? exec::token_feed<cfg::fp32>(batch, b, masking)
                                                          : exec::token_feed<cfg::fp32>(batch, b);
            for (std::size_t g = 0; g < b.local_replicas(); ++g)
                for (std::size_t m = 0; m < b.gradient_accumulation; ++m) {
                    auto [input, token_labels] = feed(g, 0, m);
                    const auto x = std::move(input).prepare();
                    const auto mb = tessera::data::micro_batch(batch, b, 0, g, m);
                    for (std::size_t row = 0; row < b.micro_batch; ++row) {
                        auto& [ids, ls] = out[mb.indices[row]];
                        for (std::size_t t = 0; t < T; ++t) ids.push_back(tessera::nn::token_id(x.data()[row * T + t]));
                        ls.assign(token_labels.tokens.begin() + std::ptrdiff_t(row * T), token_labels.tokens.begin() + std::ptrdiff_t((row + 1) * T));
                    }
                }
        }
        return out;
    };
    const fed one = feed_all({.micro_batch = 2, .gradient_accumulation = 4, .replicas = 1}, true);
    const fed two = feed_all({.micro_batch = 2, .gradient_accumulation = 2, .replicas = 2}, true);
    const fed four = feed_all({.micro_batch = 1, .gradient_accumulation = 2, .replicas = 4}, true);
    REQUIRE(one.size() == windows);
    CHECK(two == one);
    CHECK(four == one);
    std::size_t chosen = 0, masked = 0;
    for (const auto& [i, got] : one) {
        const auto& [ids, ls] = got;
        for (std::size_t t = 0; t < T; ++t) {
            const auto original = static_cast<std::int32_t>((i * T1 + t) % 256);
            if (ls[t] == tessera::data::masked_lm::ignore) {
                CHECK(ids[t] == std::uint32_t(original));  // not chosen: fed as it is
                continue;
            }
            ++chosen;
            CHECK(ls[t] == original);  // chosen: labelled with its token
            masked += ids[t] == masking.mask_token ? 1 : 0;
        }
    }
    CHECK(chosen > 60);  // of 192 positions, half chosen on average
    CHECK(chosen < 132);
    CHECK(masked > chosen / 2);
    // Without masking: next-token labels, the inputs untouched.
    for (const auto& [i, got] : feed_all({.micro_batch = 2, .gradient_accumulation = 4, .replicas = 1}, false))
        for (std::size_t t = 0; t < T; ++t) {
            CHECK(got.first[t] == (i * T1 + t) % 256);
            CHECK(got.second[t] == std::int32_t((i * T1 + t + 1) % 256));
        }
}

}  // namespace test_session
