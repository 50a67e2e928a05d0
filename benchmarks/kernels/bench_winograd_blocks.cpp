// Winograd's forward a block of tiles at a time (transform, GEMMs on the register tile, transform
// back: what kernels::winograd::conv2d_forward runs where its plan has a block) against the unfused
// pass over a whole chunk (transform the chunk, its 16 positions' GEMMs, transform back), one thread,
// batch 32, cin = cout, 3×3 stride 1 padding 1, fp32, Winograd F(2×2, 3×3): the measurement behind
// winograd::detail::fused_block_tiles. Both make the same sums; the baseline is the unfused pass in
// the same run. Counters: milliseconds of each (the best of 40 rounds), block/unfused for the
// plan's block, and for blocks of 1, 2 and 4 strips of the register tile's rows.
// forward_pieces: the same blocks handed to the threads by chunks or one at a time (see there).
//   bench_winograd_blocks [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "baseline.hpp"
#include "tessera/kernels/winograd.hpp"

namespace k = tessera::kernels;
namespace wd = tessera::kernels::winograd::detail;

namespace {

/// A layer of batch 32 with c channels in and out on hw × hw images (the benchmark's first two
/// arguments), 3×3 at stride 1 with padding 1, and its input and weights drawn the same every run.
struct layer {
    std::size_t c, hw;
    tessera::tensor::shape in;
    k::window g{3, 3, 1, 1};
    std::vector<float> x, w, y;
    explicit layer(const benchmark::State& state)
        : c(static_cast<std::size_t>(state.range(0))), hw(static_cast<std::size_t>(state.range(1))), in{32, hw, hw, c},
          x(in.size()), w(9 * c * c), y(g.output(in, c).size()) {
        std::mt19937 rng(1);
        std::normal_distribution<float> normal;
        for (auto& v : x) v = normal(rng);
        for (auto& v : w) v = 0.1f * normal(rng);
    }
};

void blocks(benchmark::State& state) {
    layer l(state);
    const std::size_t c = l.c;
    const wd::plan<2, float> p(l.in, c, l.g);
    std::size_t mr = 0;
    wd::with_strip_tile<float>(wd::strip_width<float>(c), [&]<class Tile>(Tile) { mr = Tile::mr; });
    k::aligned_vector<float> rows(wd::positions<2> * wd::plane_stride<float>(c, c)), u(wd::positions<2> * wd::plane_stride<float>(c, c));
    wd::transform_weights<2>(l.w.data(), c, c, false, rows.data(), u.data(), {});
    const std::size_t most = std::max({p.chunk, p.block, 4 * mr});
    k::aligned_vector<float> v(wd::positions<2> * wd::position_stride<float>(most, c)),
        m(wd::positions<2> * wd::position_stride<float>(most, c));
    k::gemm_buffers buffers;
    const auto fused = [&](std::size_t nb) {
        for (std::size_t b0 = 0; b0 < p.tiles; b0 += nb) {
            const std::size_t b1 = std::min(p.tiles, b0 + nb);
            wd::transform_input(l.x.data(), l.in, l.g, p.tl, b0, b1, v.data());
            wd::block_gemms<2>(b1 - b0, c, c, v.data(), u.data(), m.data());
            wd::transform_output(m.data(), p.tl, c, b0, b1, l.y.data());
        }
        benchmark::DoNotOptimize(l.y.data());
    };
    const auto unfused_pass = [&] {
        for (std::size_t c0 = 0; c0 < p.chunks; ++c0) {
            const auto [t0, t1] = p.range(c0);
            wd::transform_input(l.x.data(), l.in, l.g, p.tl, t0, t1, v.data());
            wd::forward_gemms<2>(t1 - t0, c, c, v.data(), u.data(), m.data(), {1, &buffers});
            wd::transform_output(m.data(), p.tl, c, t0, t1, l.y.data());
        }
        benchmark::DoNotOptimize(l.y.data());
    };
    // The variants take turns, each timed once a round, and each keeps its best round: a shared
    // machine's slow spells then fall on all of them alike, and the best rounds are the quiet ones.
    const std::size_t variants[] = {0, p.block, mr, 2 * mr, 4 * mr};  // 0: unfused
    double best[5];
    std::fill(std::begin(best), std::end(best), 1e300);
    for (auto _ : state)
        for (int round = 0; round < 40; ++round)
            for (std::size_t i = 0; i < 5; ++i) {
                const auto t0 = std::chrono::steady_clock::now();
                if (variants[i] == 0) unfused_pass(); else fused(variants[i]);
                best[i] = std::min(best[i], std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            }
    const double unfused = best[0], plan = best[1], one = best[2], two = best[3], four = best[4];
    state.SetLabel("plan's block " + std::to_string(p.block) + " tiles, strips of " + std::to_string(mr));
    state.counters["unfused_ms"] = unfused * 1e3;
    state.counters["plan_ms"] = plan * 1e3;
    state.counters["plan_vs_unfused"] = plan / unfused;
    state.counters["1strip_vs_unfused"] = one / unfused;
    state.counters["2strips_vs_unfused"] = two / unfused;
    state.counters["4strips_vs_unfused"] = four / unfused;
}

/// The fused forward's blocks handed to the threads in chunks of whole images (as a forward that
/// commits each chunk's images runs them) against one block at a time over the whole batch (as
/// conv2d_forward runs them where nothing is committed): F(4×4, 3×3), batch 32, one and two threads
/// of a pool, the two taking turns, best of 400 rounds each. The tiles' outputs are the same either
/// way; a chunk of whole images ends in a short block where its tiles are no multiple of the block
/// (ResNet-20's 28 × 28 layers: 98 tiles, blocks of 32).
void forward_pieces(benchmark::State& state) {
    layer l(state);
    const std::size_t c = l.c, threads = static_cast<std::size_t>(state.range(2));
    const wd::plan<4, float> p(l.in, c, l.g);
    k::thread_pool pool(threads);
    const k::gemm_options opt{threads, nullptr, &pool};
    k::workspace<float> ws;
    const float* u = p.weights(l.w.data(), false, ws, {threads, &pool});
    p.reserve(ws, threads, opt);
    const auto block = [&](std::size_t t, std::size_t b0, std::size_t b1) {
        const auto [v, m] = p.buffers(ws, t);
        wd::transform_input(l.x.data(), l.in, l.g, p.tl, b0, b1, v);
        wd::block_gemms<4>(b1 - b0, c, c, v, u, m);
        wd::transform_output(m, p.tl, c, b0, b1, l.y.data());
    };
    const auto chunks = [&] {
        k::detail::for_each_chunk(p.chunks, k::detail::chunk_threads(opt, p.chunks), &pool, [&](std::size_t t, std::size_t ch) {
            const auto [t0, t1] = p.range(ch);
            for (std::size_t b0 = t0; b0 < t1; b0 += p.block) block(t, b0, std::min(t1, b0 + p.block));
        });
        benchmark::DoNotOptimize(l.y.data());
    };
    const std::size_t blocks = (p.tiles + p.block - 1) / p.block;
    const auto whole = [&] {
        k::detail::for_each_chunk(blocks, std::min(threads, blocks), &pool, [&](std::size_t t, std::size_t b) {
            block(t, b * p.block, std::min(p.tiles, (b + 1) * p.block));
        });
        benchmark::DoNotOptimize(l.y.data());
    };
    double best[2] = {1e300, 1e300};
    for (auto _ : state)
        for (int round = 0; round < 400; ++round)
            for (int i = 0; i < 2; ++i) {
                const auto t0 = std::chrono::steady_clock::now();
                if (i == 0) chunks(); else whole();
                best[i] = std::min(best[i], std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
            }
    state.SetLabel(std::to_string(p.chunks) + " chunks of " + std::to_string(p.chunk) + " tiles, blocks of " + std::to_string(p.block));
    state.counters["chunks_ms"] = best[0] * 1e3;
    state.counters["blocks_ms"] = best[1] * 1e3;
    state.counters["blocks_vs_chunks"] = best[1] / best[0];
}

}  // namespace

BENCHMARK(forward_pieces)
    ->ArgNames({"c", "hw", "threads"})
    ->ArgsProduct({{16}, {28}, {1, 2}})
    ->ArgsProduct({{32}, {14}, {1, 2}})
    ->ArgsProduct({{64}, {7}, {1, 2}})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// {channels, image side}: ResNet-20's three widths on 1×28×28 inputs, then wider layers on small images
// (torchvision's ResNet-18 on 3×32×32). Above gemm's kc (256 channels) the plan has no block.
BENCHMARK(blocks)
    ->ArgNames({"c", "hw"})
    ->Args({16, 28})
    ->Args({32, 14})
    ->Args({64, 7})
    ->Args({64, 14})
    ->Args({128, 8})
    ->Args({128, 16})
    ->Args({256, 4})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
