#pragma once
// Elementwise loops written with xsimd: at -O2, GCC 12 vectorises a loop only when no scalar tail is
// needed (its "very cheap" cost model), so loops over a run-time count of channels stay scalar unless
// written out like this.
#include <cmath>
#include <cstddef>
#include <type_traits>

#include <xsimd/xsimd.hpp>

#include "tessera/tensor/half.hpp"

#if defined(__AVX__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace tessera::kernels::simd {

template <class C>
using batch = xsimd::batch<C>;

#if defined(__AVX512F__)
inline constexpr bool avx512f = true;
#else
inline constexpr bool avx512f = false;
#endif

/// Whether elements stored as T load into, and store from, a batch<C> in registers: C itself, and
/// half for float when the compiler targets F16C (8- or 16-lane floats). Kernels then read and write
/// 16-bit activations in place instead of through a converted fp32 copy.
template <class C, class T>
inline constexpr bool in_register = std::is_same_v<C, T>
#if defined(__F16C__) && defined(__AVX__)
    || (std::is_same_v<C, float> && std::is_same_v<T, tensor::half> &&
        (batch<float>::size == 8 || (batch<float>::size == 16 && avx512f)))
#endif
    ;

/// batch<C>::size elements at p as a batch<C> (in_register<C, T>).
template <class C, class T>
[[nodiscard]] inline batch<C> load(const T* p) noexcept {
    if constexpr (std::is_same_v<C, T>) {
        return batch<C>::load_unaligned(p);
    } else {
#if defined(__F16C__) && defined(__AVX__)
        if constexpr (batch<float>::size == 16) {
#if defined(__AVX512F__)
            // The zero-masking forms: GCC 12 warns (maybe-uninitialized) inside the unmasked ones.
            return batch<float>(_mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
#endif
        } else {
            return batch<float>(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
        }
#endif
    }
}

/// Stores v at p as T (round to nearest even for half, as tensor::convert).
template <class C, class T>
inline void store(T* p, const batch<C>& v) noexcept {
    if constexpr (std::is_same_v<C, T>) {
        v.store_unaligned(p);
    } else {
#if defined(__F16C__) && defined(__AVX__)
        constexpr int rounding = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        if constexpr (batch<float>::size == 16) {
#if defined(__AVX512F__)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_maskz_cvtps_ph(0xFFFF, v, rounding));
#endif
        } else {
            _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, rounding));
        }
#endif
    }
}

/// a·b + c rounded once where the target has fused multiply-add instructions, as std::fma rounds it
/// (xsimd 8.1's fma for AVX-512 computes a*b + c, which GCC fuses only when it optimises, and not at
/// -O1: a kernel and a pass that must agree with it bit for bit would then differ by the build);
/// a*b + c, rounded twice, where the target has none.
template <class C>
[[nodiscard]] inline batch<C> fused_multiply_add(const batch<C>& a, const batch<C>& b, const batch<C>& c) noexcept {
#if defined(__AVX512F__)
    if constexpr (batch<C>::size * sizeof(C) == 64) {
        if constexpr (std::is_same_v<C, float>)
            return batch<C>(_mm512_fmadd_ps(a, b, c));
        else
            return batch<C>(_mm512_fmadd_pd(a, b, c));
    }
#endif
#if defined(__FMA__)
    if constexpr (batch<C>::size * sizeof(C) == 32) {
        if constexpr (std::is_same_v<C, float>)
            return batch<C>(_mm256_fmadd_ps(a, b, c));
        else
            return batch<C>(_mm256_fmadd_pd(a, b, c));
    }
#endif
    return xsimd::fma(a, b, c);
}

/// One element, for the loops' scalar tails.
template <class C, class T>
[[nodiscard]] inline C get(const T& v) noexcept {
    if constexpr (std::is_same_v<C, T>) return v; else return static_cast<C>(static_cast<float>(v));
}
template <class T, class C>
[[nodiscard]] inline T put(C v) noexcept {
    if constexpr (std::is_same_v<C, T>) return v; else return T(static_cast<float>(v));
}

/// v rounded to nearest through T and back: what storing it as T and loading it would give. In
/// registers where T loads into them (in_register), else lane by lane.
template <class C, class T>
[[nodiscard]] inline batch<C> round_through(const batch<C>& v) noexcept {
    if constexpr (std::is_same_v<C, T>) {
        return v;
    } else if constexpr (in_register<C, T>) {  // half for float, with F16C
#if defined(__F16C__) && defined(__AVX__)
        constexpr int rounding = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        if constexpr (batch<float>::size == 16) {
#if defined(__AVX512F__)
            return batch<float>(_mm512_maskz_cvtph_ps(0xFFFF, _mm512_maskz_cvtps_ph(0xFFFF, v, rounding)));
#endif
        } else {
            return batch<float>(_mm256_cvtph_ps(_mm256_cvtps_ph(v, rounding)));
        }
#endif
    } else {
        alignas(64) C lanes[batch<C>::size];
        v.store_aligned(lanes);
        for (auto& lane : lanes) lane = get<C>(put<T>(lane));
        return batch<C>::load_aligned(lanes);
    }
}

/// y[i] = x[i] in C (n elements; may not overlap): C itself, or an in_register type widened in
/// registers (im2col's short runs, without a call per run).
template <class C, class T>
inline void copy(const T* __restrict x, C* __restrict y, std::size_t n) noexcept {
    constexpr std::size_t w = batch<C>::size;
    std::size_t i = 0;
    for (; i + w <= n; i += w) {
        load<C>(x + i).store_unaligned(y + i);
#if defined(__GNUC__)
        asm volatile("");  // a loop, not a call to memmove (below)
#endif
    }
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<C, float> && std::is_same_v<T, float> && w == 16) {
        // The tail in one masked load and store (masked-off lanes are not touched).
        if (i < n) {
            const auto m = static_cast<__mmask16>((1u << (n - i)) - 1u);
            _mm512_mask_storeu_ps(y + i, m, _mm512_maskz_loadu_ps(m, x + i));
        }
        return;
    }
#endif
    for (; i < n; ++i) {
        y[i] = get<C>(x[i]);
#if defined(__GNUC__)
        // Keeps GCC from turning the loop into a call to memmove: a call per short run (a one-channel
        // stem's runs are 3 values) cost more than im2col's copies themselves.
        asm volatile("");
#endif
    }
}

/// y[i] += x[i] in C (x stored as C or an in_register type).
template <class C, class T>
inline void add_to(const T* x, C* y, std::size_t n) noexcept {
    constexpr std::size_t w = batch<C>::size;
    std::size_t i = 0;
    for (; i + w <= n; i += w) (batch<C>::load_unaligned(y + i) + load<C>(x + i)).store_unaligned(y + i);
    for (; i < n; ++i) y[i] += get<C>(x[i]);
}

/// out[i] = a[i] + b[i] computed in C (out may be a or b); storage C or in_register types.
template <class C, class T>
inline void add(const T* a, const T* b, T* out, std::size_t n) noexcept {
    constexpr std::size_t w = batch<C>::size;
    std::size_t i = 0;
    for (; i + w <= n; i += w) store<C>(out + i, load<C>(a + i) + load<C>(b + i));
    for (; i < n; ++i) out[i] = put<T>(get<C>(a[i]) + get<C>(b[i]));
}

/// out[i] = max(a[i] + b[i], 0) computed in C (a residual block's add and the ReLU after it in one
/// pass; out may be a or b); storage C or in_register types.
template <class C, class T>
inline void add_relu(const T* a, const T* b, T* out, std::size_t n) noexcept {
    constexpr std::size_t w = batch<C>::size;
    const batch<C> zero(C(0));
    std::size_t i = 0;
    for (; i + w <= n; i += w) {
        const auto v = load<C>(a + i) + load<C>(b + i);
        store<C>(out + i, xsimd::select(v > zero, v, zero));
    }
    for (; i < n; ++i) {
        const C v = get<C>(a[i]) + get<C>(b[i]);
        out[i] = put<T>(v > C(0) ? v : C(0));
    }
}

/// y[i] = max(x[i], 0) (y may be x), computed in C; x and y stored as C or in_register types.
template <class C, class TX, class TY>
inline void relu(const TX* x, TY* y, std::size_t n) noexcept {
    constexpr std::size_t w = batch<C>::size;
    const batch<C> zero(C(0));
    std::size_t i = 0;
    for (; i + w <= n; i += w) {
        const auto v = load<C>(x + i);
        store<C>(y + i, xsimd::select(v > zero, v, zero));  // not xsimd::max: GCC 12 warns on its mask intrinsic
    }
    for (; i < n; ++i) {
        const C v = get<C>(x[i]);
        y[i] = put<TY>(v > C(0) ? v : C(0));
    }
}

/// dx[i] = y[i] > 0 ? dy[i] : 0, computed in C.
template <class C, class TY, class TD, class TX>
inline void relu_backward(const TY* y, const TD* dy, TX* dx, std::size_t n) noexcept {
    constexpr std::size_t w = batch<C>::size;
    const batch<C> zero(C(0));
    std::size_t i = 0;
    for (; i + w <= n; i += w) store<C>(dx + i, xsimd::select(load<C>(y + i) > zero, load<C>(dy + i), zero));
    for (; i < n; ++i) dx[i] = put<TX>(get<C>(y[i]) > C(0) ? get<C>(dy[i]) : C(0));
}

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
                    acc[v] = xsimd::fma(d, d, acc[v]);
                }
            for (std::size_t v = 0; v < NV; ++v) acc[v].store_unaligned(var + c0 + v * w);
        },
        [&](std::size_t c) {
            C s = var[c];
            for (std::size_t r = 0; r < rows; ++r) {
                const C d = get<C>(x[r * channels + c]) - mean[c];
                s += d * d;
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
