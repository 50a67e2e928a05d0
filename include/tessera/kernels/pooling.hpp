#pragma once
// Max, average and global average pooling on NHWC tensors, forward and backward.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "tessera/kernels/conv.hpp"
#include "tessera/kernels/storage.hpp"

namespace tessera::kernels {

/// Max pooling; argmax receives, per output element, the flat input index it came from (for backward).
/// Padding never wins (it counts as −∞, as in PyTorch).
template <Compute C, Storage T, Storage Y>
void max_pool_forward(const T* x, const tensor::shape& in, const window& g, Y* y, std::vector<std::uint32_t>& argmax,
                      workspace<C>& ws) {
    const tensor::shape out = g.output(in, in.c);
    const C* xc = load_compute<C>(x, in.size(), ws.a);
    argmax.assign(out.size(), 0);
    store_compute<C, Y> dst(y, out.size(), ws.c);
    C* yo = dst.target();
    for (std::size_t n = 0; n < out.n; ++n)
        for (std::size_t oy = 0; oy < out.h; ++oy)
            for (std::size_t ox = 0; ox < out.w; ++ox) {
                const std::size_t o = ((n * out.h + oy) * out.w + ox) * out.c;
                for (std::size_t c = 0; c < out.c; ++c) yo[o + c] = -std::numeric_limits<C>::infinity();
                for (std::size_t ky = 0; ky < g.kh; ++ky)
                    for (std::size_t kx = 0; kx < g.kw; ++kx) {
                        const long iy = static_cast<long>(oy * g.stride + ky) - static_cast<long>(g.pad);
                        const long ix = static_cast<long>(ox * g.stride + kx) - static_cast<long>(g.pad);
                        if (iy < 0 || ix < 0 || iy >= static_cast<long>(in.h) || ix >= static_cast<long>(in.w)) continue;
                        const std::size_t i = ((n * in.h + static_cast<std::size_t>(iy)) * in.w + static_cast<std::size_t>(ix)) * in.c;
                        for (std::size_t c = 0; c < in.c; ++c)
                            if (xc[i + c] > yo[o + c]) {
                                yo[o + c] = xc[i + c];
                                argmax[o + c] = static_cast<std::uint32_t>(i + c);
                            }
                    }
            }
    dst.commit();
}

/// dx = scatter of dy to the positions that won the forward max (overwrites dx).
template <Compute C, Storage D, Storage X>
void max_pool_backward(const D* dy, const tensor::shape& in, const window& g, const std::vector<std::uint32_t>& argmax,
                       X* dx, workspace<C>& ws) {
    const C* dyc = load_compute<C>(dy, argmax.size(), ws.b);
    store_compute<C, X> dst(dx, in.size(), ws.c);
    C* out = dst.target();
    std::fill(out, out + in.size(), C(0));
    for (std::size_t o = 0; o < argmax.size(); ++o) out[argmax[o]] += dyc[o];
    dst.commit();
}

/// Average pooling; padded positions count in the divisor (PyTorch's count_include_pad=True).
template <Compute C, Storage T, Storage Y>
void avg_pool_forward(const T* x, const tensor::shape& in, const window& g, Y* y, workspace<C>& ws,
                      const tensor::rounding& rounding = {}) {
    const tensor::shape out = g.output(in, in.c);
    const C* xc = load_compute<C>(x, in.size(), ws.a);
    store_compute<C, Y> dst(y, out.size(), ws.c, {}, rounding);
    C* yo = dst.target();
    const C scale = C(1) / static_cast<C>(g.kh * g.kw);
    std::fill(yo, yo + out.size(), C(0));
    for (std::size_t n = 0; n < out.n; ++n)
        for (std::size_t oy = 0; oy < out.h; ++oy)
            for (std::size_t ox = 0; ox < out.w; ++ox) {
                C* o = yo + ((n * out.h + oy) * out.w + ox) * out.c;
                for (std::size_t ky = 0; ky < g.kh; ++ky)
                    for (std::size_t kx = 0; kx < g.kw; ++kx) {
                        const long iy = static_cast<long>(oy * g.stride + ky) - static_cast<long>(g.pad);
                        const long ix = static_cast<long>(ox * g.stride + kx) - static_cast<long>(g.pad);
                        if (iy < 0 || ix < 0 || iy >= static_cast<long>(in.h) || ix >= static_cast<long>(in.w)) continue;
                        const C* i = xc + ((n * in.h + static_cast<std::size_t>(iy)) * in.w + static_cast<std::size_t>(ix)) * in.c;
                        for (std::size_t c = 0; c < in.c; ++c) o[c] += i[c] * scale;
                    }
            }
    dst.commit();
}

template <Compute C, Storage D, Storage X>
void avg_pool_backward(const D* dy, const tensor::shape& in, const window& g, X* dx, workspace<C>& ws,
                       const tensor::rounding& rounding = {}) {
    const tensor::shape out = g.output(in, in.c);
    const C* dyc = load_compute<C>(dy, out.size(), ws.b);
    store_compute<C, X> dst(dx, in.size(), ws.c, {}, rounding);
    C* dxo = dst.target();
    const C scale = C(1) / static_cast<C>(g.kh * g.kw);
    std::fill(dxo, dxo + in.size(), C(0));
    for (std::size_t n = 0; n < out.n; ++n)
        for (std::size_t oy = 0; oy < out.h; ++oy)
            for (std::size_t ox = 0; ox < out.w; ++ox) {
                const C* o = dyc + ((n * out.h + oy) * out.w + ox) * out.c;
                for (std::size_t ky = 0; ky < g.kh; ++ky)
                    for (std::size_t kx = 0; kx < g.kw; ++kx) {
                        const long iy = static_cast<long>(oy * g.stride + ky) - static_cast<long>(g.pad);
                        const long ix = static_cast<long>(ox * g.stride + kx) - static_cast<long>(g.pad);
                        if (iy < 0 || ix < 0 || iy >= static_cast<long>(in.h) || ix >= static_cast<long>(in.w)) continue;
                        C* i = dxo + ((n * in.h + static_cast<std::size_t>(iy)) * in.w + static_cast<std::size_t>(ix)) * in.c;
                        for (std::size_t c = 0; c < in.c; ++c) i[c] += o[c] * scale;
                    }
            }
    dst.commit();
}

/// Global average pooling: (n, h, w, c) -> (n, 1, 1, c).
template <Compute C, Storage T, Storage Y>
void global_avg_pool_forward(const T* x, const tensor::shape& in, Y* y, workspace<C>& ws,
                             const tensor::rounding& rounding = {}) {
    const C* xc = load_compute<C>(x, in.size(), ws.a);
    store_compute<C, Y> dst(y, in.n * in.c, ws.c, {}, rounding);
    C* out = dst.target();
    const std::size_t hw = in.h * in.w;
    const C scale = C(1) / static_cast<C>(hw);
    for (std::size_t n = 0; n < in.n; ++n) {
        C* o = out + n * in.c;
        std::fill(o, o + in.c, C(0));
        for (std::size_t p = 0; p < hw; ++p)
            for (std::size_t c = 0; c < in.c; ++c) o[c] += xc[(n * hw + p) * in.c + c];
        for (std::size_t c = 0; c < in.c; ++c) o[c] *= scale;
    }
    dst.commit();
}

template <Compute C, Storage D, Storage X>
void global_avg_pool_backward(const D* dy, const tensor::shape& in, X* dx, workspace<C>& ws,
                              const tensor::rounding& rounding = {}) {
    const C* dyc = load_compute<C>(dy, in.n * in.c, ws.b);
    store_compute<C, X> dst(dx, in.size(), ws.c, {}, rounding);
    C* out = dst.target();
    const std::size_t hw = in.h * in.w;
    const C scale = C(1) / static_cast<C>(hw);
    for (std::size_t n = 0; n < in.n; ++n)
        for (std::size_t p = 0; p < hw; ++p)
            for (std::size_t c = 0; c < in.c; ++c) out[(n * hw + p) * in.c + c] = dyc[n * in.c + c] * scale;
    dst.commit();
}

}  // namespace tessera::kernels
