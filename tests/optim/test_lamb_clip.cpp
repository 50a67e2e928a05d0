// LAMB and clipping by the global gradient norm against double-precision references written here,
// and the exact sum of squares under every order, grouping and thread count.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tessera/emulator/collective_group.hpp"
#include "tessera/kernels/thread_pool.hpp"
#include "tessera/optim.hpp"

namespace test_lamb_clip {

using namespace tessera;

namespace {

/// Named float parameters of the given sizes, values and gradients drawn from a seed.
struct params {
    std::vector<std::vector<float>> values, grads;
    params(std::vector<std::size_t> sizes, unsigned seed, float grad_size = 1.0f) {
        std::mt19937 rng(seed);
        std::normal_distribution<float> d(0.0f, 1.0f);
        for (const std::size_t n : sizes) {
            values.emplace_back(n), grads.emplace_back(n);
            for (auto& v : values.back()) v = 0.1f * d(rng);
            for (auto& g : grads.back()) g = grad_size * d(rng);
        }
    }
    template <class F>
    void visit_parameters(F&& f) {
        for (std::size_t i = 0; i < values.size(); ++i)
            f("p" + std::to_string(i), std::span<float>(values[i]), std::span<float>(grads[i]));
    }
};

double norm_of(params& p) { return std::sqrt(optim::gradient_squares(p).value()); }

long double naive_squares(std::span<const float> v, double scale = 1.0) {
    long double s = 0;
    for (const float x : v) s += static_cast<long double>(x) * scale * (static_cast<long double>(x) * scale);
    return s;
}

}  // namespace

TEST_CASE("square_sum: the same bits in any order and grouping, close to a long double sum", "[optim][clip]") {
    std::mt19937 rng(5);
    std::lognormal_distribution<float> mag(-3.0f, 4.0f);  // magnitudes over many binades
    std::vector<float> xs(20000);
    for (auto& x : xs) x = (rng() & 1 ? -1.0f : 1.0f) * mag(rng);
    optim::square_sum forward;
    for (const float x : xs) forward.add(x);
    std::vector<float> shuffled = xs;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    optim::square_sum a, b, c;  // three groups of the shuffled terms, added in another order
    for (std::size_t k = 0; k < shuffled.size(); ++k) (k % 3 == 0 ? a : k % 3 == 1 ? b : c).add(shuffled[k]);
    optim::square_sum grouped = c;
    grouped += a;
    grouped += b;
    CHECK(grouped == forward);
    CHECK(grouped.value() == forward.value());
    const long double reference = naive_squares(xs);
    // Each term is cut to a multiple of 2^-64 at most: an error of n·2^-64 below the reference.
    CHECK(std::abs(static_cast<long double>(forward.value()) - reference) <= reference * 1e-15L + 20000 * 0x1p-64L);

    SECTION("the chunks of a float collective carry the sums exactly") {
        std::vector<float> total(optim::square_sum::chunk_count, 0.0f), part(optim::square_sum::chunk_count);
        for (const auto* s : {&a, &b, &c}) {
            s->to_chunks(part);
            for (std::size_t k = 0; k < total.size(); ++k) total[k] += part[k];  // what the vote's reduce does
        }
        CHECK(optim::square_sum::from_chunks(total) == forward);
        CHECK(optim::square_sum::from_chunks(total).value() == forward.value());
        CHECK_THROWS_AS(optim::square_sum::from_chunks(std::span<const float>(total).first(3)), std::invalid_argument);
    }
    SECTION("overflow and non-finite terms make +inf, also through the chunks") {
        optim::square_sum big = forward;
        big.add(1e9f);  // 10^18 > 2^52
        CHECK(std::isinf(big.value()));
        optim::square_sum nan;
        nan.add(std::numeric_limits<float>::quiet_NaN());
        CHECK(std::isinf(nan.value()));
        std::vector<float> chunks(optim::square_sum::chunk_count), other(optim::square_sum::chunk_count);
        big.to_chunks(chunks);
        forward.to_chunks(other);
        for (std::size_t k = 0; k < chunks.size(); ++k) chunks[k] += other[k];
        CHECK(std::isinf(optim::square_sum::from_chunks(chunks).value()));
    }
    SECTION("a square below 2^-64 adds nothing") {
        optim::square_sum tiny;
        tiny.add(1e-20f);
        CHECK(tiny.value() == 0.0);
    }
}

TEST_CASE("clip_grad_norm scales the gradients to max_norm as torch.nn.utils.clip_grad_norm_ does", "[optim][clip]") {
    params p({7, 300, 1}, 3);
    long double sq = 0;
    for (const auto& g : p.grads) sq += naive_squares(g);
    const double norm = std::sqrt(static_cast<double>(sq));
    const auto before = p.grads;
    CHECK(optim::clip_grad_norm(p, 2.0 * norm) == Approx(norm).epsilon(1e-12));
    CHECK(p.grads == before);  // below the limit: untouched
    const double max_norm = norm / 4;
    CHECK(optim::clip_grad_norm(p, max_norm) == Approx(norm).epsilon(1e-12));
    for (std::size_t i = 0; i < p.grads.size(); ++i)
        for (std::size_t k = 0; k < p.grads[i].size(); ++k)
            CHECK(p.grads[i][k] == Approx(before[i][k] * max_norm / (norm + 1e-6)).epsilon(1e-6));
    CHECK_THROWS_AS(optim::clip_grad_norm(p, 0.0), std::invalid_argument);
    CHECK(optim::clip_coefficient(10.0, std::numeric_limits<double>::infinity()) == 1.0);
}

TEST_CASE("max_grad_norm: sgd and adamw step as on gradients clipped beforehand; a given norm wins", "[optim][clip]") {
    const double max_norm = 0.5;
    for (const bool use_adamw : {false, true}) {
        CAPTURE(use_adamw);
        const auto make = [&](double clip) -> std::function<void(params&, double, std::optional<double>)> {
            if (use_adamw) {
                auto o = std::make_shared<optim::adamw>(optim::adamw_options{.learning_rate = 0.01, .max_grad_norm = clip});
                return [o](params& p, double scale, std::optional<double> n) { o->step(p, scale, {}, {}, n); };
            }
            auto o = std::make_shared<optim::sgd>(optim::sgd_options{.learning_rate = 0.1, .momentum = 0.9, .max_grad_norm = clip});
            return [o](params& p, double scale, std::optional<double> n) { o->step(p, scale, {}, {}, n); };
        };
        params clipped({5, 40}, 9, 3.0f), reference = clipped;
        auto clipping = make(max_norm), plain = make(std::numeric_limits<double>::infinity());
        for (int step = 0; step < 3; ++step) {
            clipping(clipped, 0.5, std::nullopt);  // the gradients carry a factor of 2
            long double sq = 0;
            for (const auto& g : reference.grads) sq += naive_squares(g, 0.5);
            const double c = std::min(1.0, max_norm / (std::sqrt(static_cast<double>(sq)) + 1e-6));
            REQUIRE(c < 1.0);
            plain(reference, 0.5 * c, std::nullopt);
            for (std::size_t i = 0; i < 2; ++i)
                for (std::size_t k = 0; k < clipped.values[i].size(); ++k)
                    REQUIRE(clipped.values[i][k] == Approx(reference.values[i][k]).epsilon(1e-5));
        }
        // A norm from the caller (the whole model's, of which these are a part) replaces params' own.
        params a({5, 40}, 9, 3.0f), b = a;
        make(max_norm)(a, 1.0, 100.0 * max_norm);
        make(std::numeric_limits<double>::infinity())(b, max_norm / (100.0 * max_norm + 1e-6), std::nullopt);
        CHECK(a.values == b.values);
    }
    params p({4}, 1);
    optim::adamw sharded({.max_grad_norm = 1.0});
    CHECK_THROWS_AS(sharded.step(p, 1.0, {}, optim::element_range{0, 2}), std::invalid_argument);
    CHECK_THROWS_AS(optim::adamw({.max_grad_norm = 0.0}), std::invalid_argument);
    CHECK_THROWS_AS(optim::sgd({.max_grad_norm = -1.0}), std::invalid_argument);
}

TEST_CASE("lamb follows poptorch.optim.LAMB's update: trust ratio per tensor, weight-norm cap, bias correction",
          "[optim][lamb]") {
    for (const bool bias_correction : {true, false}) {
        for (const double cap : {std::numeric_limits<double>::infinity(), 0.05}) {
            CAPTURE(bias_correction, cap);
            const optim::lamb_options o{.learning_rate = 0.02, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1,
                                        .bias_correction = bias_correction, .max_weight_norm = cap};
            optim::lamb opt(o);
            params p({6, 33, 1}, 21);
            std::fill(p.values[2].begin(), p.values[2].end(), 0.0f);  // ‖w‖ = 0: ratio 1
            std::vector<std::vector<double>> w, m, v;
            for (const auto& x : p.values) w.emplace_back(x.begin(), x.end()), m.emplace_back(x.size()), v.emplace_back(x.size());
            for (int t = 1; t <= 4; ++t) {
                for (auto& g : p.grads)
                    for (auto& x : g) x = static_cast<float>(x * 0.7 + 0.05 * t);
                opt.step(p, 0.5);
                for (std::size_t i = 0; i < w.size(); ++i) {
                    std::vector<double> u(w[i].size());
                    double wn = 0, un = 0;
                    for (std::size_t k = 0; k < u.size(); ++k) {
                        const double g = p.grads[i][k] * 0.5;
                        m[i][k] = o.beta1 * m[i][k] + (1 - o.beta1) * g;
                        v[i][k] = o.beta2 * v[i][k] + (1 - o.beta2) * g * g;
                        const double mh = bias_correction ? m[i][k] / (1 - std::pow(o.beta1, t)) : m[i][k];
                        const double vh = bias_correction ? v[i][k] / (1 - std::pow(o.beta2, t)) : v[i][k];
                        u[k] = mh / (std::sqrt(vh) + o.eps) + o.weight_decay * w[i][k];
                        wn += w[i][k] * w[i][k], un += u[k] * u[k];
                    }
                    wn = std::min(std::sqrt(wn), cap), un = std::sqrt(un);
                    const double ratio = wn > 0 && un > 0 ? wn / un : 1.0;
                    for (std::size_t k = 0; k < u.size(); ++k) {
                        w[i][k] -= o.learning_rate * ratio * u[k];
                        REQUIRE(p.values[i][k] == Approx(w[i][k]).epsilon(1e-5).margin(1e-7));
                    }
                }
            }
            CHECK(opt.steps() == 4);
        }
    }
    CHECK_THROWS_AS(optim::lamb({.max_weight_norm = 0.0}), std::invalid_argument);
    params p({4}, 1);
    optim::lamb opt;
    CHECK_THROWS_AS(opt.step(p, 1.0, {}, optim::element_range{0, 2}), std::invalid_argument);
}

TEST_CASE("lamb and max_grad_norm give the same bits on 1, 2 and 3 threads", "[optim][lamb][clip]") {
    kernels::thread_pool pool(3);
    const auto run = [&](kernels::parallelism par) {
        params p({20000, 9000, 3}, 2);
        optim::lamb opt({.learning_rate = 0.01, .max_grad_norm = 5.0});
        for (int t = 0; t < 3; ++t) opt.step(p, 1.0, par);
        return p.values;
    };
    const auto one = run({1});
    CHECK(one != params({20000, 9000, 3}, 2).values);
    for (const std::size_t threads : {2u, 3u}) {
        CAPTURE(threads);
        CHECK(run({threads}) == one);
        CHECK(run({threads, &pool}) == one);
    }
}

TEST_CASE("lamb with its state sharded over 3 replicas steps as one unsharded lamb, bit for bit", "[optim][lamb][threads]") {
    const std::vector<std::size_t> sizes{7, 1, 12, 5000};  // shards cut inside and across tensors
    const optim::lamb_options o{.learning_rate = 0.01, .weight_decay = 0.05, .max_weight_norm = 0.5};
    params whole(sizes, 13);
    optim::lamb reference(o);
    const std::size_t n = optim::parameter_count(whole), R = 3;
    std::vector<params> replicas(R, whole);
    std::vector<optim::lamb> shards(R, optim::lamb(o));
    emulator::collective_group<float> group(R);
    for (int t = 0; t < 3; ++t) {
        const double norm = std::sqrt(optim::gradient_squares(whole).value());  // as the vote gives it
        reference.step(whole, 1.0, {}, {}, norm);
        std::vector<std::thread> threads;
        for (std::size_t r = 0; r < R; ++r)
            threads.emplace_back([&, r] {
                const auto across = [&](std::span<float> v) { (void)group.reduce(r, v); };
                shards[r].step(replicas[r], 1.0, {}, optim::shard_of(n, r, R), norm, across);
            });
        for (auto& th : threads) th.join();
        // each replica moved its shard; the all-gather of a session puts the shards together
        params gathered = whole;
        for (std::size_t r = 0; r < R; ++r) {
            const auto range = optim::shard_of(n, r, R);
            std::size_t at = 0;
            for (std::size_t i = 0; i < sizes.size(); ++i)
                for (std::size_t k = 0; k < sizes[i]; ++k, ++at)
                    if (at >= range.begin && at < range.end) gathered.values[i][k] = replicas[r].values[i][k];
        }
        CHECK(gathered.values == whole.values);
        for (auto& rep : replicas) rep.values = whole.values;
    }
    std::vector<const optim::lamb*> parts;
    for (const auto& sh : shards) parts.push_back(&sh);
    optim::lamb joined(o);
    joined.gather_shards(whole, std::span<const optim::lamb* const>(parts));
    std::vector<std::vector<float>> want, got;
    reference.visit_state([&](const std::string&, std::span<float> v) { want.emplace_back(v.begin(), v.end()); });
    joined.visit_state([&](const std::string&, std::span<float> v) { got.emplace_back(v.begin(), v.end()); });
    CHECK(got == want);
    CHECK_THROWS_AS(shards[0].step(replicas[0], 1.0, {}, optim::shard_of(n, 0, R), norm_of(whole)), std::invalid_argument);
}

}  // namespace test_lamb_clip
