#pragma once
// 2-D convolution on NHWC tensors, forward and both gradients: im2col + GEMM over row chunks,
// Winograd F(2×2, 3×3) or F(4×4, 3×3) for 3×3 stride-1 windows (winograd.hpp), or directly for inputs
// of a few channels (direct_conv.hpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/kernels/conv_algorithm.hpp"
#include "tessera/kernels/conv_chunks.hpp"
#include "tessera/kernels/direct_conv.hpp"
#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/affine_map.hpp"
#include "tessera/kernels/batch_norm_rows.hpp"
#include "tessera/kernels/simd.hpp"
#include "tessera/kernels/storage.hpp"
#include "tessera/kernels/winograd.hpp"
#include "tessera/tensor/dense.hpp"

namespace tessera::kernels {

/// The output tile m of the Winograd F(m×m, 3×3) that computes a convolution of input `in` to `cout`
/// channels with window g, or 0 for im2col + GEMM. `winograd` forces F(2×2, 3×3) and `winograd_4x4`
/// F(4×4, 3×3) (a window they do not fit is an error). `automatic` chooses Winograd for 3×3 stride-1
/// windows between at least 8 channels: with fewer, its GEMMs of depth cin are too thin to beat
/// im2col's one GEMM of depth 9·cin (a 28×28 stem of 1 to 4 input channels measured 1.1-1.3× slower
/// by Winograd, 8 channels 1.1× faster); and only where its multiplies per tile are fewer than im2col's
/// 9 per output pixel: a 1×1 image (ResNet-18's last stage on 32×32 inputs) fills a quarter of a 2×2
/// tile, 16 multiplies against 9. Of the two tiles it takes F(4×4, 3×3) where it does fewer
/// multiplies than F(2×2, 3×3) (36 per 4×4 tile against 16 per 2×2, counting the tiles the output's
/// edge cuts off) and both sides have at most winograd_4x4_channels channels. bench_conv, forward and
/// both gradients, one thread, F(4×4, 3×3) against F(2×2, 3×3): 128 channels on 28 × 28 77-79 against
/// 117-129 ms and on 4 × 4 (ResNet-18's on 32 × 32 inputs) 1.9-2.1 against 2.5-2.6 ms on a 2-vCPU AMD
/// EPYC (Zen 4), where a 2-vCPU Intel Xeon had measured the 4 × 4 layer 2.07 against 1.99 ms; 256
/// channels on 14 × 14 111-144 against 140-151 ms on the EPYC, not a clear gain for transformed
/// weights of 9 MiB. The choice changes the results' bits, so it cannot follow the CPU it runs on.
inline constexpr std::size_t winograd_4x4_channels = 128;
[[nodiscard]] inline std::size_t winograd_tile(conv_algorithm a, const tensor::shape& in, std::size_t cout, const window& g) {
    if ((a == conv_algorithm::winograd || a == conv_algorithm::winograd_4x4) && !winograd::fits(g))
        throw tensor::shape_error(std::string("tessera::kernels: Winograd ") +
                                  (a == conv_algorithm::winograd ? "F(2x2, 3x3)" : "F(4x4, 3x3)") +
                                  " needs a 3x3 window at stride 1, not " + std::to_string(g.kh) + "x" +
                                  std::to_string(g.kw) + " at stride " + std::to_string(g.stride));
    if (a == conv_algorithm::winograd) return 2;
    if (a == conv_algorithm::winograd_4x4) return 4;
    if (a != conv_algorithm::automatic || !winograd::fits(g) || in.c < 8 || cout < 8) return 0;
    const std::size_t two = 16 * winograd::detail::tiling<2>(in, g).per_image;
    const std::size_t four = 36 * winograd::detail::tiling<4>(in, g).per_image;
    if (four < two && in.c <= winograd_4x4_channels && cout <= winograd_4x4_channels && four < 9 * g.out_h(in.h) * g.out_w(in.w))
        return 4;
    return two < 9 * g.out_h(in.h) * g.out_w(in.w) ? 2 : 0;
}
/// Whether a convolution runs by Winograd (winograd_tile is not 0).
[[nodiscard]] inline bool uses_winograd(conv_algorithm a, const tensor::shape& in, std::size_t cout, const window& g) {
    return winograd_tile(a, in, cout, g) != 0;
}
/// Whether a convolution's forward and weight gradient run directly (direct_conv.hpp; its input
/// gradient stays im2col + GEMM): `automatic` takes the direct kernels for inputs of at most
/// direct::max_in_channels channels (a stem) where they fit. ResNet-20's stem (1 channel to 16 on
/// 28 × 28, batch 32, one thread, best of 300 calls on a 2-vCPU AMD EPYC, Zen 4): forward 0.37 ms
/// by im2col + GEMM against 0.10 ms, weight gradient 0.55 against 0.12 ms.
template <Compute C>
[[nodiscard]] bool uses_direct(conv_algorithm a, const tensor::shape& in, std::size_t cout, const window& g) {
    return a == conv_algorithm::automatic && direct::fits<C>(in, cout, g);
}

namespace detail {

/// An input given through a map (the batch norm and ReLU before the layer: simd::relu_of_affine) runs
/// by Winograd only, whose input transform applies it; im2col reads x as it is.
template <class C>
void check_no_map(const kernels::simd::relu_of_affine<C>* map, const char* function) {
    if (map != nullptr)
        throw std::invalid_argument(std::string("tessera::kernels::") + function +
                                    ": an input given through a batch norm's map needs a Winograd layer (3x3, stride 1)");
}

/// An output gradient given through a batch norm's map (simd::batch_norm_gradient_map) runs by
/// Winograd only, whose output-gradient transform applies it.
template <class C, class D>
void check_no_gradient_map(const kernels::simd::batch_norm_gradient_map<C, D>* map, const char* function) {
    if (map != nullptr)
        throw std::invalid_argument(std::string("tessera::kernels::") + function +
                                    ": an output gradient given through a batch norm's map needs a Winograd layer (3x3, stride 1)");
}

/// f(std::integral_constant<std::size_t, m>{}) for a Winograd tile m of 2 or 4.
template <class F>
decltype(auto) with_winograd_tile(std::size_t m, F&& f) {
    if (m == 4) return f(std::integral_constant<std::size_t, 4>{});
    return f(std::integral_constant<std::size_t, 2>{});
}

}  // namespace detail

/// Rows [m0, m1) of the im2col matrix of x (NHWC) over the live taps t: row m = (n, oy, ox), column
/// (ky, kx, ci) for ky in [t.ky0, t.ky1), kx in [t.kx0, t.kx1), so col has t.columns(c) columns.
/// Padding contributes zeros.
template <Compute C, Storage T>
void im2col(const T* x, const tensor::shape& in, const window& g, const live_taps& t, std::size_t m0, std::size_t m1,
            C* col) {
    // Runs of kw·c or c values: an inline register loop where T loads into registers, which costs
    // less than a call per run (memmove, or a dispatched conversion).
    const auto copy = [](const T* from, C* to, std::size_t n) {
        if constexpr (simd::in_register<C, T>)
            simd::copy(from, to, n);
        else
            convert_n(from, to, n);
    };
    const std::size_t oh = g.out_h(in.h), ow = g.out_w(in.w), k = t.columns(in.c), kw = t.kx1 - t.kx0, span = kw * in.c;
    if (m0 >= m1) return;
    detail::grid_cursor at(m0, oh, ow);  // row m's image and output pixel
    for (std::size_t m = m0; m < m1; ++m, at.next(oh, ow)) {
        const std::size_t n = at.n, oy = at.y, ox = at.x;
        C* row = col + (m - m0) * k;
        const std::ptrdiff_t ix0 = static_cast<std::ptrdiff_t>(ox * g.stride + t.kx0) - static_cast<std::ptrdiff_t>(g.pad);
        const bool inside_x = ix0 >= 0 && ix0 + static_cast<std::ptrdiff_t>(kw) <= static_cast<std::ptrdiff_t>(in.w);
        for (std::size_t ky = t.ky0; ky < t.ky1; ++ky) {
            const std::ptrdiff_t iy = static_cast<std::ptrdiff_t>(oy * g.stride + ky) - static_cast<std::ptrdiff_t>(g.pad);
            C* dst = row + (ky - t.ky0) * span;
            if (iy < 0 || iy >= static_cast<std::ptrdiff_t>(in.h)) {
                std::fill(dst, dst + span, C(0));
                continue;
            }
            const T* src_row = x + (n * in.h + static_cast<std::size_t>(iy)) * in.w * in.c;
            if (inside_x) {  // the pixels of this kernel row are contiguous in NHWC: one copy
                copy(src_row + static_cast<std::size_t>(ix0) * in.c, dst, span);
                continue;
            }
            for (std::size_t kx = 0; kx < kw; ++kx) {
                const std::ptrdiff_t ix = ix0 + static_cast<std::ptrdiff_t>(kx);
                if (ix < 0 || ix >= static_cast<std::ptrdiff_t>(in.w))
                    std::fill(dst + kx * in.c, dst + (kx + 1) * in.c, C(0));
                else
                    copy(src_row + static_cast<std::size_t>(ix) * in.c, dst + kx * in.c, in.c);
            }
        }
    }
}

/// Adds rows [m0, m1) of an im2col-shaped gradient over the live taps t back into dx (NHWC,
/// computation type).
template <Compute C>
void col2im_add(const C* col, const tensor::shape& in, const window& g, const live_taps& t, std::size_t m0,
                std::size_t m1, C* dx) {
    const std::size_t oh = g.out_h(in.h), ow = g.out_w(in.w), k = t.columns(in.c), kw = t.kx1 - t.kx0, span = kw * in.c;
    if (m0 >= m1) return;
    detail::grid_cursor at(m0, oh, ow);  // row m's image and output pixel
    for (std::size_t m = m0; m < m1; ++m, at.next(oh, ow)) {
        const std::size_t n = at.n, oy = at.y, ox = at.x;
        const C* row = col + (m - m0) * k;
        const std::ptrdiff_t ix0 = static_cast<std::ptrdiff_t>(ox * g.stride + t.kx0) - static_cast<std::ptrdiff_t>(g.pad);
        const bool inside_x = ix0 >= 0 && ix0 + static_cast<std::ptrdiff_t>(kw) <= static_cast<std::ptrdiff_t>(in.w);
        for (std::size_t ky = t.ky0; ky < t.ky1; ++ky) {
            const std::ptrdiff_t iy = static_cast<std::ptrdiff_t>(oy * g.stride + ky) - static_cast<std::ptrdiff_t>(g.pad);
            if (iy < 0 || iy >= static_cast<std::ptrdiff_t>(in.h)) continue;
            C* dst_row = dx + (n * in.h + static_cast<std::size_t>(iy)) * in.w * in.c;
            const C* src = row + (ky - t.ky0) * span;
            if (inside_x) {
                simd::add_to(src, dst_row + static_cast<std::size_t>(ix0) * in.c, span);
                continue;
            }
            for (std::size_t kx = 0; kx < kw; ++kx) {
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
                    workspace<C>& ws, gemm_options opt = {}, conv_algorithm algorithm = conv_algorithm::automatic,
                    const tensor::rounding& rounding = {}, const simd::relu_of_affine<C>* map = nullptr) {
    if (const std::size_t m = winograd_tile(algorithm, in, cout, g))
        return detail::with_winograd_tile(
            m, [&](auto tile) { winograd::conv2d_forward<tile()>(x, in, w, cout, g, y, ws, opt, rounding, map); });
    detail::check_no_map(map, "conv2d_forward");
    if (uses_direct<C>(algorithm, in, cout, g)) return direct::conv2d_forward(x, in, w, cout, g, y, ws, opt, rounding);
    const tensor::shape out = g.output(in, cout);
    const std::size_t rows = out.pixels();
    store_compute<C, Y> dst(y, out.size(), ws.c, parallelism{opt.threads, opt.pool}, rounding);
    if (g.is_pointwise()) {
        gemm(trans::no, trans::no, rows, cout, in.c, C(1), x, in.c, w, cout, C(0), dst.target(), cout,
             detail::all_threads(opt, ws));
    } else {
        // Chunks of whole images run in parallel, each thread with its own columns and a one-thread GEMM
        // (one chunk: one GEMM on all the threads); one GEMM per block of live taps, summed in block order.
        const live_taps taps(in, g);
        const std::size_t k = taps.columns(in.c);
        const std::size_t chunk = detail::conv_chunk_rows(k, out.h * out.w, out.n, sizeof(C));
        const std::size_t chunks = (rows + chunk - 1) / chunk, threads = detail::chunk_threads(opt, chunks);
        auto& cols = detail::thread_columns(ws, threads, chunk * k, opt);
        // Every chunk's GEMM packs the weights: 16-bit weights converted once here, not in every packing.
        const C* wc = load_compute<C>(w, g.kh * g.kw * in.c * cout, ws.b, parallelism{opt.threads, opt.pool});
        C* y0 = dst.target();
        detail::for_each_chunk(chunks, threads, opt.pool, [&](std::size_t t, std::size_t c) {
            const std::size_t m0 = c * chunk, m1 = std::min(rows, m0 + chunk);
            const gemm_options o = detail::chunk_gemm(opt, threads, ws, t);
            im2col(x, in, g, taps, m0, m1, cols[t].data());
            for (std::size_t b = 0; b < taps.blocks(); ++b) {
                const auto blk = taps.at(b, in.c);
                gemm(trans::no, trans::no, m1 - m0, cout, blk.rows, C(1), cols[t].data() + blk.column, k,
                     wc + blk.weight_row * cout, cout, b == 0 ? C(0) : C(1), y0 + m0 * cout, cout, o);
            }
            dst.commit(m0 * cout, m1 * cout, {o.threads, o.pool});  // the chunk's rows, while they are in cache
        });
        return;
    }
    dst.commit();
}

/// dx = conv_backward_data(dy, w): the gradient with respect to the input (overwrites dx). With an
/// addend (in.size() elements), dx = that gradient + addend, each part of dx getting it as the part
/// is final, while it is in cache, rounded once (store_compute); with a mask (in.size() elements, the
/// input when it is a ReLU's output), kept only where the mask is positive: the gradient through that
/// ReLU (store_compute::mask_by).
template <Compute C, Storage D, Storage W, Storage X>
void conv2d_backward_data(const D* dy, const tensor::shape& in, const W* w, std::size_t cout, const window& g,
                          X* dx, workspace<C>& ws, gemm_options opt = {},
                          conv_algorithm algorithm = conv_algorithm::automatic, const tensor::rounding& rounding = {},
                          const X* addend = nullptr, const X* mask = nullptr,
                          const simd::batch_norm_gradient_map<C, D>* dymap = nullptr) {
    if (const std::size_t m = winograd_tile(algorithm, in, cout, g))
        return detail::with_winograd_tile(m, [&](auto tile) {
            winograd::conv2d_backward_data<tile()>(dy, in, w, cout, g, dx, ws, opt, rounding, addend, mask, dymap);
        });
    detail::check_no_gradient_map(dymap, "conv2d_backward_data");
    const tensor::shape out = g.output(in, cout);
    const std::size_t rows = out.pixels();
    if (g.is_pointwise()) {
        store_compute<C, X> dst(dx, in.size(), ws.c, parallelism{opt.threads, opt.pool}, rounding, addend);
        dst.mask_by(mask);
        gemm(trans::no, trans::yes, rows, in.c, cout, C(1), dy, cout, w, cout, C(0), dst.target(), in.c,
             detail::all_threads(opt, ws));
        dst.commit();
        return;
    }
    // Where dx is stored in another type, each chunk's images go through a C buffer of the thread's
    // own (staging::parts), in cache from the zeroing to the commit.
    constexpr staging where = std::is_same_v<C, X> ? staging::whole : staging::parts;
    store_compute<C, X> dst(dx, in.size(), ws.c, parallelism{opt.threads, opt.pool}, rounding, addend, where);
    dst.mask_by(mask);
    C* acc = where == staging::whole ? dst.target() : nullptr;
    const live_taps taps(in, g);
    const std::size_t k = taps.columns(in.c), image = in.h * in.w * in.c, per_image = out.h * out.w;
    const std::size_t chunk = detail::conv_chunk_rows(k, per_image, out.n, sizeof(C));
    const std::size_t chunks = (rows + chunk - 1) / chunk, threads = detail::chunk_threads(opt, chunks);
    auto& cols = detail::thread_columns(ws, threads, chunk * k, opt);
    if constexpr (where == staging::parts) detail::thread_buffers(ws.parts, threads, chunk / per_image * image);
    const C* wc = load_compute<C>(w, g.kh * g.kw * in.c * cout, ws.b, parallelism{opt.threads, opt.pool});  // as the forward
    detail::for_each_chunk(chunks, threads, opt.pool, [&](std::size_t t, std::size_t c) {
        const std::size_t m0 = c * chunk, m1 = std::min(rows, m0 + chunk);
        const std::size_t e0 = m0 / per_image * image, e1 = m1 / per_image * image;
        const gemm_options o = detail::chunk_gemm(opt, threads, ws, t);
        // The chunk's images of dx (from element e0 in acc, or a part of their own), zeroed by the
        // thread that adds into them.
        C* part = where == staging::whole ? acc + e0 : ws.parts[t].data();
        std::fill(part, part + (e1 - e0), C(0));
        for (std::size_t b = 0; b < taps.blocks(); ++b) {
            const auto blk = taps.at(b, in.c);
            gemm(trans::no, trans::yes, m1 - m0, blk.rows, cout, C(1), dy + m0 * cout, cout, wc + blk.weight_row * cout,
                 cout, C(0), cols[t].data() + blk.column, k, o);
        }
        col2im_add(cols[t].data(), in, g, taps, 0, m1 - m0, part);  // the chunk's rows, its images from part's first
        dst.commit_part(part, e0, e1, {o.threads, o.pool});  // the chunk's images of dx are final, in cache
    });
}

/// dw += conv_backward_weight(x, dy): accumulates the weight gradient ([kh][kw][cin][cout], in C).
/// The rows of taps that read only padding get nothing added.
template <Compute C, Storage T, Storage D>
void conv2d_backward_weight(const T* x, const tensor::shape& in, const D* dy, std::size_t cout, const window& g,
                            C* dw, workspace<C>& ws, gemm_options opt = {},
                            conv_algorithm algorithm = conv_algorithm::automatic,
                            const simd::relu_of_affine<C>* map = nullptr,
                            const simd::batch_norm_gradient_map<C, D>* dymap = nullptr) {
    if (const std::size_t m = winograd_tile(algorithm, in, cout, g))
        return detail::with_winograd_tile(
            m, [&](auto tile) { winograd::conv2d_backward_weight<tile()>(x, in, dy, cout, g, dw, ws, opt, map, dymap); });
    detail::check_no_map(map, "conv2d_backward_weight");
    detail::check_no_gradient_map(dymap, "conv2d_backward_weight");
    if (uses_direct<C>(algorithm, in, cout, g)) return direct::conv2d_backward_weight(x, in, dy, cout, g, dw, ws, opt);
    const tensor::shape out = g.output(in, cout);
    const std::size_t rows = out.pixels(), size = g.kh * g.kw * in.c * cout;
    if (g.is_pointwise()) {
        gemm(trans::yes, trans::no, in.c, cout, rows, C(1), x, in.c, dy, cout, C(1), dw, cout, detail::all_threads(opt, ws));
        return;
    }
    const live_taps taps(in, g);
    const std::size_t k = taps.columns(in.c);
    const std::size_t chunk = detail::conv_chunk_rows(k, out.h * out.w, out.n, sizeof(C));
    const std::size_t chunks = (rows + chunk - 1) / chunk;
    const detail::lane_plan plan = detail::plan_lanes(chunks, size, sizeof(C), opt);
    auto& cols = detail::thread_columns(ws, plan.threads, chunk * k, opt);
    const bool all_live = k == g.kh * g.kw * in.c;
    detail::sum_in_lanes(plan, chunks, dw, false, size, ws, opt,
                         [&](std::size_t t, std::size_t c, C* target, C beta, const gemm_options& o) {
                             const std::size_t m0 = c * chunk, m1 = std::min(rows, m0 + chunk);
                             // A lane's partial sum starts here: its rows of dead taps must add nothing.
                             if (beta == C(0) && !all_live) std::fill(target, target + size, C(0));
                             im2col(x, in, g, taps, m0, m1, cols[t].data());
                             for (std::size_t b = 0; b < taps.blocks(); ++b) {
                                 const auto blk = taps.at(b, in.c);
                                 gemm(trans::yes, trans::no, blk.rows, cout, m1 - m0, C(1), cols[t].data() + blk.column, k,
                                      dy + m0 * cout, cout, beta, target + blk.weight_row * cout, cout, o);
                             }
                         });
}

/// dw += conv_backward_weight(x, dy) and, when dx is not null, dx = conv_backward_data(dy, w) (plus
/// addend and kept where mask is positive, as conv2d_backward_data adds and masks): both gradients
/// of a layer in one call (Winograd transforms each output gradient once for both). With dymap (a
/// Winograd layer), dy is a batch norm's output gradient and the layer's own the batch norm's input
/// gradient read through the map (kernels::batch_norm_backward_map).
template <Compute C, Storage T, Storage D, Storage W, Storage X>
void conv2d_backward(const T* x, const tensor::shape& in, const D* dy, const W* w, std::size_t cout, const window& g,
                     C* dw, X* dx, workspace<C>& ws, gemm_options opt = {},
                     conv_algorithm algorithm = conv_algorithm::automatic, const tensor::rounding& rounding = {},
                     const simd::relu_of_affine<C>* map = nullptr, const X* addend = nullptr, const X* mask = nullptr,
                     const simd::batch_norm_gradient_map<C, D>* dymap = nullptr) {
    if (const std::size_t m = winograd_tile(algorithm, in, cout, g))
        return detail::with_winograd_tile(m, [&](auto tile) {
            winograd::conv2d_backward<tile()>(x, in, dy, w, cout, g, dw, dx, ws, opt, rounding, map, addend, mask, dymap);
        });
    detail::check_no_map(map, "conv2d_backward");
    detail::check_no_gradient_map(dymap, "conv2d_backward");
    // The weight gradient as conv2d_backward_weight computes it (directly where that fits), the input
    // gradient by im2col + GEMM: the same bits as the two calls, whichever halves a caller asks for.
    conv2d_backward_weight(x, in, dy, cout, g, dw, ws, opt, algorithm);
    if (dx != nullptr) conv2d_backward_data(dy, in, w, cout, g, dx, ws, opt, conv_algorithm::im2col, rounding, addend, mask);
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
