#pragma once
// GELU forward and backward, elementwise, in its two forms: tanh (GPT-2) and erf (BERT).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/row_reductions.hpp"
#include "tessera/kernels/simd.hpp"
#include "tessera/kernels/storage.hpp"

namespace tessera::kernels {

/// Which GELU: x·Φ(x) exactly (`erf`, BERT's and PyTorch's default) or Hendrycks and Gimpel's tanh
/// approximation 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (`tanh`, GPT-2's "gelu_new").
enum class gelu_form : std::uint8_t { erf, tanh };

namespace detail {

/// gelu(x) of a batch, in its form; every product that feeds a sum fused by hand.
template <class V>
[[nodiscard]] inline V gelu_value(const V& x, gelu_form form) noexcept {
    using C = typename V::value_type;
    const V half_x = V(C(0.5)) * x;
    if (form == gelu_form::erf) return half_x * (V(C(1)) + xsimd::erf(x * V(C(0.70710678118654752440))));
    const V u = V(C(0.79788456080286535588)) * kernels::simd::fused_multiply_add<C>(V(C(0.044715)) * x * x, x, x);
    return half_x * (V(C(1)) + xsimd::tanh(u));
}

/// gelu'(x) of a batch.
template <class V>
[[nodiscard]] inline V gelu_slope(const V& x, gelu_form form) noexcept {
    using C = typename V::value_type;
    const V one(C(1)), half(C(0.5));
    if (form == gelu_form::erf) {
        const V cdf = half * (one + xsimd::erf(x * V(C(0.70710678118654752440))));
        return kernels::simd::fused_multiply_add<C>(x, V(C(0.39894228040143267794)) * xsimd::exp(V(C(-0.5)) * x * x), cdf);
    }
    const V k0(C(0.79788456080286535588)), k1(C(0.044715));
    const V t = xsimd::tanh(k0 * kernels::simd::fused_multiply_add<C>(k1 * x * x, x, x));
    const V du = k0 * kernels::simd::fused_multiply_add<C>(V(C(3)) * k1 * x, x, one);
    return kernels::simd::fused_multiply_add<C>(half * x * kernels::simd::fused_multiply_add<C>(-t, t, one), du, half * (one + t));
}

}  // namespace detail

/// y = gelu(x), n elements, in batches of lanes (xsimd's erf and tanh; simd::map_batches): each
/// element on its own, the same bits on any thread count.
template <Compute C, Storage T, Storage Y>
void gelu_forward(const T* x, std::size_t n, Y* y, gelu_form form, workspace<C>& ws, parallelism par = {},
                  const tensor::rounding& rounding = {}) {
    const C* xc = load_compute<C>(x, n, ws.a, par);
    store_compute<C, Y> dst(y, n, ws.c, par, rounding);
    C* out = dst.target();
    detail::parallel_ranges(par, n, detail::elementwise_grain(par), [&](std::size_t b, std::size_t e, std::size_t) {
        simd::map_batches<C>(xc + b, out + b, e - b, [form](const simd::batch<C>& v) { return detail::gelu_value(v, form); });
    });
    dst.commit();
}

/// dx = dy · gelu'(x) from the forward's input x.
template <Compute C, Storage T, Storage D, Storage X>
void gelu_backward(const T* x, const D* dy, std::size_t n, X* dx, gelu_form form, workspace<C>& ws,
                   parallelism par = {}, const tensor::rounding& rounding = {}) {
    const C* xc = load_compute<C>(x, n, ws.a, par);
    const C* dyc = load_compute<C>(dy, n, ws.b, par);
    store_compute<C, X> dst(dx, n, ws.c, par, rounding);
    C* out = dst.target();
    detail::parallel_ranges(par, n, detail::elementwise_grain(par), [&](std::size_t b, std::size_t e, std::size_t) {
        // slope and product in one pass, every element in a whole batch (the tail's padded)
        simd::over_batches<C>(xc + b, e - b, C(0), [&](const simd::batch<C>& v, std::size_t i) {
            const std::size_t count = std::min(simd::batch<C>::size, e - b - i);
            if (count == simd::batch<C>::size) {
                (detail::gelu_slope(v, form) * simd::batch<C>::load_unaligned(dyc + b + i)).store_unaligned(out + b + i);
                return;
            }
            alignas(64) C lanes[simd::batch<C>::size];
            (detail::gelu_slope(v, form) * simd::load_tail<C>(dyc + b + i, count, C(0))).store_aligned(lanes);
            std::copy(lanes, lanes + count, out + b + i);
        });
    });
    dst.commit();
}

}  // namespace tessera::kernels
