#pragma once
// The geometry of a convolution window and the chunked, thread-count-independent loops that the
// convolution algorithms (im2col + GEMM, Winograd) share.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
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

/// The kernel taps of a window that read the image for some output pixel: kernel rows [ky0, ky1) and
/// columns [kx0, kx1) (their hull; the taps outside read only padding). On small images many taps
/// do: a 3×3 window with padding 1 on a 1×1 image (ResNet-18's last stage on 32×32 inputs) reads
/// its centre alone, and im2col + GEMM over the live taps does a ninth of the multiplies.
struct live_taps {
    std::size_t ky0 = 0, ky1 = 0, kx0 = 0, kx1 = 0;

    live_taps(const tensor::shape& in, const window& g)
        : live_taps(hull(in.h, g.kh, g.stride, g.pad, g.out_h(in.h)), hull(in.w, g.kw, g.stride, g.pad, g.out_w(in.w)), g) {}

    /// im2col columns over the live taps of c channels.
    [[nodiscard]] constexpr std::size_t columns(std::size_t c) const noexcept { return (ky1 - ky0) * (kx1 - kx0) * c; }

    /// Where the live taps lie in the [kh][kw][c] rows of the weights: one block of rows when every
    /// kernel column is live (whole kernel rows are contiguous), else one block per kernel row.
    struct block {
        std::size_t weight_row, column, rows;  ///< first weight row, first im2col column, rows (= columns) in it
    };
    [[nodiscard]] constexpr std::size_t blocks() const noexcept { return m_whole_rows ? 1 : ky1 - ky0; }
    [[nodiscard]] constexpr block at(std::size_t b, std::size_t c) const noexcept {
        if (m_whole_rows) return {ky0 * m_kw * c, 0, (ky1 - ky0) * m_kw * c};
        const std::size_t span = (kx1 - kx0) * c;
        return {((ky0 + b) * m_kw + kx0) * c, b * span, span};
    }

private:
    struct range {
        std::size_t first, last;
    };
    // Taps t with o·stride + t - pad inside [0, size) for some output o; the whole kernel when no tap is.
    static range hull(std::size_t size, std::size_t kernel, std::size_t stride, std::size_t pad, std::size_t out) noexcept {
        range r{kernel, 0};
        for (std::size_t t = 0; t < kernel; ++t)
            for (std::size_t o = 0; o < out; ++o)
                if (o * stride + t >= pad && o * stride + t - pad < size) {
                    r = {std::min(r.first, t), std::max(r.last, t + 1)};
                    break;
                }
        return r.first < r.last ? r : range{0, kernel};
    }
    live_taps(range y, range x, const window& g) noexcept
        : ky0(y.first), ky1(y.last), kx0(x.first), kx1(x.last), m_kw(g.kw), m_whole_rows(x.first == 0 && x.last == g.kw) {}

    std::size_t m_kw = 1;
    bool m_whole_rows = true;
};

namespace detail {

/// Position t of the row-major positions of images × rows × cols (an output pixel of im2col, a
/// Winograd tile) as its image n, row y and column x, advanced one position at a time: no divisions
/// per position (three a row cost more than a narrow layer's im2col copies).
struct grid_cursor {
    std::size_t n, y, x;
    grid_cursor(std::size_t t, std::size_t rows, std::size_t cols) noexcept
        : n(t / (rows * cols)), y(t / cols % rows), x(t % cols) {}
    void next(std::size_t rows, std::size_t cols) noexcept {
        if (++x < cols) return;
        x = 0;
        if (++y < rows) return;
        y = 0;
        ++n;
    }
};

/// Rows of the im2col matrix per chunk: whole images (so chunks never write the same input pixel in
/// col2im), about 1 MiB of columns (rows × k) so that a chunk stays in L2, and at least
/// `min_conv_chunks` chunks when the batch has that many images, so that threads taking chunks one at a
/// time finish together even on cores of different speeds; but at least `min_chunk_rows` rows when the
/// batch has them, because every chunk's GEMM reads the layer's whole weight matrix: ResNet-18's last
/// stage on 32×32 inputs (1×1 images of 512 channels, k = 4,608) made 16 chunks of 2 rows, each packing
/// 9 MiB of weights for 2 rows of multiplies. The chunking does not depend on the thread count: results
/// are the same on any number of threads.
inline constexpr std::size_t min_conv_chunks = 16;
inline constexpr std::size_t min_chunk_rows = 64;
[[nodiscard]] inline std::size_t conv_chunk_rows(std::size_t k, std::size_t rows_per_image, std::size_t images,
                                                 std::size_t elem) {
    const std::size_t target = (std::size_t{1} << 20) / (elem * std::max<std::size_t>(k, 1));
    const std::size_t row_image = std::max<std::size_t>(rows_per_image, 1);
    // An empty batch (images == 0) still gets a chunk of at least one row: its loops then run zero times.
    std::size_t per_chunk = std::clamp<std::size_t>(target / row_image, 1, std::max<std::size_t>(images, 1));
    const std::size_t chunks = std::min(images, std::max((images + per_chunk - 1) / per_chunk, min_conv_chunks));
    if (chunks > 0) per_chunk = (images + chunks - 1) / chunks;
    // The minimum gives way where its rows would take more than 8 MiB of columns (k above 32,768 in fp32).
    const std::size_t min_rows =
        std::min(min_chunk_rows, std::max<std::size_t>(1, (std::size_t{8} << 20) / (elem * std::max<std::size_t>(k, 1))));
    per_chunk = std::max(per_chunk, std::min(images, (min_rows + row_image - 1) / row_image));
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

/// One buffer of at least n elements per thread.
template <class C>
std::vector<aligned_vector<C>>& thread_buffers(std::vector<aligned_vector<C>>& buffers, std::size_t threads, std::size_t n) {
    if (buffers.size() < threads) buffers.resize(threads);
    for (std::size_t t = 0; t < threads; ++t)
        if (buffers[t].size() < n) buffers[t].resize(n);
    return buffers;
}

/// One column buffer per thread, and GEMM packing buffers for every thread offered (chunk_gemm).
template <class C>
std::vector<aligned_vector<C>>& thread_columns(workspace<C>& ws, std::size_t threads, std::size_t n,
                                               const gemm_options& opt) {
    if (ws.packs.size() < std::max(threads, opt.threads)) ws.packs.resize(std::max(threads, opt.threads));
    return thread_buffers(ws.cols, threads, n);
}

/// opt with packing buffers from ws for each of its threads (a GEMM that has the threads to itself).
template <class C>
[[nodiscard]] gemm_options all_threads(const gemm_options& opt, workspace<C>& ws) {
    if (ws.packs.size() < opt.threads) ws.packs.resize(opt.threads);
    return {opt.threads, ws.packs.data(), opt.pool};
}

/// The GEMM options of thread t of a chunked loop that runs on `threads` threads: one thread with t's
/// packing buffers; or, when one thread takes every chunk though more were offered (fewer chunks than
/// threads), all the offered threads for each GEMM. ws.packs must hold opt.threads buffers
/// (thread_columns).
template <class C>
[[nodiscard]] gemm_options chunk_gemm(const gemm_options& opt, std::size_t threads, workspace<C>& ws, std::size_t t) {
    if (threads == 1 && opt.threads > 1) return {opt.threads, ws.packs.data(), opt.pool};
    return {1, &ws.packs[t]};
}

}  // namespace detail

/// Bytes of partial weight gradients a convolution's weight gradient keeps per layer (see lanes).
inline constexpr std::size_t partial_budget_bytes = std::size_t{4} << 20;

namespace detail {

/// How a sum over chunks (a weight gradient) is cut into lanes: runs of consecutive chunks fixed by
/// the shapes alone. Lane 0 accumulates into the sum, the others into partial sums of their own,
/// added to it in lane order: the same sums in the same order whichever thread ran which lane, on
/// any number of threads. The partial sums (lanes - 1 of `size` elements) stay within
/// partial_budget_bytes; a sum that alone is that big runs one lane, whose GEMMs then get all the
/// threads (split by rows).
struct lane_plan {
    std::size_t lanes, threads;
};
[[nodiscard]] inline lane_plan plan_lanes(std::size_t chunks, std::size_t size, std::size_t elem,
                                          const gemm_options& opt) noexcept {
    const std::size_t lanes = std::clamp<std::size_t>(partial_budget_bytes / std::max<std::size_t>(1, size * elem), 1,
                                                      std::max<std::size_t>(1, std::min(chunks, min_conv_chunks)));
    return {lanes, lanes > 1 ? chunk_threads(opt, lanes) : 1};
}

/// Runs body(thread, chunk, target, beta, gemm_options) for chunks 0..chunks-1 by the plan: target is
/// `sum` or a lane's partial sum, beta 0 for a lane's first chunk (lane 0's too when `sum_is_fresh`)
/// and 1 after; then adds the partial sums into `sum` in lane order. ws.packs must hold opt.threads
/// buffers (thread_columns).
template <class C, class F>
void sum_in_lanes(const lane_plan& plan, std::size_t chunks, C* sum, bool sum_is_fresh, std::size_t size,
                  workspace<C>& ws, const gemm_options& opt, F&& body) {
    if (ws.partial.size() < (plan.lanes - 1) * size) ws.partial.resize((plan.lanes - 1) * size);
    for_each_chunk(plan.lanes, plan.threads, opt.pool, [&](std::size_t t, std::size_t lane) {
        C* target = lane == 0 ? sum : ws.partial.data() + (lane - 1) * size;
        // One GEMM thread per lane; a single lane gets all the threads.
        const gemm_options o = chunk_gemm(opt, plan.threads, ws, t);
        const std::size_t first = lane * chunks / plan.lanes, last = (lane + 1) * chunks / plan.lanes;
        for (std::size_t c = first; c < last; ++c)
            body(t, c, target, c == first && (lane > 0 || sum_is_fresh) ? C(0) : C(1), o);
    });
    if (sum_is_fresh && chunks == 0) std::fill(sum, sum + size, C(0));
    parallel_ranges(parallelism{opt.threads, opt.pool}, size, 1 << 14, [&](std::size_t b, std::size_t e, std::size_t) {
        for (std::size_t lane = 1; lane < plan.lanes; ++lane)
            kernels::simd::add_to(ws.partial.data() + (lane - 1) * size + b, sum + b, e - b);
    });
}

}  // namespace detail

}  // namespace tessera::kernels
