#pragma once
// Layer normalisation over the last axis of each row (a token's features), forward and backward.
#include <cmath>
#include <cstddef>

#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/row_reductions.hpp"
#include "tessera/kernels/simd.hpp"
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
        using V = simd::batch<C>;
        constexpr std::size_t w = V::size;
        for (std::size_t r = b; r < e; ++r) {
            const C* xr = xc + r * width;
            const C mu = simd::sum<C>(xr, width) * inv_width;
            const V mus(mu);
            V lanes(C(0));  // the tail padded with mu: its squares are 0
            simd::over_batches<C>(xr, width, mu, [&](const V& v, std::size_t) { lanes = simd::fused_multiply_add<C>(v - mus, v - mus, lanes); });
            const C inv = C(1) / std::sqrt(std::fma(simd::add_lanes(lanes), inv_width, eps));
            mean[r] = mu, rstd[r] = inv;
            C* yr = out + r * width;
            const V invs(inv);
            std::size_t i = 0;
            for (; i + w <= width; i += w)
                simd::fused_multiply_add<C>((V::load_unaligned(xr + i) - mus) * invs, simd::load_widened<C>(gamma + i),
                                            simd::load_widened<C>(beta + i))
                    .store_unaligned(yr + i);
            for (; i < width; ++i)
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
            using V = simd::batch<C>;
            constexpr std::size_t w = V::size;
            const C mu = mean[r], rs = rstd[r];
            const V mus(mu), rss(rs);
            V lanes_g(C(0)), lanes_gx(C(0));  // the sums in lanes; the tail's g padded with 0
            std::size_t i = 0;
            for (; i < width; i += w) {
                const bool whole = i + w <= width;
                const V g = whole ? V::load_unaligned(gr + i) : simd::load_tail<C>(gr + i, width - i, C(0));
                const V gi = whole ? simd::load_widened<C>(gamma + i) : simd::load_tail<C>(gamma + i, width - i, C(0));
                const V xv = whole ? V::load_unaligned(xr + i) : simd::load_tail<C>(xr + i, width - i, mu);
                lanes_g = simd::fused_multiply_add<C>(g, gi, lanes_g);
                lanes_gx = simd::fused_multiply_add<C>(g * gi, (xv - mus) * rss, lanes_gx);
            }
            const C mg = simd::add_lanes(lanes_g) * inv_width, mgx = simd::add_lanes(lanes_gx) * inv_width;
            const V mgs(mg), mgxs(mgx);
            C* dr = out + r * width;
            for (i = 0; i + w <= width; i += w) {  // every product that feeds a sum fused by hand
                const V g = V::load_unaligned(gr + i) * simd::load_widened<C>(gamma + i);
                const V xhat = (V::load_unaligned(xr + i) - mus) * rss;
                (rss * simd::fused_multiply_add<C>(-xhat, mgxs, g - mgs)).store_unaligned(dr + i);
            }
            for (; i < width; ++i) {
                const C g = gr[i] * detail::load_as<C>(gamma[i]);
                const C xhat = (xr[i] - mu) * rs;
                dr[i] = rs * std::fma(-xhat, mgx, g - mg);
            }
        }
    });
    dst.commit();
}

}  // namespace tessera::kernels
