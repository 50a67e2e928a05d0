#pragma once
// Convolutions of few input channels (a network's stem: 1 to 4 channels) computed directly, forward and
// weight gradient, on NHWC tensors: each output pixel's channels in one to four SIMD vectors,
// multiply-added over the kernel's taps from broadcast input values. im2col + GEMM spends as long
// copying such an input into columns of 9·cin values as multiplying them (a GEMM of depth 9), and
// Winograd's GEMMs of depth cin are thinner still.
#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "tessera/kernels/conv_chunks.hpp"
#include "tessera/kernels/simd.hpp"
#include "tessera/kernels/storage.hpp"
#include "tessera/tensor/dense.hpp"

namespace tessera::kernels::direct {

/// Input channels the direct kernels take at most, and SIMD vectors of output channels.
inline constexpr std::size_t max_in_channels = 4;
inline constexpr std::size_t max_vectors = 4;

/// Whether the direct kernels compute this convolution: at most max_in_channels input channels, the
/// output channels whole SIMD vectors of C (at most max_vectors of them), a window of more than one
/// tap.
template <Compute C>
[[nodiscard]] bool fits(const tensor::shape& in, std::size_t cout, const window& g) noexcept {
    constexpr std::size_t w = simd::batch<C>::size;
    return in.c >= 1 && in.c <= max_in_channels && cout % w == 0 && cout / w >= 1 && cout / w <= max_vectors &&
           !g.is_pointwise();
}

namespace detail {

/// f(std::integral_constant<std::size_t, nv>{}) for nv = cout / SIMD width, 1 to max_vectors.
template <Compute C, class F>
void with_vectors(std::size_t cout, F&& f) {
    switch (cout / simd::batch<C>::size) {
        case 1: return f(std::integral_constant<std::size_t, 1>{});
        case 2: return f(std::integral_constant<std::size_t, 2>{});
        case 3: return f(std::integral_constant<std::size_t, 3>{});
        default: return f(std::integral_constant<std::size_t, 4>{});
    }
}

/// The kh input rows under output row oy of image n, in C, each padded with zeros to
/// (in.w + 2·pad)·cin values (rows in the padding all zeros): rows[ky] holds the row of tap ky.
template <Compute C, Storage T>
void padded_rows(const T* x, const tensor::shape& in, const window& g, std::size_t n, std::size_t oy, C* rows) {
    const std::size_t width = (in.w + 2 * g.pad) * in.c;
    std::fill(rows, rows + g.kh * width, C(0));
    for (std::size_t ky = 0; ky < g.kh; ++ky) {
        const std::size_t iy = oy * g.stride + ky;
        if (iy < g.pad || iy - g.pad >= in.h) continue;
        const T* src = x + (n * in.h + (iy - g.pad)) * in.w * in.c;
        C* dst = rows + ky * width + g.pad * in.c;
        for (std::size_t i = 0; i < in.w * in.c; ++i) dst[i] = kernels::detail::load_as<C>(src[i]);
    }
}

/// Output pixels computed together: each a chain of multiply-adds per vector, independent of the
/// others (enough chains to cover the multiply-add's latency), with their accumulators, the tap's
/// weight vectors and a broadcast in the vector registers.
template <std::size_t NV>
inline constexpr std::size_t pixels_per_block = NV == 1 ? 12 : NV == 2 ? 8 : 5;

/// Where each tap (ky, kx, ci) of the window reads output pixel 0's input in padded_rows' rows.
[[nodiscard]] inline std::vector<std::size_t> tap_offsets(const tensor::shape& in, const window& g) {
    const std::size_t width = (in.w + 2 * g.pad) * in.c;
    std::vector<std::size_t> offsets;
    offsets.reserve(g.kh * g.kw * in.c);
    for (std::size_t ky = 0; ky < g.kh; ++ky)
        for (std::size_t kx = 0; kx < g.kw; ++kx)
            for (std::size_t ci = 0; ci < in.c; ++ci) offsets.push_back(ky * width + kx * in.c + ci);
    return offsets;
}

/// Output row oy of image n (ow pixels, NV vectors of channels each) into y_row: for each pixel, every
/// vector of channels multiply-added over the taps (ky, kx, ci) in that order from zero, as the
/// im2col GEMM of depth kh·kw·cin sums them (taps in the padding add zero products, which change no
/// sum: the same bits). offsets: tap_offsets.
template <std::size_t NV, Compute C, class Y>
void forward_row(const C* rows, const tensor::shape& in, const window& g, std::size_t ow, const std::size_t* offsets,
                 const C* w, Y* y_row) {
    using B = simd::batch<C>;
    constexpr std::size_t vw = B::size, cout = NV * vw, px = pixels_per_block<NV>;
    const std::size_t taps = g.kh * g.kw * in.c, step = g.stride * in.c;
    const auto store = [](Y* p, const B& v) {
        if constexpr (std::is_same_v<Y, C>)
            v.store_unaligned(p);
        else
            simd::store<C>(p, v);
    };
    std::size_t ox0 = 0;
    for (; ox0 + px <= ow; ox0 += px) {
        B acc[px][NV];
        for (auto& a : acc)
            for (auto& v : a) v = B(C(0));
        for (std::size_t t = 0; t < taps; ++t) {
            const C* src = rows + offsets[t] + ox0 * step;
            B wv[NV];
#pragma GCC unroll 4
            for (std::size_t v = 0; v < NV; ++v) wv[v] = B::load_unaligned(w + t * cout + v * vw);
#pragma GCC unroll 16
            for (std::size_t p = 0; p < px; ++p) {
                const B xb(src[p * step]);
#pragma GCC unroll 4
                for (std::size_t v = 0; v < NV; ++v) acc[p][v] = simd::fused_multiply_add(xb, wv[v], acc[p][v]);
            }
        }
#pragma GCC unroll 16
        for (std::size_t p = 0; p < px; ++p)
#pragma GCC unroll 4
            for (std::size_t v = 0; v < NV; ++v) store(y_row + (ox0 + p) * cout + v * vw, acc[p][v]);
    }
    for (; ox0 < ow; ++ox0) {  // the row's last pixels, one at a time: the same chains
        B acc[NV];
        for (auto& v : acc) v = B(C(0));
        for (std::size_t t = 0; t < taps; ++t) {
            const B xb(rows[offsets[t] + ox0 * step]);
            for (std::size_t v = 0; v < NV; ++v)
                acc[v] = simd::fused_multiply_add(xb, B::load_unaligned(w + t * cout + v * vw), acc[v]);
        }
        for (std::size_t v = 0; v < NV; ++v) store(y_row + ox0 * cout + v * vw, acc[v]);
    }
}

/// Taps (rows of the weight gradient, (ky, kx, ci)) summed together in one pass over a chunk's
/// pixels: their accumulators, NV vectors each, and the output gradient's vectors fill the registers.
template <std::size_t NV>
inline constexpr std::size_t taps_per_pass = NV == 1 ? 24 : NV == 2 ? 12 : NV == 3 ? 8 : 6;

/// dw rows [t0, t0 + nt) (taps, NV vectors of channels each): target = beta·target + the sum over the
/// chunk's output rows [r0, r1) (rows of oh·ow pixels, image by image) of x(tap)·dy, each a chain of
/// multiply-adds in pixel order from zero.
template <std::size_t NV, Compute C, Storage T, Storage D>
void weight_rows(const T* x, const tensor::shape& in, const window& g, const D* dy, std::size_t r0, std::size_t r1,
                 std::size_t t0, std::size_t nt, const std::size_t* offsets, C* rows, C* target, C beta) {
    using B = simd::batch<C>;
    constexpr std::size_t vw = B::size, cout = NV * vw, most = taps_per_pass<NV>;
    const std::size_t oh = g.out_h(in.h), ow = g.out_w(in.w);
    B acc[most][NV];
    for (auto& a : acc)
        for (auto& v : a) v = B(C(0));
    const std::size_t* offset = offsets + t0;
    const std::size_t step = g.stride * in.c;
    for (std::size_t r = r0; r < r1; ++r) {
        padded_rows(x, in, g, r / oh, r % oh, rows);
        const D* dy_row = dy + r * ow * cout;
        for (std::size_t ox = 0; ox < ow; ++ox) {
            B d[NV];
#pragma GCC unroll 4
            for (std::size_t v = 0; v < NV; ++v) d[v] = simd::load<C>(dy_row + ox * cout + v * vw);
            const C* base = rows + ox * step;
#pragma GCC unroll 24
            for (std::size_t j = 0; j < most; ++j) {
                if (j >= nt) break;
                const B xb(base[offset[j]]);
#pragma GCC unroll 4
                for (std::size_t v = 0; v < NV; ++v) acc[j][v] = simd::fused_multiply_add(xb, d[v], acc[j][v]);
            }
        }
    }
    for (std::size_t j = 0; j < nt; ++j)
        for (std::size_t v = 0; v < NV; ++v) {
            C* p = target + (t0 + j) * cout + v * vw;
            (beta == C(0) ? acc[j][v] : acc[j][v] + B::load_unaligned(p)).store_unaligned(p);
        }
}

}  // namespace detail

/// y = conv(x, w) for a convolution that fits: as kernels::conv2d_forward (w [kh][kw][cin][cout]),
/// bit for bit its im2col + GEMM. Chunks of whole images run in parallel.
template <Compute C, Storage T, Storage W, Storage Y>
void conv2d_forward(const T* x, const tensor::shape& in, const W* w, std::size_t cout, const window& g, Y* y,
                    workspace<C>& ws, gemm_options opt = {}, const tensor::rounding& rounding = {}) {
    const tensor::shape out = g.output(in, cout);
    const parallelism par{opt.threads, opt.pool};
    const C* wc = load_compute<C>(w, g.kh * g.kw * in.c * cout, ws.b, par);
    const std::size_t rows = out.n * out.h, width = (in.w + 2 * g.pad) * in.c;
    const std::size_t chunk = kernels::detail::conv_chunk_rows(g.kh * g.kw * in.c, out.h * out.w, out.n, sizeof(C)) / out.w;
    const std::size_t chunks = (rows + chunk - 1) / chunk, threads = kernels::detail::chunk_threads(opt, chunks);
    auto& buffers = kernels::detail::thread_buffers(ws.cols, threads, g.kh * width);
    const std::vector<std::size_t> offsets = detail::tap_offsets(in, g);
    // Runs the chunks' rows into out (y itself, or C scratch), then done(first row, last row).
    const auto run = [&](auto* to, auto&& done) {
        detail::with_vectors<C>(cout, [&](auto nv) {
            kernels::detail::for_each_chunk(chunks, threads, opt.pool, [&](std::size_t t, std::size_t c) {
                const std::size_t r0 = c * chunk, r1 = std::min(rows, r0 + chunk);
                for (std::size_t r = r0; r < r1; ++r) {
                    detail::padded_rows(x, in, g, r / out.h, r % out.h, buffers[t].data());
                    detail::forward_row<nv()>(buffers[t].data(), in, g, out.w, offsets.data(), wc, to + r * out.w * cout);
                }
                done(r0, r1);
            });
        });
    };
    if constexpr (simd::in_register<C, Y>) {
        // Rounded to nearest from the registers; a stochastic rounding draws in commit().
        if (!rounds_stochastically<C, Y>(rounding)) return run(y, [](std::size_t, std::size_t) {});
    }
    store_compute<C, Y> dst(y, out.size(), ws.c, par, rounding);
    run(dst.target(), [&](std::size_t r0, std::size_t r1) { dst.commit(r0 * out.w * cout, r1 * out.w * cout); });
}

/// dw += the gradient of conv2d_forward with respect to its weights ([kh][kw][cin][cout], in C): per
/// chunk of whole images a sum over its pixels in order, the chunks summed in lanes fixed by the
/// shapes (kernels::detail::sum_in_lanes): the same bits on any number of threads.
template <Compute C, Storage T, Storage D>
void conv2d_backward_weight(const T* x, const tensor::shape& in, const D* dy, std::size_t cout, const window& g, C* dw,
                            workspace<C>& ws, gemm_options opt = {}) {
    const tensor::shape out = g.output(in, cout);
    const std::size_t taps = g.kh * g.kw * in.c, size = taps * cout, rows = out.n * out.h;
    const std::size_t width = (in.w + 2 * g.pad) * in.c;
    const std::size_t chunk = kernels::detail::conv_chunk_rows(taps, out.h * out.w, out.n, sizeof(C)) / out.w;
    const std::size_t chunks = (rows + chunk - 1) / chunk;
    const kernels::detail::lane_plan plan = kernels::detail::plan_lanes(chunks, size, sizeof(C), opt);
    auto& buffers = kernels::detail::thread_buffers(ws.cols, plan.threads, g.kh * width);
    const std::vector<std::size_t> offsets = detail::tap_offsets(in, g);
    if (ws.packs.size() < std::max(plan.threads, opt.threads)) ws.packs.resize(std::max(plan.threads, opt.threads));
    detail::with_vectors<C>(cout, [&](auto nv) {
        constexpr std::size_t most = detail::taps_per_pass<nv()>;
        kernels::detail::sum_in_lanes(plan, chunks, dw, false, size, ws, opt,
                                      [&](std::size_t t, std::size_t c, C* target, C beta, const gemm_options&) {
                                          const std::size_t r0 = c * chunk, r1 = std::min(rows, r0 + chunk);
                                          for (std::size_t t0 = 0; t0 < taps; t0 += most)
                                              detail::weight_rows<nv()>(x, in, g, dy, r0, r1, t0, std::min(most, taps - t0),
                                                                        offsets.data(), buffers[t].data(), target, beta);
                                      });
    });
}

}  // namespace tessera::kernels::direct
