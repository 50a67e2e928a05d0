#pragma once
// 2-D convolution on NHWC tensors, forward and both gradients, as im2col + GEMM over row chunks.
#include <algorithm>
#include <cstddef>
#include <string>

#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/storage.hpp"
#include "tessera/tensor/dense.hpp"

namespace tessera::kernels {

/// Kernel size, stride and zero padding of a convolution or pooling window.
struct window {
    std::size_t kh = 1, kw = 1, stride = 1, pad = 0;

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
    void check(std::size_t size, std::size_t k, const char* what) const {
        if (stride == 0 || k == 0 || size + 2 * pad < k)
            throw tensor::shape_error("tessera::kernels::window: input " + std::string(what) + " " +
                                      std::to_string(size) + " with padding " + std::to_string(pad) +
                                      " is smaller than the kernel " + std::to_string(k) + " (stride " +
                                      std::to_string(stride) + ")");
    }
};

namespace detail {

/// Rows of the im2col matrix per chunk: keeps a chunk of columns (rows × k) near 1 MiB so it stays in L2.
[[nodiscard]] inline std::size_t conv_chunk_rows(std::size_t k, std::size_t rows, std::size_t elem) {
    const std::size_t target = (std::size_t{1} << 20) / (elem * std::max<std::size_t>(k, 1));
    return std::clamp<std::size_t>(target / 64 * 64, 64, std::max<std::size_t>(rows, 1));
}

}  // namespace detail

/// Rows [m0, m1) of the im2col matrix of x (NHWC): row m = (n, oy, ox), column (ky, kx, ci), so
/// col has k = kh·kw·c columns. Padding contributes zeros.
template <Compute C, Storage T>
void im2col(const T* x, const tensor::shape& in, const window& g, std::size_t m0, std::size_t m1, C* col) {
    const std::size_t oh = g.out_h(in.h), ow = g.out_w(in.w), k = g.kh * g.kw * in.c;
    for (std::size_t m = m0; m < m1; ++m) {
        const std::size_t n = m / (oh * ow), oy = (m / ow) % oh, ox = m % ow;
        C* row = col + (m - m0) * k;
        for (std::size_t ky = 0; ky < g.kh; ++ky) {
            const std::ptrdiff_t iy = static_cast<std::ptrdiff_t>(oy * g.stride + ky) - static_cast<std::ptrdiff_t>(g.pad);
            for (std::size_t kx = 0; kx < g.kw; ++kx) {
                const std::ptrdiff_t ix = static_cast<std::ptrdiff_t>(ox * g.stride + kx) - static_cast<std::ptrdiff_t>(g.pad);
                C* dst = row + (ky * g.kw + kx) * in.c;
                if (iy < 0 || ix < 0 || iy >= static_cast<std::ptrdiff_t>(in.h) || ix >= static_cast<std::ptrdiff_t>(in.w))
                    std::fill(dst, dst + in.c, C(0));
                else
                    convert_n(x + ((n * in.h + static_cast<std::size_t>(iy)) * in.w + static_cast<std::size_t>(ix)) * in.c,
                              dst, in.c);
            }
        }
    }
}

/// Adds rows [m0, m1) of an im2col-shaped gradient back into dx (NHWC, computation type).
template <Compute C>
void col2im_add(const C* col, const tensor::shape& in, const window& g, std::size_t m0, std::size_t m1, C* dx) {
    const std::size_t oh = g.out_h(in.h), ow = g.out_w(in.w), k = g.kh * g.kw * in.c;
    for (std::size_t m = m0; m < m1; ++m) {
        const std::size_t n = m / (oh * ow), oy = (m / ow) % oh, ox = m % ow;
        const C* row = col + (m - m0) * k;
        for (std::size_t ky = 0; ky < g.kh; ++ky) {
            const std::ptrdiff_t iy = static_cast<std::ptrdiff_t>(oy * g.stride + ky) - static_cast<std::ptrdiff_t>(g.pad);
            if (iy < 0 || iy >= static_cast<std::ptrdiff_t>(in.h)) continue;
            for (std::size_t kx = 0; kx < g.kw; ++kx) {
                const std::ptrdiff_t ix = static_cast<std::ptrdiff_t>(ox * g.stride + kx) - static_cast<std::ptrdiff_t>(g.pad);
                if (ix < 0 || ix >= static_cast<std::ptrdiff_t>(in.w)) continue;
                const C* src = row + (ky * g.kw + kx) * in.c;
                C* dst = dx + ((n * in.h + static_cast<std::size_t>(iy)) * in.w + static_cast<std::size_t>(ix)) * in.c;
                for (std::size_t c = 0; c < in.c; ++c) dst[c] += src[c];
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
    store_compute<C, Y> dst(y, out.size(), ws.c);
    if (g.is_pointwise()) {
        gemm(trans::no, trans::no, rows, cout, k, C(1), x, k, w, cout, C(0), dst.target(), cout, opt);
    } else {
        const std::size_t chunk = detail::conv_chunk_rows(k, rows, sizeof(C));
        if (ws.col.size() < chunk * k) ws.col.resize(chunk * k);
        for (std::size_t m0 = 0; m0 < rows; m0 += chunk) {
            const std::size_t m1 = std::min(rows, m0 + chunk);
            im2col(x, in, g, m0, m1, ws.col.data());
            gemm(trans::no, trans::no, m1 - m0, cout, k, C(1), ws.col.data(), k, w, cout, C(0),
                 dst.target() + m0 * cout, cout, opt);
        }
    }
    dst.commit();
}

/// dx = conv_backward_data(dy, w): the gradient with respect to the input (overwrites dx).
template <Compute C, Storage D, Storage W, Storage X>
void conv2d_backward_data(const D* dy, const tensor::shape& in, const W* w, std::size_t cout, const window& g,
                          X* dx, workspace<C>& ws, gemm_options opt = {}) {
    const tensor::shape out = g.output(in, cout);
    const std::size_t rows = out.pixels(), k = g.kh * g.kw * in.c;
    store_compute<C, X> dst(dx, in.size(), ws.c);
    if (g.is_pointwise()) {
        gemm(trans::no, trans::yes, rows, k, cout, C(1), dy, cout, w, cout, C(0), dst.target(), k, opt);
    } else {
        C* acc = dst.target();
        std::fill(acc, acc + in.size(), C(0));
        const std::size_t chunk = detail::conv_chunk_rows(k, rows, sizeof(C));
        if (ws.col.size() < chunk * k) ws.col.resize(chunk * k);
        for (std::size_t m0 = 0; m0 < rows; m0 += chunk) {
            const std::size_t m1 = std::min(rows, m0 + chunk);
            gemm(trans::no, trans::yes, m1 - m0, k, cout, C(1), dy + m0 * cout, cout, w, cout, C(0), ws.col.data(), k,
                 opt);
            col2im_add(ws.col.data(), in, g, m0, m1, acc);
        }
    }
    dst.commit();
}

/// dw += conv_backward_weight(x, dy): accumulates the weight gradient ([kh][kw][cin][cout], in C).
template <Compute C, Storage T, Storage D>
void conv2d_backward_weight(const T* x, const tensor::shape& in, const D* dy, std::size_t cout, const window& g,
                            C* dw, workspace<C>& ws, gemm_options opt = {}) {
    const tensor::shape out = g.output(in, cout);
    const std::size_t rows = out.pixels(), k = g.kh * g.kw * in.c;
    if (g.is_pointwise()) {
        gemm(trans::yes, trans::no, k, cout, rows, C(1), x, k, dy, cout, C(1), dw, cout, opt);
        return;
    }
    const std::size_t chunk = detail::conv_chunk_rows(k, rows, sizeof(C));
    if (ws.col.size() < chunk * k) ws.col.resize(chunk * k);
    for (std::size_t m0 = 0; m0 < rows; m0 += chunk) {
        const std::size_t m1 = std::min(rows, m0 + chunk);
        im2col(x, in, g, m0, m1, ws.col.data());
        gemm(trans::yes, trans::no, k, cout, m1 - m0, C(1), ws.col.data(), k, dy + m0 * cout, cout, C(1), dw, cout,
             opt);
    }
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
