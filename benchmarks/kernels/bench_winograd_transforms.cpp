// Winograd F(4×4, 3×3)'s input and output-gradient transforms reading their tensor plainly against
// reading it through a batch norm's map (the input through the ReLU of the batch norm before the
// convolution, simd::relu_of_affine; the output gradient through the batch norm after it,
// simd::batch_norm_gradient_map with its ReLU): what the map costs where a ResNet block fuses the
// batch norm into the convolution. One thread, batch 32, cin = cout, 3×3 stride 1 padding 1, fp32,
// over all tiles a chunk at a time as the unfused pass runs them. The baseline is the plain transform
// in the same run. Counters: milliseconds of each (the best of 60 rounds, the variants taking turns),
// and mapped/plain.
//   bench_winograd_transforms [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <random>

#include "tessera/kernels/winograd.hpp"

namespace k = tessera::kernels;
namespace wd = tessera::kernels::winograd::detail;

namespace {

void transforms(benchmark::State& state) {
    const auto c = static_cast<std::size_t>(state.range(0)), hw = static_cast<std::size_t>(state.range(1));
    const tessera::tensor::shape in{32, hw, hw, c};
    const k::window g{3, 3, 1, 1};
    k::aligned_vector<float> x(in.size()), dy(in.size()), y(in.size()), per_channel(6 * c);
    std::mt19937 rng(1);
    std::normal_distribution<float> normal;
    for (auto* t : {&x, &dy, &y, &per_channel})
        for (auto& v : *t) v = normal(rng);
    const k::simd::relu_of_affine<float> relu{per_channel.data(), per_channel.data() + c, 0.0f};
    const k::simd::relu_of_affine<float> after{per_channel.data() + 4 * c, per_channel.data() + 5 * c, 0.0f};
    const k::simd::batch_norm_gradient_map<float, float> map{y.data(), per_channel.data(), per_channel.data() + c,
                                                             per_channel.data() + 2 * c, per_channel.data() + 3 * c, &after};
    const wd::plan<4, float> p(in, c, g);
    k::aligned_vector<float> v(wd::positions<4> * wd::position_stride<float>(p.chunk, c));
    const auto over_chunks = [&](auto&& f) {
        for (std::size_t i = 0; i < p.chunks; ++i) {
            const auto [t0, t1] = p.range(i);
            f(t0, t1);
        }
        benchmark::DoNotOptimize(v.data());
        benchmark::ClobberMemory();
    };
    const auto input = [&](const k::simd::relu_of_affine<float>* m) {
        over_chunks([&](std::size_t t0, std::size_t t1) { wd::transform_input(x.data(), in, g, p.tl, t0, t1, v.data(), m); });
    };
    const auto gradient = [&](const k::simd::batch_norm_gradient_map<float, float>* m) {
        over_chunks([&](std::size_t t0, std::size_t t1) {
            wd::transform_output_gradient(dy.data(), p.tl, c, t0, t1, wd::strip_width<float>(c), v.data(), m);
        });
    };
    using gradient_map = k::simd::batch_norm_gradient_map<float, float>;
    double best[4];
    std::fill(std::begin(best), std::end(best), 1e300);
    for (auto _ : state)
        for (int round = 0; round < 60; ++round)
            for (int i = 0; i < 4; ++i) {
                const auto t0 = std::chrono::steady_clock::now();
                if (i == 0) input(nullptr);
                else if (i == 1) input(&relu);
                else if (i == 2) gradient(static_cast<const gradient_map*>(nullptr));
                else gradient(&map);
                best[i] = std::min(best[i], std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            }
    state.counters["input_ms"] = best[0] * 1e3;
    state.counters["input_mapped_ms"] = best[1] * 1e3;
    state.counters["input_mapped_vs_plain"] = best[1] / best[0];
    state.counters["gradient_ms"] = best[2] * 1e3;
    state.counters["gradient_mapped_ms"] = best[3] * 1e3;
    state.counters["gradient_mapped_vs_plain"] = best[3] / best[2];
}

}  // namespace

// {channels, image side}: ResNet-20's three widths on 1×28×28 inputs.
BENCHMARK(transforms)->ArgNames({"c", "hw"})->Args({16, 28})->Args({32, 14})->Args({64, 7})->Iterations(1)->Unit(benchmark::kMillisecond);
