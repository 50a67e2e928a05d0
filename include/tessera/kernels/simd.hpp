#pragma once
// Elementwise loops written with xsimd: at -O2, GCC 12 vectorises a loop only when no scalar tail is
// needed (its "very cheap" cost model), so loops over a run-time count of channels stay scalar unless
// written out like this.
#include <cstddef>

#include <xsimd/xsimd.hpp>

namespace tessera::kernels::simd {

template <class C>
using batch = xsimd::batch<C>;

/// y[i] = x[i] (n elements; may not overlap).
template <class C>
inline void copy(const C* __restrict x, C* __restrict y, std::size_t n) noexcept {
    constexpr std::size_t w = batch<C>::size;
    std::size_t i = 0;
    for (; i + w <= n; i += w) batch<C>::load_unaligned(x + i).store_unaligned(y + i);
    for (; i < n; ++i) y[i] = x[i];
}

/// y[i] += x[i].
template <class C>
inline void add_to(const C* x, C* y, std::size_t n) noexcept {
    constexpr std::size_t w = batch<C>::size;
    std::size_t i = 0;
    for (; i + w <= n; i += w) (batch<C>::load_unaligned(y + i) + batch<C>::load_unaligned(x + i)).store_unaligned(y + i);
    for (; i < n; ++i) y[i] += x[i];
}

/// out[i] = a[i] + b[i] (out may be a or b).
template <class C>
inline void add(const C* a, const C* b, C* out, std::size_t n) noexcept {
    constexpr std::size_t w = batch<C>::size;
    std::size_t i = 0;
    for (; i + w <= n; i += w) (batch<C>::load_unaligned(a + i) + batch<C>::load_unaligned(b + i)).store_unaligned(out + i);
    for (; i < n; ++i) out[i] = a[i] + b[i];
}

/// y[i] = max(x[i], 0) (y may be x).
template <class C>
inline void relu(const C* x, C* y, std::size_t n) noexcept {
    constexpr std::size_t w = batch<C>::size;
    const batch<C> zero(C(0));
    std::size_t i = 0;
    for (; i + w <= n; i += w) {
        const auto v = batch<C>::load_unaligned(x + i);
        xsimd::select(v > zero, v, zero).store_unaligned(y + i);  // not xsimd::max: GCC 12 warns on its mask intrinsic
    }
    for (; i < n; ++i) y[i] = x[i] > C(0) ? x[i] : C(0);
}

/// dx[i] = y[i] > 0 ? dy[i] : 0.
template <class C>
inline void relu_backward(const C* y, const C* dy, C* dx, std::size_t n) noexcept {
    constexpr std::size_t w = batch<C>::size;
    const batch<C> zero(C(0));
    std::size_t i = 0;
    for (; i + w <= n; i += w)
        xsimd::select(batch<C>::load_unaligned(y + i) > zero, batch<C>::load_unaligned(dy + i), zero).store_unaligned(dx + i);
    for (; i < n; ++i) dx[i] = y[i] > C(0) ? dy[i] : C(0);
}

/// Per-row affine map over rows × channels: out[r, c] = x[r, c] · scale[c] + shift[c].
template <class C>
inline void scale_shift_rows(const C* x, std::size_t rows, std::size_t channels, const C* scale, const C* shift,
                             C* out) noexcept {
    constexpr std::size_t w = batch<C>::size;
    for (std::size_t r = 0; r < rows; ++r) {
        const C* xr = x + r * channels;
        C* o = out + r * channels;
        std::size_t c = 0;
        for (; c + w <= channels; c += w)
            xsimd::fma(batch<C>::load_unaligned(xr + c), batch<C>::load_unaligned(scale + c), batch<C>::load_unaligned(shift + c))
                .store_unaligned(o + c);
        for (; c < channels; ++c) o[c] = xr[c] * scale[c] + shift[c];
    }
}

/// sum[c] += Σ_r x[r, c].
template <class C>
inline void column_sums(const C* x, std::size_t rows, std::size_t channels, C* sum) noexcept {
    constexpr std::size_t w = batch<C>::size;
    for (std::size_t r = 0; r < rows; ++r) add_to(x + r * channels, sum, channels);
    (void)w;
}

/// var[c] += Σ_r (x[r, c] − mean[c])².
template <class C>
inline void column_square_deviations(const C* x, std::size_t rows, std::size_t channels, const C* mean, C* var) noexcept {
    constexpr std::size_t w = batch<C>::size;
    for (std::size_t r = 0; r < rows; ++r) {
        const C* xr = x + r * channels;
        std::size_t c = 0;
        for (; c + w <= channels; c += w) {
            const auto d = batch<C>::load_unaligned(xr + c) - batch<C>::load_unaligned(mean + c);
            xsimd::fma(d, d, batch<C>::load_unaligned(var + c)).store_unaligned(var + c);
        }
        for (; c < channels; ++c) {
            const C d = xr[c] - mean[c];
            var[c] += d * d;
        }
    }
}

/// sum_dy[c] += Σ dy[r, c];  sum_dy_xc[c] += Σ dy[r, c]·(x[r, c] − mean[c]).
template <class C>
inline void column_grad_sums(const C* x, const C* dy, std::size_t rows, std::size_t channels, const C* mean, C* sum_dy,
                             C* sum_dy_xc) noexcept {
    constexpr std::size_t w = batch<C>::size;
    for (std::size_t r = 0; r < rows; ++r) {
        const C* xr = x + r * channels;
        const C* gr = dy + r * channels;
        std::size_t c = 0;
        for (; c + w <= channels; c += w) {
            const auto g = batch<C>::load_unaligned(gr + c);
            (batch<C>::load_unaligned(sum_dy + c) + g).store_unaligned(sum_dy + c);
            xsimd::fma(g, batch<C>::load_unaligned(xr + c) - batch<C>::load_unaligned(mean + c),
                       batch<C>::load_unaligned(sum_dy_xc + c))
                .store_unaligned(sum_dy_xc + c);
        }
        for (; c < channels; ++c) {
            sum_dy[c] += gr[c];
            sum_dy_xc[c] += gr[c] * (xr[c] - mean[c]);
        }
    }
}

/// out[r, c] = k1[c]·(dy[r, c] − mdy[c] − (x[r, c] − mean[c])·k2[c]).
template <class C>
inline void batch_norm_dx_rows(const C* x, const C* dy, std::size_t rows, std::size_t channels, const C* mean,
                               const C* k1, const C* k2, const C* mdy, C* out) noexcept {
    constexpr std::size_t w = batch<C>::size;
    for (std::size_t r = 0; r < rows; ++r) {
        const C* xr = x + r * channels;
        const C* gr = dy + r * channels;
        C* o = out + r * channels;
        std::size_t c = 0;
        for (; c + w <= channels; c += w) {
            const auto xm = batch<C>::load_unaligned(xr + c) - batch<C>::load_unaligned(mean + c);
            const auto t = batch<C>::load_unaligned(gr + c) - batch<C>::load_unaligned(mdy + c) -
                           xm * batch<C>::load_unaligned(k2 + c);
            (batch<C>::load_unaligned(k1 + c) * t).store_unaligned(o + c);
        }
        for (; c < channels; ++c) o[c] = k1[c] * (gr[c] - mdy[c] - (xr[c] - mean[c]) * k2[c]);
    }
}

}  // namespace tessera::kernels::simd
