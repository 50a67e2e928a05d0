#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include "../emulator/deadline.hpp"
#include "tessera/config/output_mode.hpp"
#include "tessera/config/strategy.hpp"
#include "tessera/exec/executor.hpp"
#include "tiny_model.hpp"

namespace test_executor {

namespace cfg = tessera::config;
namespace exec = tessera::exec;
namespace emu = tessera::emulator;
using tessera::test::synthetic_feed;
using tessera::test::tiny_mlp;

namespace {

constexpr std::size_t batch = 4, in_width = 6, out_width = 3;

tiny_mlp make_model(std::size_t stages) {
    std::vector<std::size_t> widths{in_width};
    for (std::size_t s = 1; s < stages; ++s) widths.push_back(8 + s);
    widths.push_back(out_width);
    return tiny_mlp(widths, batch, 0.05f, 1234);
}

struct reference_run {
    std::vector<float> weights;
    std::vector<float> losses;  // replica 0, in micro-batch order over the call
};

// The plain sequential reference for R replicas: each replica accumulates its G micro-batches in
// order, the replicas' gradients are summed in replica order, then every replica updates.
reference_run sequential(tiny_mlp model, std::size_t R, std::size_t G, std::size_t D, const synthetic_feed& feed) {
    std::vector<tiny_mlp> reps(R, model);
    reference_run out;
    const std::size_t S = model.stages();
    for (std::size_t d = 0; d < D; ++d) {
        for (std::size_t r = 0; r < R; ++r)
            for (std::size_t m = 0; m < G; ++m) {
                auto [x, y] = feed(r, d, m);
                std::vector<tiny_mlp::stash> stashes;
                for (std::size_t s = 0; s < S; ++s) {
                    auto [next, st] = reps[r].forward(s, std::move(x));
                    stashes.push_back(std::move(st));
                    x = std::move(next);
                }
                auto [loss, g] = reps[r].loss(x, y);
                if (r == 0) out.losses.push_back(loss);
                for (std::size_t s = S; s-- > 0;) g = reps[r].backward(s, std::move(g), std::move(stashes[s]));
            }
        for (std::size_t s = 0; s < S && R > 1; ++s) {
            const std::size_t n = reps[0].gradients(s).size();
            for (std::size_t i = 0; i < n; ++i) {
                float sum = reps[0].gradients(s)[i];
                for (std::size_t r = 1; r < R; ++r) sum += reps[r].gradients(s)[i];
                for (std::size_t r = 0; r < R; ++r) reps[r].gradients(s)[i] = sum;
            }
        }
        for (auto& rep : reps)
            for (std::size_t s = 0; s < S; ++s) rep.update(s, 1.0f / float(G * R));
    }
    out.weights = reps[0].weights();
    return out;
}

// One replica, R × G micro-batches per update in a flat order: a different summation order.
std::vector<float> flat(tiny_mlp model, std::size_t R, std::size_t G, std::size_t D, const synthetic_feed& feed) {
    const std::size_t S = model.stages();
    for (std::size_t d = 0; d < D; ++d) {
        for (std::size_t r = 0; r < R; ++r)
            for (std::size_t m = 0; m < G; ++m) {
                auto [x, y] = feed(r, d, m);
                std::vector<tiny_mlp::stash> stashes;
                for (std::size_t s = 0; s < S; ++s) {
                    auto [next, st] = model.forward(s, std::move(x));
                    stashes.push_back(std::move(st));
                    x = std::move(next);
                }
                auto g = model.loss(x, y).second;
                for (std::size_t s = S; s-- > 0;) g = model.backward(s, std::move(g), std::move(stashes[s]));
            }
        for (std::size_t s = 0; s < S; ++s) model.update(s, 1.0f / float(G * R));
    }
    return model.weights();
}

template <class Strategy>
exec::run_result<tiny_mlp::tensor> run_strategy(std::vector<tiny_mlp>& models, std::size_t G, std::size_t D,
                                                const synthetic_feed& feed, exec::output_selection out = {},
                                                emu::device_spec spec = {}) {
    const std::size_t R = models.size();
    exec::executor<tiny_mlp> ex(exec::make_schedule<Strategy>(G, true, R), exec::costs_of(models[0]), R, spec);
    return tessera::test::within_deadline(120, "executor run", [&] {
        return ex.run(std::span(models), feed, D, out);
    });
}

}  // namespace

TEMPLATE_TEST_CASE("correctness anchor: every strategy reproduces the sequential reference bit for bit",
                   "[exec][anchor][threads]", cfg::sharded<2>, cfg::sharded<4>, (cfg::pipelined<cfg::gpipe, 2>),
                   (cfg::pipelined<cfg::gpipe, 4>), (cfg::pipelined<cfg::one_f_one_b, 2>),
                   (cfg::pipelined<cfg::one_f_one_b, 4>), cfg::phased<2>, cfg::phased<4>,
                   (cfg::pipelined<cfg::one_f_one_b, 4, cfg::ipu_map<0, 0, 1, 1>>),
                   (cfg::pipelined<cfg::zero_bubble_h1, 4>), (cfg::pipelined<cfg::zero_bubble_h2, 4>),
                   (cfg::pipelined<cfg::looped_bfs<2>, 4>)) {
    constexpr std::size_t S = TestType::stages, G = 2 * S, D = 3;
    const synthetic_feed feed{batch, in_width, out_width};
    const tiny_mlp initial = make_model(S);
    for (std::size_t R : {1u, 2u, 4u}) {
        INFO("replicas: " << R);
        std::vector<tiny_mlp> models(R, initial);
        const auto result = run_strategy<TestType>(models, G, D, feed, {cfg::output_kind::all});
        const auto reference = sequential(initial, R, G, D, feed);
        for (std::size_t r = 0; r < R; ++r) CHECK(models[r].weights() == reference.weights);  // bit-identical
        CHECK(result.losses[0] == reference.losses);
        CHECK(models[0].weights() != initial.weights());  // it did train
        // Against one replica with R × G micro-batches the summation order differs: close, not equal.
        const auto other_order = flat(initial, R, G, D, feed);
        for (std::size_t k = 0; k < other_order.size(); ++k)
            REQUIRE(models[0].weights()[k] == Approx(other_order[k]).margin(1e-5).epsilon(1e-4));
    }
}

TEST_CASE("the threaded executor's modelled clocks equal the dry run's", "[exec][threads]") {
    const synthetic_feed feed{batch, in_width, out_width};
    const emu::device_spec spec{.host_sync_latency = 0};
    std::vector<tiny_mlp> models(1, make_model(4));
    const auto sched = exec::make_schedule<cfg::pipelined<cfg::one_f_one_b, 4>>(8);
    const auto result = run_strategy<cfg::pipelined<cfg::one_f_one_b, 4>>(models, 8, 2, feed, {}, spec);
    const auto dry = exec::simulate(sched, exec::costs_of(models[0]), spec, 2);
    REQUIRE(result.clocks.size() == 4);
    for (std::size_t i = 0; i < 4; ++i) {
        CHECK(result.clocks[i].now() == dry[i].now());
        CHECK(result.clocks[i].trace().size() == dry[i].trace().size());
    }
    CHECK(result.modelled_seconds > 0);
    CHECK(result.wall_seconds > 0);
}

TEST_CASE("an executor's lock-step clocks follow each call's shape: iterations and outputs", "[exec][threads]") {
    // Each call's clocks are the dry run of that call; calls of the shape of the one before reuse its
    // replay, and a call of another shape replays again.
    const synthetic_feed feed{batch, in_width, out_width};
    const emu::device_spec spec{.host_sync_latency = 0};
    std::vector<tiny_mlp> models(1, make_model(4));
    auto request = exec::request_for<cfg::pipelined<cfg::one_f_one_b, 4>>(8, true, 1);
    request.lock_step = true;
    const auto sched = exec::make_schedule(request);
    REQUIRE(sched.lock_step_cycles());
    exec::executor<tiny_mlp> ex(sched, exec::costs_of(models[0]), 1, spec);
    const exec::output_selection all{cfg::output_kind::all}, last{};
    for (const auto& [D, out] : {std::pair{std::size_t(2), last}, std::pair{std::size_t(2), last},
                                 std::pair{std::size_t(3), last}, std::pair{std::size_t(3), all},
                                 std::pair{std::size_t(2), last}}) {
        INFO("D = " << D << ", every output: " << (out.kind == cfg::output_kind::all));
        const auto result = tessera::test::within_deadline(120, "executor run", [&] {
            return ex.run(std::span(models), feed, D, out);
        });
        const auto dry = exec::simulate(sched, exec::costs_of(models[0]), spec, D, out);
        REQUIRE(result.clocks.size() == 4);
        for (std::size_t i = 0; i < 4; ++i) {
            CHECK(result.clocks[i].now() == dry[i].now());
            CHECK(result.clocks[i].trace().size() == dry[i].trace().size());
        }
    }
}

namespace {

/// tiny_mlp with the dynamic-loss-scaling members: stage `poisoned_stage` of the replica whose model
/// has it set finds a non-finite gradient in its step `poisoned_step` (counted per stage).
struct overflowing_mlp : tiny_mlp {
    explicit overflowing_mlp(const tiny_mlp& m) : tiny_mlp(m) {}
    long poisoned_stage = -1;
    std::size_t poisoned_step = 0;
    std::vector<std::size_t> steps = std::vector<std::size_t>(8, 0), skipped = std::vector<std::size_t>(8, 0);

    tensor backward(std::size_t s, tensor g, stash st) {
        auto gx = tiny_mlp::backward(s, std::move(g), std::move(st));
        if (static_cast<long>(s) == poisoned_stage && steps[s] == poisoned_step)
            gradients(s)[0] = std::numeric_limits<float>::infinity();
        return gx;
    }
    [[nodiscard]] bool gradients_finite(std::size_t s) {
        for (const float v : gradients(s))
            if (!std::isfinite(v)) return false;
        return true;
    }
    void skip_update(std::size_t s) {
        for (auto& v : gradients(s)) v = 0.0f;
        ++skipped[s];
        ++steps[s];
    }
    void update(std::size_t s, float scale) {
        tiny_mlp::update(s, scale);
        ++steps[s];
    }
};
static_assert(exec::OverflowCheckedModel<overflowing_mlp>);

template <class Strategy>
exec::schedule voting_schedule(std::size_t G, std::size_t R) {
    auto request = exec::request_for<Strategy>(G, true, R);
    request.check_overflow = true;
    return exec::make_schedule(request);
}

}  // namespace

TEST_CASE("an overflow in one stage of one replica skips the step on every stage of every replica", "[exec][threads]") {
    using strategy = cfg::pipelined<cfg::one_f_one_b, 3>;
    constexpr std::size_t R = 2, G = 5;
    const synthetic_feed feed{batch, in_width, out_width};
    const tiny_mlp base = make_model(3);
    overflowing_mlp initial(base);
    exec::executor<overflowing_mlp> ex(voting_schedule<strategy>(G, R), exec::costs_of(initial), R);
    auto run = [&](std::vector<overflowing_mlp>& models, std::size_t D) {
        tessera::test::within_deadline(120, "voting run", [&] { return ex.run(std::span(models), feed, D, {}); });
    };
    // A: steps 0 and 1 update, step 2 overflows in stage 1 of replica 0 only. B: steps 0 and 1 alone.
    std::vector<overflowing_mlp> a(R, initial), b(R, initial);
    a[0].poisoned_stage = 1;
    a[0].poisoned_step = 2;
    run(a, 3);
    run(b, 2);
    for (std::size_t r = 0; r < R; ++r) {
        INFO("replica " << r);
        for (std::size_t s = 0; s < 3; ++s) {
            CHECK(a[r].skipped[s] == 1);  // the all-reduce spread the overflow, the vote every stage
            CHECK(a[r].steps[s] == 3);
        }
        CHECK(a[r].weights() == b[r].weights());  // the skipped step changed nothing
        CHECK(std::ranges::all_of(a[r].weights(), [](float v) { return std::isfinite(v); }));
    }
    // The skipped step's gradients were dropped: one more step on each gives the same weights again.
    run(a, 1);
    run(b, 1);
    for (std::size_t r = 0; r < R; ++r) CHECK(a[r].weights() == b[r].weights());
    CHECK(a[0].weights() != initial.weights());

    // The modelled clocks of a voting schedule still equal the dry run's.
    const emu::device_spec spec{.host_sync_latency = 0};
    exec::executor<overflowing_mlp> timed(voting_schedule<strategy>(G, R), exec::costs_of(initial), R, spec);
    const auto dry = exec::simulate(voting_schedule<strategy>(G, R), exec::costs_of(initial), spec, 2);
    std::vector<overflowing_mlp> c(R, initial);
    const auto result =
        tessera::test::within_deadline(120, "voting clocks", [&] { return timed.run(std::span(c), feed, 2, {}); });
    for (std::size_t i = 0; i < 3; ++i) {
        CHECK(result.clocks[i].now() == dry[i].now());
        CHECK(result.clocks[i].trace().size() == dry[i].trace().size());
    }
}

TEST_CASE("output modes select micro-batches as PopTorch does", "[exec][threads]") {
    const synthetic_feed feed{batch, in_width, out_width};
    constexpr std::size_t G = 4, D = 3;
    using strategy = cfg::pipelined<cfg::gpipe, 2>;
    const tiny_mlp initial = make_model(2);
    const auto reference = sequential(initial, 1, G, D, feed).losses;  // 12 losses
    auto run = [&](exec::output_selection o) {
        std::vector<tiny_mlp> models(1, initial);
        return run_strategy<strategy>(models, G, D, feed, o);
    };
    const auto all = run(exec::output_selection::of<cfg::all>());
    CHECK(all.losses[0] == reference);
    const auto final = run(exec::output_selection::of<cfg::final>());
    CHECK(final.losses[0] == std::vector<float>{reference.back()});
    CHECK(final.selected[0] == std::vector<std::size_t>{11});
    const auto every = run(exec::output_selection::of<cfg::every_n<5>>());
    CHECK(every.losses[0] == std::vector<float>{reference[4], reference[9]});
    const auto sum = run(exec::output_selection::of<cfg::sum>());
    float expected = 0;
    for (float l : reference) expected += l;
    CHECK(sum.losses[0] == std::vector<float>{expected});
}

TEST_CASE("recomputation gives the same weights with a smaller stash and more modelled FLOPs", "[exec][threads]") {
    const synthetic_feed feed{batch, in_width, out_width};
    using strategy = cfg::pipelined<cfg::gpipe, 2>;
    tiny_mlp initial = make_model(2);
    std::vector<tiny_mlp> plain(1, initial);
    const auto a = run_strategy<strategy>(plain, 4, 2, feed);
    initial.recompute = true;
    std::vector<tiny_mlp> recomputed(1, initial);
    const auto b = run_strategy<strategy>(recomputed, 4, 2, feed);
    CHECK(plain[0].weights() == recomputed[0].weights());
    CHECK(b.clocks[0].total(emu::activity::recompute) > 0);
    CHECK(a.clocks[0].total(emu::activity::recompute) == 0);
    const auto sched = exec::make_schedule<strategy>(4);
    const auto plan_a = exec::plan_memory(sched, exec::costs_of(plain[0]));
    const auto plan_b = exec::plan_memory(sched, exec::costs_of(recomputed[0]));
    CHECK(plan_b.ipus[0].on_chip() < plan_a.ipus[0].on_chip());
}

TEST_CASE("inference runs forwards only and returns every output", "[exec][threads]") {
    const synthetic_feed feed{batch, in_width, out_width};
    const tiny_mlp initial = make_model(4);
    constexpr std::size_t D = 5;
    std::vector<tiny_mlp> models(2, initial);
    exec::executor<tiny_mlp> ex(exec::make_schedule<cfg::pipelined<cfg::gpipe, 4>>(D, false, 2),
                                exec::costs_of(initial), 2);
    const auto result = tessera::test::within_deadline(60, "inference", [&] {
        return ex.run(std::span(models), feed, 1, exec::output_selection::of<cfg::all>());
    });
    for (std::size_t r = 0; r < 2; ++r) {
        REQUIRE(result.outputs[r].size() == D);
        for (std::size_t m = 0; m < D; ++m) {
            tiny_mlp ref = initial;
            auto x = feed(r, 0, m).first;
            for (std::size_t s = 0; s < 4; ++s) x = ref.forward(s, std::move(x)).first;
            CHECK(result.outputs[r][m] == x);
        }
    }
    CHECK(models[0].weights() == initial.weights());
}

TEMPLATE_TEST_CASE("a failing stage surfaces its exception at the caller, without deadlock", "[exec][threads]",
                   cfg::sharded<4>, (cfg::pipelined<cfg::gpipe, 4>), (cfg::pipelined<cfg::one_f_one_b, 4>),
                   cfg::phased<4>) {
    const synthetic_feed feed{batch, in_width, out_width};
    for (std::size_t R : {1u, 2u}) {
        for (long failing : {0L, 2L, 3L}) {
            tiny_mlp faulty = make_model(4);
            faulty.fail_stage = failing;
            faulty.fail_countdown = 3;
            std::vector<tiny_mlp> models(R, faulty);
            exec::executor<tiny_mlp> ex(exec::make_schedule<TestType>(8, true, R), exec::costs_of(faulty), R);
            const std::string what = tessera::test::error_within_deadline<std::domain_error>(60, "failing stage", [&] {
                (void)ex.run(std::span(models), feed, 2, {});
            });
            CHECK(what == "tiny_mlp: stage " + std::to_string(failing) + " failed");
            // The executor is usable again once the fault is gone.
            for (auto& m : models) m.fail_stage = -1;
            CHECK_NOTHROW(tessera::test::within_deadline(60, "rerun", [&] { return ex.run(std::span(models), feed, 1, {}); }));
        }
    }
}

TEST_CASE("a failing host feed surfaces its exception at the caller", "[exec][threads]") {
    const synthetic_feed good{batch, in_width, out_width};
    auto bad = [&](std::size_t r, std::size_t d, std::size_t m) {
        if (r == 1 && m == 2) throw std::runtime_error("corrupt sample in replica 1");
        return good(r, d, m);
    };
    std::vector<tiny_mlp> models(2, make_model(2));
    exec::executor<tiny_mlp> ex(exec::make_schedule<cfg::pipelined<cfg::one_f_one_b, 2>>(4, true, 2),
                                exec::costs_of(models[0]), 2);
    const std::string what = tessera::test::error_within_deadline<std::runtime_error>(60, "failing feed", [&] {
        (void)ex.run(std::span(models), bad, 2, {});
    });
    CHECK(what == "corrupt sample in replica 1");
}

TEST_CASE("a feed that fails at once, many times: the abort it starts never outlives the call", "[exec][threads]") {
    // The feeder's abort runs on its own thread while the devices fail and join; run() must not free
    // the abort actions under it (found by ASan/TSan in a loop like this one).
    const synthetic_feed good{batch, in_width, out_width};
    std::vector<tiny_mlp> models(2, make_model(2));
    exec::executor<tiny_mlp> ex(exec::make_schedule<cfg::pipelined<cfg::one_f_one_b, 2>>(4, true, 2),
                                exec::costs_of(models[0]), 2);
    for (int k = 0; k < 100; ++k) {
        auto bad = [&](std::size_t r, std::size_t d, std::size_t m) {
            if (r == std::size_t(k % 2) && m == std::size_t(k % 3)) throw std::runtime_error("bad sample");
            return good(r, d, m);
        };
        const std::string what = tessera::test::error_within_deadline<std::runtime_error>(60, "failing feed", [&] {
            (void)ex.run(std::span(models), bad, 1, {});
        });
        REQUIRE(what == "bad sample");
    }
    CHECK_NOTHROW(tessera::test::within_deadline(60, "rerun", [&] { return ex.run(std::span(models), good, 1, {}); }));
}

TEST_CASE("a model over the device budget fails at compilation with out_of_device_memory", "[exec]") {
    const tiny_mlp model = make_model(2);
    const emu::device_spec tiny_ipu{.tiles = 1, .memory_per_tile = 256};
    try {
        exec::executor<tiny_mlp> ex(exec::make_schedule<cfg::pipelined<cfg::gpipe, 2>>(4), exec::costs_of(model), 1,
                                    tiny_ipu);
        FAIL("no exception");
    } catch (const emu::out_of_device_memory& e) {
        CHECK(e.ipu() == 0);
        CHECK(e.budget() == 256);
        CHECK(std::string(e.what()).find("stage 0 activation stash (4 micro-batches)") != std::string::npos);
    }
    REQUIRE_THROWS_AS(exec::executor<tiny_mlp>(exec::make_schedule<cfg::sharded<2>>(4, true, 2),
                                               exec::costs_of(model), 1),
                      cfg::config_error);
}

TEST_CASE("one failing replica wakes the others waiting in the all-reduce", "[exec][threads]") {
    const synthetic_feed feed{batch, in_width, out_width};
    for (long failing_stage : {0L, 3L}) {
        std::vector<tiny_mlp> models(4, make_model(4));
        models[2].fail_stage = failing_stage;  // only replica 2, after a few micro-batches
        models[2].fail_countdown = 9;
        exec::executor<tiny_mlp> ex(exec::make_schedule<cfg::pipelined<cfg::one_f_one_b, 4>>(8, true, 4),
                                    exec::costs_of(models[0]), 4);
        const std::string what = tessera::test::error_within_deadline<std::domain_error>(60, "failing replica", [&] {
            (void)ex.run(std::span(models), feed, 3, {});
        });
        CHECK(what == "tiny_mlp: stage " + std::to_string(failing_stage) + " failed");
    }
}

TEST_CASE("a cross-process reduction hook: two identical processes train like one", "[exec][threads]") {
    // Each "other process" holds the same gradients, so the sum over 2 processes is twice the local
    // sum and the mean divides by twice the replicas: exactly the single-process result.
    const synthetic_feed feed{batch, in_width, out_width};
    const tiny_mlp initial = make_model(2);
    for (std::size_t R : {1u, 2u}) {
        std::vector<tiny_mlp> models(R, initial);
        std::atomic<int> calls{0};
        exec::cross_process_reduction across{[&](std::size_t, std::span<float> g) {
                                                 ++calls;
                                                 for (auto& v : g) v = v + v;
                                             },
                                             2};
        exec::executor<tiny_mlp> ex(exec::make_schedule<cfg::pipelined<cfg::gpipe, 2>>(4, true, 2 * R),
                                    exec::costs_of(initial), R, {}, cfg::reduction::mean, true, across);
        tessera::test::within_deadline(60, "cross-process", [&] { return ex.run(std::span(models), feed, 2, {}); });
        CHECK(calls == 2 * 2);  // per stage, per update
        CHECK(models[0].weights() == sequential(initial, R, 4, 2, feed).weights);
    }
    // A failing cross-process reduction surfaces at the caller, and the waiting replicas are released.
    std::vector<tiny_mlp> models(2, initial);
    exec::executor<tiny_mlp> broken(exec::make_schedule<cfg::sharded<2>>(2, true, 4), exec::costs_of(initial), 2, {},
                                    cfg::reduction::mean, true,
                                    {[](std::size_t, std::span<float>) { throw std::runtime_error("rank 1 is gone"); }, 2});
    const std::string what = tessera::test::error_within_deadline<std::runtime_error>(60, "broken cross-process", [&] {
        (void)broken.run(std::span(models), feed, 1, {});
    });
    CHECK(what == "rank 1 is gone");
}

TEST_CASE("device iterations amortise the host synchronisation on the modelled clock", "[exec][threads]") {
    // Two host syncs per call (start and end); D updates per call share them.
    const synthetic_feed feed{batch, in_width, out_width};
    const emu::device_spec spec{.host_sync_latency = 1.0}, no_sync{.host_sync_latency = 0};
    const tiny_mlp initial = make_model(2);
    const auto sched = exec::make_schedule<cfg::pipelined<cfg::gpipe, 2>>(4);
    double previous_per_update = 1e300;
    for (std::size_t D : {1u, 4u}) {
        std::vector<tiny_mlp> models(1, initial);
        exec::executor<tiny_mlp> ex(sched, exec::costs_of(initial), 1, spec);
        const auto r = tessera::test::within_deadline(60, "host sync", [&] { return ex.run(std::span(models), feed, D, {}); });
        const double updates = exec::utilisation(exec::simulate(sched, exec::costs_of(initial), no_sync, D)).makespan;
        CHECK(r.modelled_seconds == Approx(2.0 + updates).epsilon(1e-12));
        const double per_update = r.modelled_seconds / double(D);
        CHECK(per_update < previous_per_update);
        previous_per_update = per_update;
    }
}

namespace {
// Two stages that meet: stage 1's forward of micro-batch 0 and stage 0's forward of micro-batch 1
// each wait (bounded) for the other to have started, which only happens if the IPU threads really
// run those passes at the same time, as the pipeline schedule says they may.
struct rendezvous_model {
    using tensor = std::vector<float>;
    using label = std::vector<float>;
    using stash = int;
    struct shared {
        std::atomic<bool> stage0_mb1{false}, stage1_mb0{false}, met{true};
    };
    std::shared_ptr<shared> flags = std::make_shared<shared>();

    [[nodiscard]] std::size_t stages() const noexcept { return 2; }
    static bool wait_for(const std::atomic<bool>& flag) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!flag.load()) {
            if (std::chrono::steady_clock::now() > until) return false;
            std::this_thread::yield();
        }
        return true;
    }
    std::pair<tensor, stash> forward(std::size_t s, tensor x) {
        const bool mine = (s == 0 && x.at(0) == 1.0f) || (s == 1 && x.at(0) == 0.0f);
        if (mine) {
            (s == 0 ? flags->stage0_mb1 : flags->stage1_mb0).store(true);
            if (!wait_for(s == 0 ? flags->stage1_mb0 : flags->stage0_mb1)) flags->met.store(false);
        }
        return {std::move(x), 0};
    }
    std::pair<float, tensor> loss(const tensor& y, const label&) const { return {0.0f, y}; }
    tensor backward(std::size_t, tensor g, stash) { return g; }
    std::span<float> gradients(std::size_t) { return {}; }
    void update(std::size_t, float) {}
    [[nodiscard]] exec::stage_cost cost(std::size_t) const { return {}; }
};
}  // namespace

TEST_CASE("pipelined stages run at the same time on their IPU threads", "[exec][threads]") {
    std::vector<rendezvous_model> models(1);
    exec::executor<rendezvous_model> ex(exec::make_schedule<cfg::pipelined<cfg::gpipe, 2>>(4), exec::costs_of(models[0]), 1);
    auto feed = [](std::size_t, std::size_t, std::size_t m) {
        return std::pair<std::vector<float>, std::vector<float>>{std::vector<float>{float(m)}, {}};
    };
    tessera::test::within_deadline(120, "rendezvous", [&] { return ex.run(std::span(models), feed, 1, {}); });
    CHECK(models[0].flags->met.load());
}

TEST_CASE("an IPU's value table keeps a window of micro-batches and widens it when they collide", "[exec]") {
    exec::detail::slots<std::vector<float>> table(2, 100);
    const exec::instruction in{exec::opcode::fwd};
    CHECK(table.width() == 4);
    // In order, a few in flight: the window stays as it is.
    for (std::uint32_t m = 0; m < 100; ++m) {
        table.put(1, m, std::vector<float>{float(m)});
        if (m >= 2) CHECK(table.take(1, m - 2, in).front() == float(m - 2));
    }
    CHECK(table.width() == 4);
    // 9 values of stage 0 at once (and stage 1's two): the window doubles until they fit, and every
    // value stays with its micro-batch, taken in any order.
    const std::vector<std::uint32_t> held{3, 7, 11, 15, 0, 50, 4, 8, 13};
    for (auto m : held) table.put(0, m, std::vector<float>{float(1000 + m)});
    CHECK(table.width() == 16);
    for (auto it = held.rbegin(); it != held.rend(); ++it) CHECK(table.take(0, *it, in).front() == float(1000 + *it));
    CHECK(table.take(1, 98, in).front() == 98.0f);
    CHECK(table.take(1, 99, in).front() == 99.0f);
    // What is not there, twice there or outside the program is a logic error, and the table is unchanged.
    CHECK_THROWS_AS(table.take(0, 3, in), std::logic_error);
    table.put(0, 5, std::vector<float>{5.0f});
    CHECK_THROWS_AS(table.put(0, 5, std::vector<float>{6.0f}), std::logic_error);
    CHECK_THROWS_AS(table.take(0, 21, in), std::logic_error);  // 21 mod 16 == 5: another micro-batch's slot
    CHECK_THROWS_AS(table.put(2, 0, std::vector<float>{}), std::logic_error);
    CHECK_THROWS_AS(table.put(0, 100, std::vector<float>{}), std::logic_error);
    CHECK(table.take(0, 5, in).front() == 5.0f);
}

TEST_CASE("the real IPU links hold up to 256 messages, fewer when messages are large, never fewer than the schedule needs",
          "[exec]") {
    const auto depth = [](std::size_t G, std::size_t message_bytes) {
        auto model = make_model(2);
        auto costs = exec::costs_of(model);
        for (auto& c : costs.stages) c.input_bytes = c.output_bytes = message_bytes;
        const exec::executor<tiny_mlp> ex(exec::make_schedule<cfg::pipelined<cfg::one_f_one_b, 2>>(G), costs);
        return std::pair{ex.link_depth(), ex.program().channel_capacity};
    };
    CHECK(depth(16, 64).first == 16);     // a step's micro-batches
    CHECK(depth(1000, 64).first == 256);  // at most max_link_depth
    CHECK(depth(1000, 1 << 20).first == 64);  // at most 64 MiB of 1 MiB messages
    const auto [huge, needed] = depth(1000, std::size_t{100} << 20);
    CHECK(needed >= 1);
    CHECK(huge == needed);  // 100 MiB messages: only what the schedule needs to run
}

TEMPLATE_TEST_CASE("fault injection: every strategy and replica count surfaces each fault, then trains normally",
                   "[exec][threads][faults]", cfg::single, cfg::sharded<2>, (cfg::pipelined<cfg::gpipe, 2>),
                   (cfg::pipelined<cfg::one_f_one_b, 2>), (cfg::pipelined<cfg::interleaved<2>, 4>),
                   (cfg::pipelined<cfg::zero_bubble_h1, 2>), (cfg::pipelined<cfg::zero_bubble_h2, 3>),
                   (cfg::pipelined<cfg::looped_bfs<2>, 4>), cfg::phased<2>) {
    // Faults: a stage that throws on its k-th micro-batch (each stage, k = 1 and 3), and a host feed
    // that throws. Each reaches the caller with its type and message within a bounded time (ASan in
    // CI: and nothing leaks); an executor built afterwards trains as the sequential reference does.
    const synthetic_feed feed{batch, in_width, out_width};
    const std::size_t S = TestType::stages, G = S == 3 ? 5 : 4, D = 2;  // 3 stages (ZB-H2) need G >= 5
    static_assert(exec::SplitBackwardModel<tiny_mlp>);
    const bool split = exec::make_schedule<TestType>(G).backward_split();
    std::size_t injected = 0;
    for (std::size_t R : {1u, 2u}) {
        if (split)  // a weight-gradient pass that throws (zero-bubble: W runs on its own)
            for (long stage = 0; stage < long(S); ++stage) {
                tiny_mlp faulty = make_model(S);
                faulty.fail_weights_stage = stage;
                std::vector<tiny_mlp> models(R, faulty);
                exec::executor<tiny_mlp> ex(exec::make_schedule<TestType>(G, true, R), exec::costs_of(faulty), R);
                const auto what = tessera::test::error_within_deadline<std::domain_error>(60, "W fault", [&] {
                    return ex.run(std::span(models), feed, D, {});
                });
                CHECK(what == "tiny_mlp: stage " + std::to_string(stage) + " weight gradient failed");
                ++injected;
            }
        for (long stage = 0; stage < long(S); ++stage)
            for (int k : {1, 3}) {
                tiny_mlp faulty = make_model(S);
                faulty.fail_stage = stage;
                faulty.fail_countdown = k;
                std::vector<tiny_mlp> models(R, faulty);
                exec::executor<tiny_mlp> ex(exec::make_schedule<TestType>(G, true, R), exec::costs_of(faulty), R);
                const auto what = tessera::test::error_within_deadline<std::domain_error>(60, "stage fault", [&] {
                    return ex.run(std::span(models), feed, D, {});
                });
                CHECK(what == "tiny_mlp: stage " + std::to_string(stage) + " failed");
                ++injected;
            }
        auto bad = [&](std::size_t r, std::size_t d, std::size_t m) {
            if (r == R - 1 && d == 1 && m == 2) throw std::runtime_error("feed fault in replica " + std::to_string(r));
            return feed(r, d, m);
        };
        std::vector<tiny_mlp> models(R, make_model(S));
        exec::executor<tiny_mlp> ex(exec::make_schedule<TestType>(G, true, R), exec::costs_of(models[0]), R);
        const auto what = tessera::test::error_within_deadline<std::runtime_error>(60, "feed fault", [&] {
            return ex.run(std::span(models), bad, D, {});
        });
        CHECK(what == "feed fault in replica " + std::to_string(R - 1));
        ++injected;
        // Afterwards: a new executor trains as the reference does.
        std::vector<tiny_mlp> fresh(R, make_model(S));
        (void)run_strategy<TestType>(fresh, G, D, feed);
        CHECK(fresh[0].weights() == sequential(make_model(S), R, G, D, feed).weights);
    }
    CHECK(injected == 2 * (2 * S + 1 + (split ? S : 0)));
}

}  // namespace test_executor
