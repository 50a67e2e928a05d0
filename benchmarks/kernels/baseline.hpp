#pragma once
// Baselines measured in the same run as our kernels: OpenBLAS sgemm (single-threaded) and the
// machine's fp32 peak (an FMA-only loop on register-resident vectors).
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <xsimd/xsimd.hpp>

extern "C" char* openblas_get_corename();

namespace bench {

/// Seconds per call of f, the best of several timed batches (at least ~min_seconds in total).
template <class F>
double seconds_per_call(F&& f, double min_seconds = 0.2) {
    f();  // warm up
    double best = 1e300, total = 0;
    int reps = 1;
    while (total < min_seconds) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; ++i) f();
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::min(best, dt / reps);
        total += dt;
        if (dt < 0.02) reps *= 2;
    }
    return best;
}

/// OpenBLAS's core type; "Prescott" means its run-time detection did not recognise this CPU and it
/// runs generic SSE3 kernels: set OPENBLAS_CORETYPE (e.g. SkylakeX) for a fair comparison.
inline std::string openblas_core() {
    static const std::string core = [] {
        openblas_set_num_threads(1);
        std::string c = openblas_get_corename();
        if (c == "Prescott" || c == "prescott")
            std::fprintf(stderr, "warning: OpenBLAS uses its generic 'Prescott' kernels on this CPU; rerun with "
                                 "OPENBLAS_CORETYPE=SkylakeX for a fair baseline\n");
        return c;
    }();
    return core;
}

/// GFLOP/s of single-threaded OpenBLAS sgemm on C(m×n) = A(m×k)·B(k×n), row-major.
inline double openblas_gflops(int m, int n, int k, bool trans_a = false, bool trans_b = false) {
    openblas_core();
    std::vector<float> a(static_cast<std::size_t>(m) * k, 0.5f), b(static_cast<std::size_t>(k) * n, 0.25f),
        c(static_cast<std::size_t>(m) * n);
    const double s = seconds_per_call([&] {
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, m, n, k, 1.0f,
                    a.data(), trans_a ? m : k, b.data(), trans_b ? k : n, 0.0f, c.data(), n);
    });
    return 2.0 * m * n * k / s / 1e9;
}

/// OpenBLAS sgemm 512³, measured once per process: the yardstick of the training-step benchmark.
inline double openblas_512() {
    static const double g = openblas_gflops(512, 512, 512);
    return g;
}

/// A fixed amount of FMA work: 24 independent chains on full-width, register-resident vectors
/// (enough to cover the FMA latency on two ports), `iters` FMAs each; returns their sum.
inline constexpr int fma_chains = 24;
inline float fma_work(long iters) {
    using B = xsimd::batch<float>;
    constexpr int chains = fma_chains;
    B acc[chains];
#pragma GCC unroll 24
    for (int i = 0; i < chains; ++i) acc[i] = B(1.0f + 0.01f * static_cast<float>(i));  // distinct: equal chains would be merged
    // Operands the compiler cannot see (otherwise GCC 12 folds the whole loop away at -O3).
    volatile float xv = 0.999999f, yv = 1e-7f;
    const B x(static_cast<float>(xv)), y(static_cast<float>(yv));
    for (long it = 0; it < iters; ++it)
#pragma GCC unroll 24
        for (int i = 0; i < chains; ++i) acc[i] = xsimd::fma(acc[i], x, y);
    float sink = 0;
#pragma GCC unroll 24
    for (int i = 0; i < chains; ++i) sink += xsimd::hadd(acc[i]);
    return sink;
}

/// fp32 peak of one core (fma_work's FLOPs over its time), measured once per process.
inline double fp32_peak_gflops() {
    static const double g = [] {
        constexpr long iters = 40'000;
        float sink = 0;
        const double s = seconds_per_call([&] { sink += fma_work(iters); });
        if (sink == 12345.0f) std::puts("");
        return 2.0 * xsimd::batch<float>::size * fma_chains * iters / s / 1e9;
    }();
    return g;
}

}  // namespace bench
