#pragma once
// Test helpers: an fp64 policy, random activations and a finite-difference gradient check.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tessera/config.hpp"
#include "tessera/nn.hpp"

/// Double storage and accumulation: gradient checks free of rounding noise.
struct fp64 {
    using data_type = double;
    using weight_type = double;
    using accumulate_type = double;
};

template <class P>
tessera::nn::activation<P> random_activation(const tessera::tensor::shape& s, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> dist(-1, 1);
    auto a = tessera::tensor::make_nhwc<typename P::data_type>(s);
    for (auto& v : a) v = tessera::kernels::detail::store_as<typename P::data_type>(dist(rng));
    return a;
}

/// The bits of every element of `a` as stored (a float's two 16-bit halves, a half's one): two
/// activations compare bit for bit, whatever their storage type.
template <class A>
std::vector<std::uint16_t> storage_bits(const A& a) {
    using T = std::remove_cvref_t<decltype(*std::begin(a))>;
    static_assert(sizeof(T) % 2 == 0, "storage_bits: a storage type of whole 16-bit halves");
    std::vector<std::uint16_t> bits;
    bits.reserve(a.size() * (sizeof(T) / 2));
    for (const auto& e : a) {
        std::uint16_t h[sizeof(T) / 2];
        std::memcpy(h, &e, sizeof(T));
        bits.insert(bits.end(), h, h + sizeof(T) / 2);
    }
    return bits;
}

/// Every parameter's gradient of `model`, one after another in the order it visits them.
template <class M>
std::vector<float> parameter_gradients(M& model) {
    std::vector<float> g;
    model.visit_parameters([&](std::string_view, auto, std::span<float> v) { g.insert(g.end(), v.begin(), v.end()); });
    return g;
}

template <class A, class B>
double max_abs_diff(const A& a, const B& b) {
    REQUIRE(a.size() == b.size());
    double e = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
        e = std::max(e, std::abs(static_cast<double>(static_cast<float>(a.data()[i])) -
                                 static_cast<double>(static_cast<float>(b.data()[i]))));
    return e;
}

inline double cosine(const std::vector<float>& a, const std::vector<float>& b) {
    double ab = 0, aa = 0, bb = 0;
    for (std::size_t i = 0; i < a.size(); ++i) ab += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
    return aa == 0 && bb == 0 ? 1.0 : ab / std::sqrt(aa * bb);
}

/// L = Σ r·layer(x) for a fixed random r; compares backward's dx and every parameter gradient with
/// central differences in fp64 (agreement to |a − f| ≤ 1e-6 + 1e-5·|f|). The step h is small because a
/// step that crosses a ReLU or max-pool kink breaks the difference quotient (seen at h = 1e-5 in a whole
/// ResNet); fp64 keeps the rounding error of the quotient near 1e-16·|L|/h. Up to `samples`
/// coordinates per tensor are checked, spread evenly. `ctx` runs every pass (a dropout stream or an
/// attention mask stays the same from pass to pass).
template <class L>
void check_gradients(L& layer, const tessera::tensor::shape& in, std::uint64_t seed, std::size_t samples = 40,
                     double h = 1e-6, const tessera::nn::context& ctx = {tessera::nn::mode::train, 1}) {
    using P = typename L::precision;
    namespace nn = tessera::nn;
    std::mt19937_64 init(seed);
    layer.initialize(init);
    auto x = random_activation<P>(in, seed + 1);
    const auto out_shape = layer.output_shape(in);
    const auto r = random_activation<P>(out_shape, seed + 2);
    auto loss = [&] {
        typename L::state st;
        const auto& y = layer.forward(x, st, ctx);
        REQUIRE(tessera::tensor::shape_of(y) == out_shape);
        double s = 0;
        for (std::size_t i = 0; i < y.size(); ++i) s += r.data()[i] * y.data()[i];
        return s;
    };
    layer.visit_parameters([](std::string_view, auto, auto g) { std::fill(g.begin(), g.end(), 0.0); });
    typename L::state st;
    layer.forward(x, st, ctx);
    const auto dx = layer.backward(r, st, ctx, true);  // a copy: later forwards reuse the state
        auto agree = [](double analytic, double numeric) { return std::abs(analytic - numeric) <= 1e-6 + 1e-5 * std::abs(numeric); };
    const std::size_t step_x = std::max<std::size_t>(1, x.size() / samples);
    for (std::size_t i = 0; i < x.size(); i += step_x) {
        const double keep = x.data()[i];
        x.data()[i] = keep + h;
        const double lp = loss();
        x.data()[i] = keep - h;
        const double lm = loss();
        x.data()[i] = keep;
        const double numeric = (lp - lm) / (2 * h);
        CAPTURE(i, dx.data()[i], numeric);
        REQUIRE(agree(dx.data()[i], numeric));
    }
    std::vector<std::pair<std::string, std::pair<std::span<double>, std::vector<double>>>> params;
    layer.visit_parameters([&](std::string_view name, std::span<double> v, std::span<double> g) {
        params.push_back({std::string(name), {v, std::vector<double>(g.begin(), g.end())}});
    });
    for (auto& [name, pg] : params) {
        auto& [v, g] = pg;
        const std::size_t step = std::max<std::size_t>(1, v.size() / samples);
        for (std::size_t i = 0; i < v.size(); i += step) {
            const double keep = v[i];
            v[i] = keep + h;
            const double lp = loss();
            v[i] = keep - h;
            const double lm = loss();
            v[i] = keep;
            const double numeric = (lp - lm) / (2 * h);
            CAPTURE(name, i, g[i], numeric);
            REQUIRE(agree(g[i], numeric));
        }
    }
}
