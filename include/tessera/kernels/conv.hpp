#pragma once
// 2-D convolution on NHWC tensors, forward and both gradients, as im2col + GEMM over row chunks.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/simd.hpp"
#include "tessera/kernels/storage.hpp"
#include "tessera/tensor/dense.hpp"

namespace tessera::kernels {

/// Kernel size, stride and zero padding of a convolution or pooling window.
/// The fields are 32-bit and set by a constructor: GCC 12 with AVX-512 miscompiles a constant
/// aggregate of four 64-bit values shaped {a, a, a, 0} (e.g. a 1×1, stride-1, unpadded window),
/// and this layout avoids that code path.
struct window {
    std::uint32_t kh = 1, kw = 1, stride = 1, pad = 0;

    constexpr window() = default;
    constexpr window(std::size_t kernel_h, std::size_t kernel_w, std::size_t step, std::size_t padding)
        : kh(narrow(kernel_h)), kw(narrow(kernel_w)), stride(narrow(step)), pad(narrow(padding)) {}

    [[nodiscard]] std::size_t out_h(std::size_t h) const {
        check(h, kh, "height");
        return (h + 2 * pad - kh) / stride + 1;
    }
    [[nodiscard]] std::size_t out_w(std::size_t w) const {
        check(w, kw, "width");
        return (w + 2 * pad - kw) / stride + 1;
    }
    [[nodiscard]] tensor::shape output(const tensor::shape& in, std::size_t channels) const {
        return {in.n, out_h(in.h), out_w(in.w), channels};
    }
    /// True when the input itself is the im2col matrix (1×1, stride 1, no padding).
    [[nodiscard]] constexpr bool is_pointwise() const noexcept { return kh == 1 && kw == 1 && stride == 1 && pad == 0; }

private:
    static constexpr std::uint32_t narrow(std::size_t v) {
        if (v > 0xFFFF'FFFFu) throw tensor::shape_error("tessera::kernels::window: " + std::to_string(v) + " does not fit 32 bits");
        return static_cast<std::uint32_t>(v);
    }
    void check(std::size_t size, std::size_t k, const char* what) const {
        if (stride == 0 || k == 0 || size + 2 * pad < k)
            throw tensor::shape_error("tessera::kernels::window: input " + std::string(what) + " " +
                                      std::to_string(size) + " with padding " + std::to_string(pad) +
                                      " is smaller than the kernel " + std::to_string(k) + " (stride " +
                                      std::to_string(stride) + ")");
    }
};

namespace detail {

/// Rows of the im2col matrix per chunk: whole images (so chunks never write the same input pixel in
/// col2im), about 1 MiB of columns (rows × k) so that a chunk stays in L2, and at least
/// `min_conv_chunks` chunks when the batch has that many images, so that threads taking chunks one at a
/// time finish together even on cores of different speeds. The chunking does not depend on the thread
/// count: results are the same on any number of threads.
inline constexpr std::size_t min_conv_chunks = 8;
[[nodiscard]] inline std::size_t conv_chunk_rows(std::size_t k, std::size_t rows_per_image, std::size_t images,
                                                 std::size_t elem) {
    const std::size_t target = (std::size_t{1} << 20) / (elem * std::max<std::size_t>(k, 1));
    // An empty batch (images == 0) still gets a chunk of at least one row: its loops then run zero times.
    std::size_t per_chunk =
        std::clamp<std::size_t>(target / std::max<std::size_t>(rows_per_image, 1), 1, std::max<std::size_t>(images, 1));
    const std::size_t chunks = std::min(images, std::max((images + per_chunk - 1) / per_chunk, min_conv_chunks));
    if (chunks > 0) per_chunk = (images + chunks - 1) / chunks;
    return std::max<std::size_t>(per_chunk * rows_per_image, 1);
}

/// Threads for a chunked loop: never more than chunks.
[[nodiscard]] inline std::size_t chunk_threads(const gemm_options& opt, std::size_t chunks) noexcept {
    return std::max<std::size_t>(1, std::min(opt.threads, chunks));
}

/// Runs body(thread, chunk) for chunks 0..count-1 on `threads` threads, each thread taking the next
/// untaken chunk when it finishes one (a static split would leave the faster core idle while the
/// slower one finishes its share).
template <class F>
void for_each_chunk(std::size_t count, std::size_t threads, thread_pool* pool, F&& body) {
    std::atomic<std::size_t> next{0};
    run_parallel(parallelism{threads, pool}, [&](std::size_t t) {
        for (std::size_t c = next.fetch_add(1, std::memory_order_relaxed); c < count;
             c = next.fetch_add(1, std::memory_order_relaxed))
            body(t, c);
    });
}

/// One column buffer (and GEMM packing buffers) per thread.
template <class C>
std::vector<aligned_vector<C>>& thread_columns(workspace<C>& ws, std::size_t threads, std::size_t n) {
    if (ws.cols.size() < threads) ws.cols.resize(threads);
    if (ws.packs.size() < threads) ws.packs.resize(threads);
    for (std::size_t t = 0; t < threads; ++t)
        if (ws.cols[t].size() < n) ws.cols[t].resize(n);
    return ws.cols;
}

}  // namespace detail

/// Rows [m0, m1) of the im2col matrix of x (NHWC): row m = (n, oy, ox), column (ky, kx, ci), so
/// col has k = kh·kw·c columns. Padding contributes zeros.
template <Compute C, Storage T>
void im2col(const T* x, const tensor::shape& in, const window& g, std::size_t m0, std::size_t m1, C* col) {
    // Runs of kw·c or c values: an inline register loop where T loads into registers, which costs
    // less than a call per run (memmove, or a dispatched conversion).
    const auto copy = [](const T* from, C* to, std::size_t n) {
        if constexpr (simd::in_register<C, T>)
            simd::copy(from, to, n);
        else
            convert_n(from, to, n);
    };
    const std::size_t oh = g.out_h(in.h), ow = g.out_w(in.w), k = g.kh * g.kw * in.c, span = g.kw * in.c;
    for (std::size_t m = m0; m < m1; ++m) {
        const std::size_t n = m / (oh * ow), oy = (m / ow) % oh, ox = m % ow;
        C* row = col + (m - m0) * k;
        const std::ptrdiff_t ix0 = static_cast<std::ptrdiff_t>(ox * g.stride) - static_cast<std::ptrdiff_t>(g.pad);
        const bool inside_x = ix0 >= 0 && ix0 + static_cast<std::ptrdiff_t>(g.kw) <= static_cast<std::ptrdiff_t>(in.w);
        for (std::size_t ky = 0; ky < g.kh; ++ky) {
            const std::ptrdiff_t iy = static_cast<std::ptrdiff_t>(oy * g.stride + ky) - static_cast<std::ptrdiff_t>(g.pad);
            C* dst = row + ky * span;
            if (iy < 0 || iy >= static_cast<std::ptrdiff_t>(in.h)) {
                std::fill(dst, dst + span, C(0));
                continue;
            }
            const T* src_row = x + (n * in.h + static_cast<std::size_t>(iy)) * in.w * in.c;
            if (inside_x) {  // the kw pixels of this kernel row are contiguous in NHWC: one copy
                copy(src_row + static_cast<std::size_t>(ix0) * in.c, dst, span);
                continue;
            }
            for (std::size_t kx = 0; kx < g.kw; ++kx) {
                const std::ptrdiff_t ix = ix0 + static_cast<std::ptrdiff_t>(kx);
                if (ix < 0 || ix >= static_cast<std::ptrdiff_t>(in.w))
                    std::fill(dst + kx * in.c, dst + (kx + 1) * in.c, C(0));
                else
                    copy(src_row + static_cast<std::size_t>(ix) * in.c, dst + kx * in.c, in.c);
            }
        }
    }
}

/// Adds rows [m0, m1) of an im2col-shaped gradient back into dx (NHWC, computation type).
template <Compute C>
void col2im_add(const C* col, const tensor::shape& in, const window& g, std::size_t m0, std::size_t m1, C* dx) {
    const std::size_t oh = g.out_h(in.h), ow = g.out_w(in.w), k = g.kh * g.kw * in.c, span = g.kw * in.c;
    for (std::size_t m = m0; m < m1; ++m) {
        const std::size_t n = m / (oh * ow), oy = (m / ow) % oh, ox = m % ow;
        const C* row = col + (m - m0) * k;
        const std::ptrdiff_t ix0 = static_cast<std::ptrdiff_t>(ox * g.stride) - static_cast<std::ptrdiff_t>(g.pad);
        const bool inside_x = ix0 >= 0 && ix0 + static_cast<std::ptrdiff_t>(g.kw) <= static_cast<std::ptrdiff_t>(in.w);
        for (std::size_t ky = 0; ky < g.kh; ++ky) {
            const std::ptrdiff_t iy = static_cast<std::ptrdiff_t>(oy * g.stride + ky) - static_cast<std::ptrdiff_t>(g.pad);
            if (iy < 0 || iy >= static_cast<std::ptrdiff_t>(in.h)) continue;
            C* dst_row = dx + (n * in.h + static_cast<std::size_t>(iy)) * in.w * in.c;
            const C* src = row + ky * span;
            if (inside_x) {
                simd::add_to(src, dst_row + static_cast<std::size_t>(ix0) * in.c, span);
                continue;
            }
            for (std::size_t kx = 0; kx < g.kw; ++kx) {
                const std::ptrdiff_t ix = ix0 + static_cast<std::ptrdiff_t>(kx);
                if (ix < 0 || ix >= static_cast<std::ptrdiff_t>(in.w)) continue;
                simd::add_to(src + kx * in.c, dst_row + static_cast<std::size_t>(ix) * in.c, in.c);
            }
        }
    }
}

/// y = conv(x, w): x NHWC `in`, w laid out [kh][kw][cin][cout] (a k × cout matrix), y NHWC with cout
/// channels. Computation in C; x, w and y may be stored in any Storage type.
template <Compute C, Storage T, Storage W, Storage Y>
void conv2d_forward(const T* x, const tensor::shape& in, const W* w, std::size_t cout, const window& g, Y* y,
                    workspace<C>& ws, gemm_options opt = {}) {
    const tensor::shape out = g.output(in, cout);
    const std::size_t rows = out.pixels(), k = g.kh * g.kw * in.c;
    store_compute<C, Y> dst(y, out.size(), ws.c, parallelism{opt.threads, opt.pool});
    if (g.is_pointwise()) {
        gemm(trans::no, trans::no, rows, cout, k, C(1), x, k, w, cout, C(0), dst.target(), cout, opt);
    } else {
        // Chunks of whole images run in parallel, each thread with its own columns and a one-thread GEMM.
        const std::size_t chunk = detail::conv_chunk_rows(k, out.h * out.w, out.n, sizeof(C));
        const std::size_t chunks = (rows + chunk - 1) / chunk, threads = detail::chunk_threads(opt, chunks);
        auto& cols = detail::thread_columns(ws, threads, chunk * k);
        C* y0 = dst.target();
        detail::for_each_chunk(chunks, threads, opt.pool, [&](std::size_t t, std::size_t c) {
            const std::size_t m0 = c * chunk, m1 = std::min(rows, m0 + chunk);
            im2col(x, in, g, m0, m1, cols[t].data());
            gemm(trans::no, trans::no, m1 - m0, cout, k, C(1), cols[t].data(), k, w, cout, C(0), y0 + m0 * cout, cout,
                 {1, &ws.packs[t]});
        });
    }
    dst.commit();
}

/// dx = conv_backward_data(dy, w): the gradient with respect to the input (overwrites dx).
template <Compute C, Storage D, Storage W, Storage X>
void conv2d_backward_data(const D* dy, const tensor::shape& in, const W* w, std::size_t cout, const window& g,
                          X* dx, workspace<C>& ws, gemm_options opt = {}) {
    const tensor::shape out = g.output(in, cout);
    const std::size_t rows = out.pixels(), k = g.kh * g.kw * in.c;
    store_compute<C, X> dst(dx, in.size(), ws.c, parallelism{opt.threads, opt.pool});
    if (g.is_pointwise()) {
        gemm(trans::no, trans::yes, rows, k, cout, C(1), dy, cout, w, cout, C(0), dst.target(), k, opt);
    } else {
        C* acc = dst.target();
        std::fill(acc, acc + in.size(), C(0));
        const std::size_t chunk = detail::conv_chunk_rows(k, out.h * out.w, out.n, sizeof(C));
        const std::size_t chunks = (rows + chunk - 1) / chunk, threads = detail::chunk_threads(opt, chunks);
        auto& cols = detail::thread_columns(ws, threads, chunk * k);
        detail::for_each_chunk(chunks, threads, opt.pool, [&](std::size_t t, std::size_t c) {
            const std::size_t m0 = c * chunk, m1 = std::min(rows, m0 + chunk);
            gemm(trans::no, trans::yes, m1 - m0, k, cout, C(1), dy + m0 * cout, cout, w, cout, C(0), cols[t].data(), k,
                 {1, &ws.packs[t]});
            col2im_add(cols[t].data(), in, g, m0, m1, acc);  // chunks hold whole images: no overlap
        });
    }
    dst.commit();
}

/// dw += conv_backward_weight(x, dy): accumulates the weight gradient ([kh][kw][cin][cout], in C).
/// Bytes of partial weight gradients conv2d_backward_weight keeps per layer (see there).
inline constexpr std::size_t partial_budget_bytes = std::size_t{4} << 20;

template <Compute C, Storage T, Storage D>
void conv2d_backward_weight(const T* x, const tensor::shape& in, const D* dy, std::size_t cout, const window& g,
                            C* dw, workspace<C>& ws, gemm_options opt = {}) {
    const tensor::shape out = g.output(in, cout);
    const std::size_t rows = out.pixels(), k = g.kh * g.kw * in.c;
    if (g.is_pointwise()) {
        gemm(trans::yes, trans::no, k, cout, rows, C(1), x, k, dy, cout, C(1), dw, cout, opt);
        return;
    }
    const std::size_t chunk = detail::conv_chunk_rows(k, out.h * out.w, out.n, sizeof(C));
    const std::size_t chunks = (rows + chunk - 1) / chunk, size = k * cout;
    // The chunks are cut into `lanes` runs of consecutive chunks, fixed by the shapes alone. Lane 0
    // accumulates into dw, the others into partial sums of their own, added to dw in lane order: the
    // same sums in the same order whichever thread ran which lane, on any number of threads. The
    // partial sums (lanes - 1 weight gradients) stay within partial_budget_bytes; a layer whose weight
    // gradient alone is that big runs one lane, its GEMMs split between the threads by rows of dw.
    const std::size_t lanes = std::clamp<std::size_t>(partial_budget_bytes / std::max<std::size_t>(1, size * sizeof(C)), 1,
                                                      std::max<std::size_t>(1, std::min(chunks, detail::min_conv_chunks)));
    const std::size_t threads = lanes > 1 ? detail::chunk_threads(opt, lanes) : 1;
    auto& cols = detail::thread_columns(ws, threads, chunk * k);
    if (ws.partial.size() < (lanes - 1) * size) ws.partial.resize((lanes - 1) * size);
    detail::for_each_chunk(lanes, threads, opt.pool, [&](std::size_t t, std::size_t lane) {
        C* target = lane == 0 ? dw : ws.partial.data() + (lane - 1) * size;
        // One GEMM thread per lane; a single lane gets all the threads (no buffers to keep then).
        const gemm_options o = lanes > 1 || opt.threads == 1 ? gemm_options{1, &ws.packs[t]}
                                                             : gemm_options{opt.threads, nullptr, opt.pool};
        const std::size_t first = lane * chunks / lanes, last = (lane + 1) * chunks / lanes;
        for (std::size_t c = first; c < last; ++c) {
            const std::size_t m0 = c * chunk, m1 = std::min(rows, m0 + chunk);
            im2col(x, in, g, m0, m1, cols[t].data());
            // The first chunk of a partial sum overwrites it; lane 0 and later chunks accumulate.
            const C beta = c == first && lane > 0 ? C(0) : C(1);
            gemm(trans::yes, trans::no, k, cout, m1 - m0, C(1), cols[t].data(), k, dy + m0 * cout, cout, beta, target,
                 cout, o);
        }
    });
    detail::parallel_ranges(parallelism{opt.threads, opt.pool}, size, 1 << 14, [&](std::size_t b, std::size_t e, std::size_t) {
        for (std::size_t lane = 1; lane < lanes; ++lane) simd::add_to(ws.partial.data() + (lane - 1) * size + b, dw + b, e - b);
    });
}

/// Direct 7-loop convolution in double: the reference for tests (w [kh][kw][cin][cout]).
template <Storage T, Storage W>
void conv2d_reference(const T* x, const tensor::shape& in, const W* w, std::size_t cout, const window& g, double* y) {
    const tensor::shape out = g.output(in, cout);
    for (std::size_t n = 0; n < out.n; ++n)
        for (std::size_t oy = 0; oy < out.h; ++oy)
            for (std::size_t ox = 0; ox < out.w; ++ox)
                for (std::size_t co = 0; co < cout; ++co) {
                    double s = 0;
                    for (std::size_t ky = 0; ky < g.kh; ++ky)
                        for (std::size_t kx = 0; kx < g.kw; ++kx) {
                            const long iy = static_cast<long>(oy * g.stride + ky) - static_cast<long>(g.pad);
                            const long ix = static_cast<long>(ox * g.stride + kx) - static_cast<long>(g.pad);
                            if (iy < 0 || ix < 0 || iy >= static_cast<long>(in.h) || ix >= static_cast<long>(in.w)) continue;
                            for (std::size_t ci = 0; ci < in.c; ++ci)
                                s += detail::load_as<double>(
                                         x[((n * in.h + static_cast<std::size_t>(iy)) * in.w + static_cast<std::size_t>(ix)) * in.c + ci]) *
                                     detail::load_as<double>(w[((ky * g.kw + kx) * in.c + ci) * cout + co]);
                        }
                    y[((n * out.h + oy) * out.w + ox) * cout + co] = s;
                }
}

}  // namespace tessera::kernels
