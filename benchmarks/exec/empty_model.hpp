#pragma once
// Models for the exec benchmarks: stages that do nothing (scheduler overhead) or a fixed amount of
// arithmetic (real speed-up).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "tessera/exec/cost.hpp"

namespace tessera::bench {

/// S stages that pass a token through: what remains is the cost of scheduling.
struct empty_stages {
    using tensor = std::vector<float>;
    using label = std::vector<float>;
    using stash = int;
    std::size_t count = 2;

    [[nodiscard]] std::size_t stages() const noexcept { return count; }
    std::pair<tensor, stash> forward(std::size_t, tensor x) { return {std::move(x), 0}; }
    std::pair<float, tensor> loss(const tensor& y, const label&) const { return {0.0f, y}; }
    tensor backward(std::size_t, tensor g, stash) { return g; }
    std::span<float> gradients(std::size_t) { return {}; }
    void update(std::size_t, float) {}
    [[nodiscard]] exec::stage_cost cost(std::size_t) const { return {}; }
};

/// S stages of `work` multiply-adds each way on a cache-resident vector: compute-bound and balanced.
/// Each stage adds the wall time of its passes to busy_seconds[s] (a stage runs on one thread at a
/// time), so a benchmark can tell the schedule's idle time from the machine's speed.
struct busy_stages {
    using tensor = std::vector<float>;
    using label = std::vector<float>;
    using stash = tensor;
    std::size_t count = 2;
    std::size_t work = 1 << 18;  ///< multiply-adds per forward (backward does the same)
    std::vector<std::vector<float>> grads = std::vector<std::vector<float>>(count, std::vector<float>(64, 0.0f));
    std::vector<double> busy_seconds = std::vector<double>(count, 0.0);

    [[nodiscard]] std::size_t stages() const noexcept { return count; }
    // The arithmetic runs on a private, cache-line-aligned copy: the small vectors of neighbouring
    // micro-batches come from one allocator and share cache lines at their ends, so churning them in
    // place on two IPU threads at once would measure false sharing, not the pipeline. Not inlined:
    // the stages and the free-running baseline of bench_pipeline_speedup run the same machine code.
    [[gnu::noinline]] static void churn(tensor& x, std::size_t work) {
        constexpr std::size_t width = 64;
        alignas(64) float local[width] = {};
        const std::size_t n = std::min(x.size(), width);
        std::copy_n(x.begin(), n, local);
        for (std::size_t k = 0; k < work / width; ++k)
            for (std::size_t i = 0; i < width; ++i) local[i] = local[i] * 0.999f + 0.001f;
        std::copy_n(local, n, x.begin());
    }
    std::pair<tensor, stash> forward(std::size_t s, tensor x) {
        stash keep = x;
        timed(s, [&] { churn(x, work); });
        return {std::move(x), std::move(keep)};
    }
    std::pair<float, tensor> loss(const tensor& y, const label&) const { return {y[0], y}; }
    tensor backward(std::size_t s, tensor g, stash st) {
        timed(s, [&] { churn(g, work); });
        for (std::size_t i = 0; i < g.size() && i < grads[s].size(); ++i) grads[s][i] += g[i] * st[i];
        return g;
    }
    std::span<float> gradients(std::size_t s) { return grads[s]; }
    void update(std::size_t s, float) { std::fill(grads[s].begin(), grads[s].end(), 0.0f); }
    [[nodiscard]] exec::stage_cost cost(std::size_t) const {
        return {.forward_flops = 2.0 * double(work), .backward_flops = 2.0 * double(work)};
    }
    [[nodiscard]] double total_busy_seconds() const { return std::accumulate(busy_seconds.begin(), busy_seconds.end(), 0.0); }

private:
    template <class F>
    void timed(std::size_t s, F&& f) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        busy_seconds[s] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
};

}  // namespace tessera::bench
