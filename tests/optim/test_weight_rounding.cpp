// Stochastic rounding of updated 16-bit weights: an update of a quarter ulp vanishes under
// round-to-nearest and moves the weights by itself on average under stochastic rounding; a run is
// the same twice, and the same whether one optimiser updates all parameters or one per stage does,
// and on any number of threads.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/kernels/thread_pool.hpp"
#include "tessera/optim/adamw.hpp"
#include "tessera/optim/sgd.hpp"

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
