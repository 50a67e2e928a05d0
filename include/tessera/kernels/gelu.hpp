#pragma once
// GELU forward and backward, elementwise, in its two forms: tanh (GPT-2) and erf (BERT).
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/storage.hpp"

namespace tessera::kernels {

/// Which GELU: x·Φ(x) exactly (`erf`, BERT's and PyTorch's default) or Hendrycks and Gimpel's tanh
/// approximation 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (`tanh`, GPT-2's "gelu_new").
enum class gelu_form : std::uint8_t { erf, tanh };

namespace detail {

template <Compute C>
[[nodiscard]] inline C gelu_value(C x, gelu_form form) noexcept {
    if (form == gelu_form::erf) return C(0.5) * x * (C(1) + std::erf(x * C(0.70710678118654752440)));
    const C u = C(0.79788456080286535588) * std::fma(C(0.044715) * x * x, x, x);
    return C(0.5) * x * (C(1) + std::tanh(u));
}

template <Compute C>
[[nodiscard]] inline C gelu_slope(C x, gelu_form form) noexcept {
    if (form == gelu_form::erf) {
        const C cdf = C(0.5) * (C(1) + std::erf(x * C(0.70710678118654752440)));
        return std::fma(x, C(0.39894228040143267794) * std::exp(C(-0.5) * x * x), cdf);
    }
    const C k0 = C(0.79788456080286535588), k1 = C(0.044715);
    const C t = std::tanh(k0 * std::fma(k1 * x * x, x, x));
    const C du = k0 * std::fma(C(3) * k1 * x, x, C(1));
    return std::fma(C(0.5) * x * std::fma(-t, t, C(1)), du, C(0.5) * (C(1) + t));
}

}  // namespace detail

/// y = gelu(x), n elements. Each element on its own: the same bits on any thread count.
template <Compute C, Storage T, Storage Y>
void gelu_forward(const T* x, std::size_t n, Y* y, gelu_form form, workspace<C>& ws, parallelism par = {},
                  const tensor::rounding& rounding = {}) {
    const C* xc = load_compute<C>(x, n, ws.a, par);
    store_compute<C, Y> dst(y, n, ws.c, par, rounding);
    C* out = dst.target();
    detail::parallel_ranges(par, n, detail::elementwise_grain(par), [&](std::size_t b, std::size_t e, std::size_t) {
        for (std::size_t i = b; i < e; ++i) out[i] = detail::gelu_value(xc[i], form);
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
        for (std::size_t i = b; i < e; ++i) out[i] = dyc[i] * detail::gelu_slope(xc[i], form);
    });
    dst.commit();
}

}  // namespace tessera::kernels
