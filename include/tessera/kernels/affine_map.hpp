#pragma once
// A batch norm's per-channel affine map over rows × channels and the ReLU after it: applied in one pass
// (scale_shift_rows), or handed to the next kernel as the map and its input (relu_of_affine), which
// recomputes the ReLU's output or mask where it reads them.
#include <cmath>
#include <cstddef>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "tessera/kernels/simd.hpp"

namespace tessera::kernels::simd {

/// Per-row affine map over rows × channels: out[r, c] = x[r, c] · scale[c] + shift[c], plus skip[r, c]
/// when skip is given (TS not void: a residual block's shortcut), then max(·, 0) when Relu (a batch
/// norm, the residual add and the ReLU after them in one pass).
template <class C, bool Relu = false, class TX, class TO, class TS = void>
inline void scale_shift_rows(const TX* x, std::size_t rows, std::size_t channels, const C* scale, const C* shift, TO* out,
                             const TS* skip = nullptr) noexcept {
    constexpr std::size_t w = batch<C>::size;
    constexpr bool adds = !std::is_void_v<TS>;
    const batch<C> zero(C(0));
    for (std::size_t r = 0; r < rows; ++r) {
        const TX* xr = x + r * channels;
        TO* o = out + r * channels;
        std::size_t c = 0;
        for (; c + w <= channels; c += w) {
            auto v = fused_multiply_add(load<C>(xr + c), batch<C>::load_unaligned(scale + c), batch<C>::load_unaligned(shift + c));
            if constexpr (adds) v = v + load<C>(skip + r * channels + c);
            if constexpr (Relu) v = xsimd::select(v > zero, v, zero);
            store<C>(o + c, v);
        }
        for (; c < channels; ++c) {
            C v = std::fma(get<C>(xr[c]), scale[c], shift[c]);  // as the vectors (and relu_of_affine) compute it
            if constexpr (adds) v = v + get<C>(skip[r * channels + c]);
            if constexpr (Relu) v = v > C(0) ? v : C(0);
            o[c] = put<TO>(v);
        }
    }
}

/// A ReLU after scale_shift_rows' affine map, given by that pass's input and the map instead of its
/// output. As a mask (column_grad_sums, batch_norm_dx_rows): positive where x·scale[c] + shift[c], the
/// same fused multiply-add, exceeds `above`, the largest value that the output's storage type rounds
/// to zero (0 for C itself); one struct serves every row, a mask "pointer" of this type is not offset
/// by rows. As values: relu_of_affine_value.
template <class C>
struct relu_of_affine {
    const C* scale;
    const C* shift;
    C above;
};
template <class TM>
inline constexpr bool is_relu_of_affine = false;
template <class C>
inline constexpr bool is_relu_of_affine<relu_of_affine<C>> = true;

/// A relu_of_affine's scale and shift for channels [c, c + width), loaded once for the many pixels a
/// convolution's input transform reads through the map; value<T>(xv) is relu_of_affine_value's.
template <class C>
struct relu_of_affine_lanes {
    batch<C> scale, shift;
    relu_of_affine_lanes(const relu_of_affine<C>& f, std::size_t c) noexcept
        : scale(batch<C>::load_unaligned(f.scale + c)), shift(batch<C>::load_unaligned(f.shift + c)) {}
    template <class T>
    [[nodiscard]] batch<C> value(const batch<C>& xv) const noexcept {
        const batch<C> zero(C(0));
        const auto v = fused_multiply_add(xv, scale, shift);
        return round_through<C, T>(xsimd::select(v > zero, v, zero));
    }
};
/// The ReLU's output itself, as the unfused pass would have stored it as T and a kernel loaded it
/// back: max(x·scale[c] + shift[c], 0) (the same fused multiply-add), rounded to nearest through T.
/// What a convolution reads when the batch norm and ReLU before it hand it their input and map.
template <class T, class C>
[[nodiscard]] inline batch<C> relu_of_affine_value(const relu_of_affine<C>& f, const batch<C>& xv, std::size_t c) noexcept {
    return relu_of_affine_lanes<C>(f, c).template value<T>(xv);
}
template <class T, class C>
[[nodiscard]] inline C relu_of_affine_value(const relu_of_affine<C>& f, C xv, std::size_t c) noexcept {
    const C v = std::fma(xv, f.scale[c], f.shift[c]);
    return get<C>(put<T>(v > C(0) ? v : C(0)));
}

/// mask's row `r` of `channels` (a ReLU's output), or mask itself (void, or relu_of_affine).
template <class TM>
[[nodiscard]] inline const TM* mask_row(const TM* mask, std::size_t r, std::size_t channels) noexcept {
    if constexpr (std::is_void_v<TM> || is_relu_of_affine<TM>)
        return mask;
    else
        return mask + r * channels;
}

/// g where the ReLU after x's affine map passes (x·scale + shift, one fused multiply-add, above
/// `above`), else 0: the gradient through that ReLU.
template <class C>
[[nodiscard]] inline batch<C> through_relu_of_affine(const batch<C>& g, const batch<C>& xv, const batch<C>& scale,
                                                     const batch<C>& shift, const batch<C>& above) noexcept {
    return xsimd::select(fused_multiply_add(xv, scale, shift) > above, g, batch<C>(C(0)));
}

/// dy[i] where the mask is positive at channel i of a row (mask[i], a ReLU's output, or the
/// relu_of_affine of xv, the row's x at i), else 0; dy[i] itself without a mask (TM void).
template <class C, class TM, class TD>
[[nodiscard]] inline batch<C> masked(const TM* mask, const TD* dy, std::size_t i, const batch<C>& xv) noexcept {
    const batch<C> zero(C(0));
    if constexpr (std::is_void_v<TM>) {
        (void)xv;
        return load<C>(dy + i);
    } else if constexpr (is_relu_of_affine<TM>) {
        return through_relu_of_affine(load<C>(dy + i), xv, batch<C>::load_unaligned(mask->scale + i),
                                      batch<C>::load_unaligned(mask->shift + i), batch<C>(mask->above));
    } else {
        (void)xv;
        return xsimd::select(load<C>(mask + i) > zero, load<C>(dy + i), zero);
    }
}
template <class C, class TM, class TD>
[[nodiscard]] inline C masked_one(const TM* mask, const TD* dy, std::size_t i, C xv) noexcept {
    if constexpr (std::is_void_v<TM>)
        return get<C>(dy[i]);
    else if constexpr (is_relu_of_affine<TM>)
        return std::fma(xv, mask->scale[i], mask->shift[i]) > mask->above ? get<C>(dy[i]) : C(0);
    else
        return get<C>(mask[i]) > C(0) ? get<C>(dy[i]) : C(0);
}

}  // namespace tessera::kernels::simd
