#pragma once
// A batch norm's passes over rows × channels: its column sums (the statistics and the backward's two
// gradient sums) in a fixed row order, its input gradient, and the map through which the next kernel
// reads that gradient instead of a stored one (batch_norm_gradient_map).
#include <cmath>
#include <cstddef>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "tessera/kernels/affine_map.hpp"
#include "tessera/kernels/simd.hpp"

namespace tessera::kernels::simd {

/// Runs f.template operator()<NV>(c0) over the whole SIMD vectors of `channels`, in groups of NV <= 4
/// vectors from channel c0, then tail(c) for each channel past the last whole vector. The column
/// sums below keep a group's sums in registers over all the rows: summed in memory, each row's add
/// waited for the previous row's store (a 16-channel batch norm adds one vector a row).
template <class C, class F, class Tail>
inline void over_column_groups(std::size_t channels, F&& f, Tail&& tail) {
    constexpr std::size_t w = batch<C>::size, most = 4;
    std::size_t c = 0;
    for (; c + most * w <= channels; c += most * w) f.template operator()<most>(c);
    switch ((channels - c) / w) {
        case 3: f.template operator()<3>(c); break;
        case 2: f.template operator()<2>(c); break;
        case 1: f.template operator()<1>(c); break;
        default: break;
    }
    for (c = channels / w * w; c < channels; ++c) tail(c);
}

/// sum[c] += Σ_r x[r, c], summed in row order.
template <class C, class TX>
inline void column_sums(const TX* x, std::size_t rows, std::size_t channels, C* sum) noexcept {
    constexpr std::size_t w = batch<C>::size;
    over_column_groups<C>(
        channels,
        [&]<std::size_t NV>(std::size_t c0) {
            batch<C> acc[NV];
            for (std::size_t v = 0; v < NV; ++v) acc[v] = batch<C>::load_unaligned(sum + c0 + v * w);
            for (std::size_t r = 0; r < rows; ++r)
                for (std::size_t v = 0; v < NV; ++v) acc[v] = acc[v] + load<C>(x + r * channels + c0 + v * w);
            for (std::size_t v = 0; v < NV; ++v) acc[v].store_unaligned(sum + c0 + v * w);
        },
        [&](std::size_t c) {
            C s = sum[c];
            for (std::size_t r = 0; r < rows; ++r) s += get<C>(x[r * channels + c]);
            sum[c] = s;
        });
}

/// var[c] += Σ_r (x[r, c] − mean[c])², summed in row order.
template <class C, class TX>
inline void column_square_deviations(const TX* x, std::size_t rows, std::size_t channels, const C* mean, C* var) noexcept {
    constexpr std::size_t w = batch<C>::size;
    over_column_groups<C>(
        channels,
        [&]<std::size_t NV>(std::size_t c0) {
            batch<C> acc[NV], m[NV];
            for (std::size_t v = 0; v < NV; ++v) {
                acc[v] = batch<C>::load_unaligned(var + c0 + v * w);
                m[v] = batch<C>::load_unaligned(mean + c0 + v * w);
            }
            for (std::size_t r = 0; r < rows; ++r)
                for (std::size_t v = 0; v < NV; ++v) {
                    const auto d = load<C>(x + r * channels + c0 + v * w) - m[v];
                    acc[v] = fused_multiply_add(d, d, acc[v]);
                }
            for (std::size_t v = 0; v < NV; ++v) acc[v].store_unaligned(var + c0 + v * w);
        },
        [&](std::size_t c) {
            C s = var[c];
            for (std::size_t r = 0; r < rows; ++r) {
                const C d = get<C>(x[r * channels + c]) - mean[c];
                s = std::fma(d, d, s);
            }
            var[c] = s;
        });
}

/// sum_dy[c] += Σ dy[r, c];  sum_dy_xc[c] += Σ dy[r, c]·(x[r, c] − mean[c]), summed in row order. With
/// a mask (TM not void: a ReLU's output, or relu_of_affine), dy counts only where the mask is
/// positive (the gradient through that ReLU).
template <class C, class TM = void, class TX, class TD>
inline void column_grad_sums(const TX* x, const TD* dy, std::size_t rows, std::size_t channels, const C* mean, C* sum_dy,
                             C* sum_dy_xc, const TM* mask = nullptr) noexcept {
    constexpr std::size_t w = batch<C>::size;
    over_column_groups<C>(
        channels,
        [&]<std::size_t NV>(std::size_t c0) {
            batch<C> s[NV], sx[NV], m[NV];
            for (std::size_t v = 0; v < NV; ++v) {
                s[v] = batch<C>::load_unaligned(sum_dy + c0 + v * w);
                sx[v] = batch<C>::load_unaligned(sum_dy_xc + c0 + v * w);
                m[v] = batch<C>::load_unaligned(mean + c0 + v * w);
            }
            for (std::size_t r = 0; r < rows; ++r)
                for (std::size_t v = 0; v < NV; ++v) {
                    const std::size_t c = c0 + v * w;
                    const auto xv = load<C>(x + r * channels + c);
                    const auto g = masked<C>(mask_row(mask, r, channels), dy + r * channels, c, xv);
                    s[v] = s[v] + g;
                    sx[v] = fused_multiply_add(g, xv - m[v], sx[v]);
                }
            for (std::size_t v = 0; v < NV; ++v) {
                s[v].store_unaligned(sum_dy + c0 + v * w);
                sx[v].store_unaligned(sum_dy_xc + c0 + v * w);
            }
        },
        [&](std::size_t c) {
            C s = sum_dy[c], sx = sum_dy_xc[c];
            for (std::size_t r = 0; r < rows; ++r) {
                const C xv = get<C>(x[r * channels + c]);
                const C g = masked_one<C>(mask_row(mask, r, channels), dy + r * channels, c, xv);
                s += g;
                sx = std::fma(g, xv - mean[c], sx);  // fused whatever the compiler makes of the mask's select
            }
            sum_dy[c] = s;
            sum_dy_xc[c] = sx;
        });
}

/// A batch norm's input gradient at channels [c, c + width) from its (masked) output gradient g and
/// input xv: k1·(g − mdy − (xv − mean)·k2), the multiply-adds fused explicitly, so that every pass
/// that computes it (batch_norm_dx_rows, a convolution reading it through batch_norm_gradient_map)
/// gets the same bits at every optimisation level.
/// The per-channel operands as vectors (batch_norm_gradient_lanes holds them), or read at channel c.
template <class C>
[[nodiscard]] inline batch<C> batch_norm_gradient(const batch<C>& g, const batch<C>& xv, const batch<C>& mean,
                                                  const batch<C>& k1, const batch<C>& k2, const batch<C>& mdy) noexcept {
    const auto xm = xv - mean;
    const auto t = fused_multiply_add(-xm, k2, g - mdy);
    return k1 * t;
}
template <class C>
[[nodiscard]] inline batch<C> batch_norm_gradient(const batch<C>& g, const batch<C>& xv, const C* mean, const C* k1,
                                                  const C* k2, const C* mdy, std::size_t c) noexcept {
    return batch_norm_gradient(g, xv, batch<C>::load_unaligned(mean + c), batch<C>::load_unaligned(k1 + c),
                               batch<C>::load_unaligned(k2 + c), batch<C>::load_unaligned(mdy + c));
}
template <class C>
[[nodiscard]] inline C batch_norm_gradient(C g, C xv, const C* mean, const C* k1, const C* k2, const C* mdy,
                                           std::size_t c) noexcept {
    return k1[c] * std::fma(-(xv - mean[c]), k2[c], g - mdy[c]);
}

/// out[r, c] = k1[c]·(dy[r, c] − mdy[c] − (x[r, c] − mean[c])·k2[c]); dy masked as in column_grad_sums.
template <class C, class TM = void, class TX, class TD, class TO>
inline void batch_norm_dx_rows(const TX* x, const TD* dy, std::size_t rows, std::size_t channels, const C* mean,
                               const C* k1, const C* k2, const C* mdy, TO* out, const TM* mask = nullptr) noexcept {
    constexpr std::size_t w = batch<C>::size;
    for (std::size_t r = 0; r < rows; ++r) {
        const TX* xr = x + r * channels;
        const TD* gr = dy + r * channels;
        const TM* mr = mask_row(mask, r, channels);
        TO* o = out + r * channels;
        std::size_t c = 0;
        for (; c + w <= channels; c += w) {
            const auto xv = load<C>(xr + c);
            store<C>(o + c, batch_norm_gradient<C>(masked<C>(mr, gr, c, xv), xv, mean, k1, k2, mdy, c));
        }
        for (; c < channels; ++c) {
            const C xv = get<C>(xr[c]);
            o[c] = put<TO>(batch_norm_gradient<C>(masked_one<C>(mr, gr, c, xv), xv, mean, k1, k2, mdy, c));
        }
    }
}

/// A batch norm's input gradient that is not stored: the layer after the batch norm in backward (the
/// convolution before it in forward) reads it through this map from the batch norm's output gradient
/// dy and input x, element for element (batch_norm_gradient), dy masked by the ReLU after the batch
/// norm given by its input and map (relu_mask; null: no ReLU), each value rounded to nearest through T
/// as the batch norm's backward would have stored it.
template <class C, class T>
struct batch_norm_gradient_map {
    const T* x;
    const C* mean;
    const C* k1;
    const C* k2;
    const C* mdy;
    const relu_of_affine<C>* relu_mask;
};
/// The per-channel operands of a batch_norm_gradient_map for channels [c, c + width), loaded once for
/// the many pixels a convolution's transform reads through the map; (x, dy) at a pixel's channel c
/// gives the batch norm's input gradient there, batch_norm_dx_rows' operations on the same values. Loaded
/// from the map at every pixel (their stores to the transformed tiles could alias them, for all the
/// compiler knows), they were 6 of the 8 loads a pixel.
template <class C, class T>
struct batch_norm_gradient_lanes {
    batch<C> mean, k1, k2, mdy, scale = batch<C>(C(0)), shift = batch<C>(C(0)), above = batch<C>(C(0));
    bool relu;
    batch_norm_gradient_lanes(const batch_norm_gradient_map<C, T>& f, std::size_t c) noexcept
        : mean(batch<C>::load_unaligned(f.mean + c)), k1(batch<C>::load_unaligned(f.k1 + c)),
          k2(batch<C>::load_unaligned(f.k2 + c)), mdy(batch<C>::load_unaligned(f.mdy + c)), relu(f.relu_mask != nullptr) {
        if (relu) {
            scale = batch<C>::load_unaligned(f.relu_mask->scale + c);
            shift = batch<C>::load_unaligned(f.relu_mask->shift + c);
            above = batch<C>(f.relu_mask->above);
        }
    }
    /// The gradient at x's and dy's pixel: dy masked as masked() masks it, then batch_norm_gradient.
    template <class TD>
    [[nodiscard]] batch<C> operator()(const T* x, const TD* dy) const noexcept {
        const auto xv = load<C>(x);
        const auto g = relu ? through_relu_of_affine(load<C>(dy), xv, scale, shift, above) : load<C>(dy);
        return round_through<C, T>(batch_norm_gradient(g, xv, mean, k1, k2, mdy));
    }
};

/// The gradient at element `at` of dy (a scalar channel c), through the map f.
template <class T, class C, class TD>
[[nodiscard]] inline C batch_norm_gradient_value_one(const batch_norm_gradient_map<C, T>& f, const TD* dy, std::size_t at,
                                                     std::size_t c) noexcept {
    const C xv = get<C>(f.x[at]);
    const TD* row = dy + (at - c);
    const C g = f.relu_mask != nullptr ? masked_one<C>(f.relu_mask, row, c, xv) : masked_one<C, void>(nullptr, row, c, xv);
    return get<C>(put<T>(batch_norm_gradient<C>(g, xv, f.mean, f.k1, f.k2, f.mdy, c)));
}

}  // namespace tessera::kernels::simd
