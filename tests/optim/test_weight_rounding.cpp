// Stochastic rounding of updated 16-bit weights: an update of a quarter ulp vanishes under
// round-to-nearest and moves the weights by itself on average under stochastic rounding; a run is
// the same twice, and the same whether one optimiser updates all parameters or one per stage does,
// and on any number of threads. Sharded optimiser state: replicas that each step their shard of the
// weights, with the state of that shard alone, and then gather the others' updated shards compute what
// one unsharded step computes, bit for bit; the shards' states together are the unsharded state.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/kernels/thread_pool.hpp"
#include "tessera/optim/adamw.hpp"
#include "tessera/optim/sgd.hpp"
#include "tessera/optim/shard.hpp"

namespace test_weight_rounding {

using namespace tessera;

namespace {

/// Named half parameters with float gradients; units are the parameters, so a stage is a range.
struct half_params {
    std::vector<std::string> names;
    std::vector<std::vector<half>> values;
    std::vector<std::vector<float>> grads;

    half_params(std::size_t count, std::size_t n, float value, float grad) {
        for (std::size_t p = 0; p < count; ++p) {
            names.push_back("layer" + std::to_string(p) + ".weight");
            values.emplace_back(n, half(value + 0.25f * static_cast<float>(p)));
            grads.emplace_back(n, grad);
        }
    }
    template <class F>
    void visit_unit_parameters(std::size_t first, std::size_t last, F&& f) {
        for (std::size_t p = first; p < last; ++p) f(names[p], std::span<half>(values[p]), std::span<float>(grads[p]));
    }
    template <class F>
    void visit_parameters(F&& f) {
        visit_unit_parameters(0, names.size(), f);
    }
};

struct float_params {
    std::vector<float> value, grad;
    template <class F>
    void visit_parameters(F&& f) {
        f("w", std::span<float>(value), std::span<float>(grad));
    }
};

double mean(const std::vector<half>& v) {
    double s = 0;
    for (const half h : v) s += h;
    return s / static_cast<double>(v.size());
}

}  // namespace

TEST_CASE("an update of a quarter ulp: lost to rounding to nearest, kept on average by stochastic rounding",
          "[optim][rounding]") {
    // Weights 1.5 (ulp 2^-10), learning rate 1, gradient 2^-12: each weight should fall by 2^-12.
    constexpr std::size_t N = 1 << 16;
    constexpr float update = 0x1p-12f;
    half_params nearest(1, N, 1.5f, update), stochastic(1, N, 1.5f, update);
    optim::sgd plain({.learning_rate = 1.0});
    optim::sgd rounding({.learning_rate = 1.0, .rounding = {.stochastic = true, .seed = 1}});
    plain.step(nearest);
    rounding.step(stochastic);
    CHECK(mean(nearest.values[0]) == 1.5);  // every update vanished
    // Each weight falls by an ulp with probability 1/4: the mean's standard deviation is
    // 2^-10·sqrt(3/16/N) ≈ 1.7e-6; the bound is five of those.
    INFO("mean " << mean(stochastic.values[0]));
    CHECK(std::abs(mean(stochastic.values[0]) - (1.5 - update)) <= 5 * 0x1p-10 * std::sqrt(3.0 / 16 / N));
    for (const half h : stochastic.values[0]) REQUIRE((float(h) == 1.5f || float(h) == 1.5f - 0x1p-10f));
    // Four more steps: the drift adds up (five quarter ulps in all).
    for (int k = 0; k < 4; ++k) {
        plain.step(nearest);
        rounding.step(stochastic);
    }
    CHECK(mean(nearest.values[0]) == 1.5);
    CHECK(std::abs(mean(stochastic.values[0]) - (1.5 - 5 * update)) <= 5 * 0x1p-10 * std::sqrt(5.0 / N));
}

TEST_CASE("stochastic rounding is keyed by seed, parameter name, step and element: reproducible, and the same "
          "split across stages", "[optim][rounding]") {
    constexpr std::size_t P = 4, N = 257;
    const auto run = [&](auto optimizer, bool staged, int steps) {
        half_params params(P, N, 0.75f, 0.3e-3f);
        std::vector<decltype(optimizer)> per_stage(2, optimizer);
        optim::unit_range<half_params> first(params, 0, 1), rest(params, 1, P);
        for (int s = 0; s < steps; ++s) {
            if (staged) {
                per_stage[0].step(first);
                per_stage[1].step(rest);
            } else {
                optimizer.step(params);
            }
        }
        return params.values;
    };
    for (const bool adam : {false, true}) {
        INFO((adam ? "adamw" : "sgd"));
        const auto make = [&](optim::weight_rounding r) {
            return [=, &run](bool staged, int steps) {
                return adam ? run(optim::adamw({.learning_rate = 1e-3, .rounding = r}), staged, steps)
                            : run(optim::sgd({.learning_rate = 0.5, .momentum = 0.9, .rounding = r}), staged, steps);
            };
        };
        const auto seeded = make({.stochastic = true, .seed = 3});
        const auto whole = seeded(false, 3);
        CHECK(whole == seeded(false, 3));  // the same twice
        CHECK(whole == seeded(true, 3));   // the same with one optimiser per stage
        CHECK(whole != make({.stochastic = true, .seed = 4})(false, 3));
        CHECK(whole != make({})(false, 3));
        // Equal weights with equal names at another step draw other bits: the step is in the key.
        CHECK(seeded(false, 1)[0] != seeded(false, 2)[0]);
    }
    // fp32 weights are stored exactly: the option changes nothing.
    float_params a{{0.1f, 0.2f}, {1e-3f, 3e-3f}}, b = a;
    optim::sgd({.learning_rate = 1.0}).step(a);
    optim::sgd({.learning_rate = 1.0, .rounding = {.stochastic = true, .seed = 1}}).step(b);
    CHECK(a.value == b.value);
    CHECK(a.value != std::vector<float>{0.1f, 0.2f});
}

TEST_CASE("sgd, adamw and zero_grad split large parameters between threads with the bits of one thread",
          "[optim][threads][rounding]") {
    // Two parameters of 100,003 elements (over the update grain: split between the threads) and one of
    // 5 (on one thread), half weights with stochastic rounding and fp32 weights.
    const auto grads = [](half_params& p) {
        for (std::size_t q = 0; q < p.grads.size(); ++q)
            for (std::size_t k = 0; k < p.grads[q].size(); ++k)
                p.grads[q][k] = 0.001f * static_cast<float>((k * 7919 + q * 104729) % 2001) - 1.0f;
    };
    const auto make = [&] {
        half_params p(2, 100'003, 1.5f, 0.0f);
        p.names.push_back("small.bias");
        p.values.emplace_back(5, half(0.5f));
        p.grads.emplace_back(5, 0.25f);
        grads(p);
        return p;
    };
    const auto train = [&](auto opt, kernels::parallelism par) {
        half_params p = make();
        for (int step = 0; step < 3; ++step) {
            opt.step(p, 0.5, par);
            optim::zero_grad(p, par);
            for (const auto& g : p.grads) CHECK(std::all_of(g.begin(), g.end(), [](float v) { return v == 0.0f; }));
            grads(p);
        }
        return p.values;
    };
    const optim::weight_rounding sr{.stochastic = true, .seed = 11};
    kernels::thread_pool pool(3);
    for (const bool use_adamw : {false, true}) {
        CAPTURE(use_adamw);
        const auto run = [&](kernels::parallelism par) {
            return use_adamw ? train(optim::adamw({.learning_rate = 0.01, .weight_decay = 0.1, .rounding = sr}), par)
                             : train(optim::sgd({.learning_rate = 0.1, .momentum = 0.9, .weight_decay = 0.01,
                                                 .nesterov = true, .rounding = sr}),
                                     par);
        };
        const auto one = run({1});
        CHECK(one != make().values);  // the steps moved the weights
        for (const std::size_t threads : {2u, 3u}) {
            CAPTURE(threads);
            CHECK(run({threads}) == one);
            CHECK(run({threads, &pool}) == one);
        }
    }
}

namespace {

/// Three named parameters of 7, 1 and 12 elements (sizes that shards cut inside and across).
template <class W>
struct params {
    std::vector<std::string> names{"a.weight", "b.bias", "c.weight"};
    std::vector<std::vector<W>> values;
    std::vector<std::vector<float>> grads;

    params() {
        for (const std::size_t n : {7u, 1u, 12u}) {
            values.emplace_back();
            grads.emplace_back(n, 0.0f);
            for (std::size_t k = 0; k < n; ++k) values.back().push_back(W(0.5f + 0.01f * float(k) - 0.2f * float(values.size())));
        }
    }
    void set_gradients(int step) {
        for (std::size_t p = 0; p < grads.size(); ++p)
            for (std::size_t k = 0; k < grads[p].size(); ++k)
                grads[p][k] = 0.001f * float((k * 31 + p * 17 + std::size_t(step) * 7) % 23) - 0.011f;
    }
    template <class F>
    void visit_parameters(F&& f) {
        for (std::size_t p = 0; p < names.size(); ++p) f(names[p], std::span<W>(values[p]), std::span<float>(grads[p]));
    }
    [[nodiscard]] std::vector<W> flat() const {
        std::vector<W> all;
        for (const auto& v : values) all.insert(all.end(), v.begin(), v.end());
        return all;
    }
    void set_flat(const std::vector<W>& all) {
        std::size_t k = 0;
        for (auto& v : values)
            for (auto& x : v) x = all.at(k++);
    }
};

template <class O>
std::vector<float> state_of(O& o) {
    std::vector<float> all;
    o.visit_state([&](std::string_view, std::span<float> v) { all.insert(all.end(), v.begin(), v.end()); });
    return all;
}

/// Trains `steps` steps unsharded, and as `count` replicas stepping their shards then gathering the
/// weights; checks the weights after every step and the gathered state at the end.
template <class W, class O>
void check_sharded_equals_unsharded(const O& prototype, std::size_t count, int steps) {
    CAPTURE(count);
    params<W> whole;
    O unsharded = prototype;
    std::vector<params<W>> replicas(count);
    std::vector<O> shards(count, prototype);
    const std::size_t n = whole.flat().size();
    for (int step = 0; step < steps; ++step) {
        whole.set_gradients(step);
        unsharded.step(whole, 0.5);
        std::vector<W> gathered = replicas[0].flat();
        for (std::size_t r = 0; r < count; ++r) {
            replicas[r].set_gradients(step);
            const optim::element_range shard = optim::shard_of(n, r, count);
            shards[r].step(replicas[r], 0.5, {}, shard);
            const auto mine = replicas[r].flat();
            for (std::size_t k = shard.begin; k < shard.end; ++k) gathered[k] = mine[k];
        }
        for (auto& r : replicas) r.set_flat(gathered);
        CHECK(gathered == whole.flat());
    }
    CHECK(whole.flat() != params<W>().flat());  // the steps moved the weights
    // Each replica holds the state of its shard only; together, the unsharded state.
    std::size_t held = 0;
    for (auto& s : shards) held += state_of(s).size();
    CHECK(held == state_of(unsharded).size());
    std::vector<const O*> parts;
    for (const auto& s : shards) parts.push_back(&s);
    O gathered = prototype;
    gathered.gather_shards(whole, std::span<const O* const>(parts));
    CHECK(state_of(gathered) == state_of(unsharded));
    CHECK(gathered.steps() == unsharded.steps());
    // Cut again: the shards of the unsharded state are the replicas' states.
    for (std::size_t r = 0; r < count; ++r) {
        O cut = unsharded;
        cut.keep_shard(whole, optim::shard_of(n, r, count));
        CHECK(state_of(cut) == state_of(shards[r]));
    }
}

}  // namespace

TEST_CASE("shard_of tiles the elements in near-equal consecutive shards", "[optim][shard]") {
    for (const std::size_t n : {0u, 1u, 5u, 20u, 1001u})
        for (const std::size_t count : {1u, 2u, 3u, 4u, 7u}) {
            std::size_t next = 0, smallest = n, largest = 0;
            for (std::size_t r = 0; r < count; ++r) {
                const auto s = optim::shard_of(n, r, count);
                CHECK(s.begin == next);
                next = s.end;
                smallest = std::min(smallest, s.size());
                largest = std::max(largest, s.size());
            }
            CHECK(next == n);
            CHECK(largest - smallest <= 1);
        }
    CHECK(optim::shard_of(10, 1, 4) == optim::element_range{2, 5});
    CHECK_THROWS_AS(optim::shard_of(10, 4, 4), std::invalid_argument);
    CHECK_THROWS_AS(optim::shard_of(10, 0, 0), std::invalid_argument);
}

TEST_CASE("visit_in_range gives each parameter the indices of its elements in the range", "[optim][shard]") {
    params<float> p;  // 7, 1 and 12 elements: [0, 7), [7, 8), [8, 20)
    std::vector<std::pair<std::size_t, std::size_t>> seen;
    optim::visit_in_range(p, {5, 9}, [&](std::string_view, auto, auto, std::size_t lo, std::size_t hi) { seen.emplace_back(lo, hi); });
    CHECK(seen == std::vector<std::pair<std::size_t, std::size_t>>{{5, 7}, {0, 1}, {0, 1}});
    seen.clear();
    optim::visit_in_range(p, {8, 8}, [&](std::string_view, auto, auto, std::size_t lo, std::size_t hi) { seen.emplace_back(lo, hi); });
    CHECK(seen == std::vector<std::pair<std::size_t, std::size_t>>{{7, 7}, {1, 1}, {0, 0}});
}

TEST_CASE("sgd and adamw stepping shards on replicas give the unsharded weights and state bit for bit",
          "[optim][shard][rounding]") {
    const optim::weight_rounding sr{.stochastic = true, .seed = 5};
    const optim::sgd momentum({.learning_rate = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
    const optim::adamw adam({.learning_rate = 0.01, .weight_decay = 0.1});
    for (const std::size_t count : {2u, 3u, 4u}) {
        check_sharded_equals_unsharded<float>(momentum, count, 4);
        check_sharded_equals_unsharded<float>(adam, count, 4);
        check_sharded_equals_unsharded<half>(optim::sgd({.learning_rate = 0.1, .momentum = 0.9, .rounding = sr}), count, 4);
        check_sharded_equals_unsharded<half>(optim::adamw({.learning_rate = 0.01, .rounding = sr}), count, 4);
    }
}

TEST_CASE("a shard's state refuses another shard, and gathering needs every shard", "[optim][shard]") {
    params<float> p;
    p.set_gradients(0);
    optim::sgd opt({.learning_rate = 0.1, .momentum = 0.9});
    opt.step(p, 1.0, {}, optim::shard_of(20, 0, 2));
    CHECK_THROWS_AS(opt.step(p, 1.0, {}, optim::shard_of(20, 1, 4)), std::invalid_argument);  // other sizes
    CHECK_THROWS_AS(opt.step(p), std::invalid_argument);                                      // the whole
    CHECK_THROWS_AS(opt.keep_shard(p, optim::shard_of(20, 0, 2)), std::invalid_argument);      // already cut
    const optim::sgd* one[] = {&opt};
    optim::sgd gathered({.learning_rate = 0.1, .momentum = 0.9});
    CHECK_THROWS_AS(gathered.gather_shards(p, std::span<const optim::sgd* const>(one)), std::invalid_argument);
}

}  // namespace test_weight_rounding
