#pragma once
// Layer normalisation over the last axis of each row (a token's features), forward and backward.
#include <cmath>
#include <cstddef>

#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/storage.hpp"

namespace tessera::kernels {

/// Rows per task of the layer norm's passes: each row is independent, so any split gives the same bits.
inline constexpr std::size_t layer_norm_rows_grain = 64;

/// y = (x − mean) · rstd · gamma + beta per row of `width` values, mean and the biased variance over
/// the row (PyTorch's nn.LayerNorm), rstd = 1 / √(var + eps). Saves each row's mean and rstd (C) for
/// the backward. Rows split between threads; a row's sums run in one fixed order.
template <Compute C, Storage T, Storage W, Storage Y>
void layer_norm_forward(const T* x, std::size_t rows, std::size_t width, const W* gamma, const W* beta, C eps, Y* y,
                        C* mean, C* rstd, workspace<C>& ws, parallelism par = {}, const tensor::rounding& rounding = {}) {
    const C* xc = load_compute<C>(x, rows * width, ws.a, par);
    store_compute<C, Y> dst(y, rows * width, ws.c, par, rounding);
    C* out = dst.target();
    const C inv_width = C(1) / static_cast<C>(width);
    detail::parallel_ranges(par, rows, layer_norm_rows_grain, [&](std::size_t b, std::size_t e, std::size_t) {
        for (std::size_t r = b; r < e; ++r) {
            const C* xr = xc + r * width;
            C sum = 0;
            for (std::size_t i = 0; i < width; ++i) sum += xr[i];
            const C mu = sum * inv_width;
            C squares = 0;
            for (std::size_t i = 0; i < width; ++i) squares = std::fma(xr[i] - mu, xr[i] - mu, squares);
            const C inv = C(1) / std::sqrt(std::fma(squares, inv_width, eps));
            mean[r] = mu, rstd[r] = inv;
            C* yr = out + r * width;
            for (std::size_t i = 0; i < width; ++i)
                yr[i] = std::fma((xr[i] - mu) * inv, detail::load_as<C>(gamma[i]), detail::load_as<C>(beta[i]));
        }
    });
    dst.commit();
}

/// With g = dy · gamma and x̂ = (x − mean) · rstd: dx = rstd · (g − mean(g) − x̂ · mean(g · x̂)) per row
/// (overwritten; skipped when dx is null), dgamma += Σ dy · x̂ and dbeta += Σ dy over the rows, each
/// column summed in row order (columns split between threads: the same bits on any thread count).
template <Compute C, Storage T, Storage D, Storage W, Storage X>
void layer_norm_backward(const T* x, const D* dy, std::size_t rows, std::size_t width, const W* gamma, const C* mean,
                         const C* rstd, X* dx, C* dgamma, C* dbeta, workspace<C>& ws, parallelism par = {},
                         const tensor::rounding& rounding = {}) {
    const std::size_t n = rows * width;
    const C* xc = load_compute<C>(x, n, ws.a, par);
    const C* dyc = load_compute<C>(dy, n, ws.b, par);
    detail::parallel_ranges(par, width, 8, [&](std::size_t b, std::size_t e, std::size_t) {
        for (std::size_t r = 0; r < rows; ++r) {
            const C* xr = xc + r * width;
            const C* gr = dyc + r * width;
            for (std::size_t i = b; i < e; ++i) {
                dgamma[i] = std::fma(gr[i], (xr[i] - mean[r]) * rstd[r], dgamma[i]);
                dbeta[i] += gr[i];
            }
        }
    });
    if (dx == nullptr) return;
    store_compute<C, X> dst(dx, n, ws.c, par, rounding);
    C* out = dst.target();
    const C inv_width = C(1) / static_cast<C>(width);
    detail::parallel_ranges(par, rows, layer_norm_rows_grain, [&](std::size_t b, std::size_t e, std::size_t) {
        for (std::size_t r = b; r < e; ++r) {
            const C* xr = xc + r * width;
            const C* gr = dyc + r * width;
            C sum_g = 0, sum_gx = 0;
            for (std::size_t i = 0; i < width; ++i) {
                const C gi = detail::load_as<C>(gamma[i]);
                sum_g = std::fma(gr[i], gi, sum_g);
                sum_gx = std::fma(gr[i] * gi, (xr[i] - mean[r]) * rstd[r], sum_gx);
            }
            const C mg = sum_g * inv_width, mgx = sum_gx * inv_width;
            C* dr = out + r * width;
            for (std::size_t i = 0; i < width; ++i) {  // every product that feeds a sum fused by hand
                const C g = gr[i] * detail::load_as<C>(gamma[i]);
                const C xhat = (xr[i] - mean[r]) * rstd[r];
                dr[i] = rstd[r] * std::fma(-xhat, mgx, g - mg);
            }
        }
    });
    dst.commit();
}

}  // namespace tessera::kernels
