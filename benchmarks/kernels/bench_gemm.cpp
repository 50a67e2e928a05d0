// GEMM GFLOP/s against single-threaded OpenBLAS sgemm measured in the same run, on square sizes and
// on the im2col shapes of ResNet-20 (batch 32, 1×28×28, NHWC): counters ours, openblas, ratio and
// the fraction of this core's measured fp32 peak.
#include <benchmark/benchmark.h>

#include <vector>

#include "baseline.hpp"
#include "tessera/kernels/gemm.hpp"

namespace k = tessera::kernels;

namespace {

void run(benchmark::State& state, int m, int n, int kk, bool ta, bool tb, std::size_t threads) {
    std::vector<float> a(static_cast<std::size_t>(m) * kk, 0.5f), b(static_cast<std::size_t>(kk) * n, 0.25f),
        c(static_cast<std::size_t>(m) * n);
    for (auto _ : state) {
        k::gemm(ta ? k::trans::yes : k::trans::no, tb ? k::trans::yes : k::trans::no, m, n, kk, 1.0f, a.data(),
                ta ? m : kk, b.data(), tb ? kk : n, 0.0f, c.data(), n, {threads});
        benchmark::DoNotOptimize(c.data());
        benchmark::ClobberMemory();
    }
    const double flops = 2.0 * m * n * kk;
    const double ours = flops * static_cast<double>(state.iterations()) / 1e9;
    state.counters["GFLOPs"] = benchmark::Counter(ours, benchmark::Counter::kIsRate);
    const double blas = bench::openblas_gflops(m, n, kk, ta, tb);
    state.counters["openblas_GFLOPs"] = blas;
    const double ours_rate = flops / bench::seconds_per_call([&] {
        k::gemm(ta ? k::trans::yes : k::trans::no, tb ? k::trans::yes : k::trans::no, m, n, kk, 1.0f, a.data(),
                ta ? m : kk, b.data(), tb ? kk : n, 0.0f, c.data(), n, {threads});
    }) / 1e9;
    state.counters["ratio"] = ours_rate / blas;
    state.counters["peak_frac"] = ours_rate / (bench::fp32_peak_gflops() * static_cast<double>(threads));
    state.SetLabel("openblas core " + bench::openblas_core());
}

void square(benchmark::State& state) {
    const int n = static_cast<int>(state.range(0));
    run(state, n, n, n, false, false, 1);
}

// ResNet-20 convolutions as GEMMs (rows = batch·h·w, cols = out channels, depth = 9·in channels),
// forward Y = col·W, weight gradient dW = colᵀ·dY, data gradient dcol = dY·Wᵀ.
void resnet20_shape(benchmark::State& state) {
    const int m = static_cast<int>(state.range(0)), n = static_cast<int>(state.range(1)), kk = static_cast<int>(state.range(2));
    switch (state.range(3)) {
        case 0: run(state, m, n, kk, false, false, 1); break;   // forward
        case 1: run(state, kk, n, m, true, false, 1); break;    // weight gradient
        default: run(state, m, kk, n, false, true, 1); break;   // data gradient
    }
}

void square_two_threads(benchmark::State& state) {
    const int n = static_cast<int>(state.range(0));
    run(state, n, n, n, false, false, 2);  // ratio: against single-threaded OpenBLAS
}

void peak(benchmark::State& state) {
    for (auto _ : state) benchmark::DoNotOptimize(bench::fp32_peak_gflops());
    state.counters["fp32_peak_GFLOPs"] = bench::fp32_peak_gflops();
    state.counters["openblas_512_GFLOPs"] = bench::openblas_512();
}

}  // namespace

BENCHMARK(peak)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(square)->Arg(128)->Arg(256)->Arg(384)->Arg(512)->Arg(768)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(resnet20_shape)
    ->ArgNames({"M", "N", "K", "pass"})
    ->ArgsProduct({{25088}, {16}, {144}, {0, 1, 2}})   // layer1: 16 -> 16, 28×28
    ->ArgsProduct({{6272}, {32}, {144}, {0, 1, 2}})    // layer2[0]: 16 -> 32, stride 2
    ->ArgsProduct({{6272}, {32}, {288}, {0, 1, 2}})    // layer2: 32 -> 32, 14×14
    ->ArgsProduct({{1568}, {64}, {288}, {0, 1, 2}})    // layer3[0]: 32 -> 64, stride 2
    ->ArgsProduct({{1568}, {64}, {576}, {0, 1, 2}})    // layer3: 64 -> 64, 7×7
    ->Unit(benchmark::kMillisecond);
BENCHMARK(square_two_threads)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
