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

/// One element, rounded as the batch form rounds it: once where the target has fused multiply-add
/// instructions (std::fma, one instruction there), a*b + c where it has none. Loops whose results two
/// code paths must reproduce bit for bit (the optimisers' updates, sharded or not, in any strategy)
/// fuse their products by hand with it rather than leave the choice to the compiler's contraction.
[[nodiscard]] inline float fused_multiply_add(float a, float b, float c) noexcept {
#if defined(__FMA__)
    return std::fma(a, b, c);
#else
    return a * b + c;
#endif
}

/// The square root of each lane, correctly rounded (as std::sqrt). On AVX-512 the zero-masking form:
/// GCC 12 warns (maybe-uninitialized) inside the unmasked one, which xsimd 8.1's sqrt calls.
template <class C>
[[nodiscard]] inline batch<C> square_root(const batch<C>& v) noexcept {
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<C, float> && batch<C>::size == 16)
        return batch<C>(_mm512_maskz_sqrt_ps(0xFFFF, v));
    else if constexpr (std::is_same_v<C, double> && batch<C>::size == 8)
        return batch<C>(_mm512_maskz_sqrt_pd(0xFF, v));
    else
#endif
        return xsimd::sqrt(v);
}
/// One element, as the batch form.
[[nodiscard]] inline float square_root(float v) noexcept { return std::sqrt(v); }

/// One element, for the loops' scalar tails.
template <class C, class T>
[[nodiscard]] inline C get(const T& v) noexcept {
    if constexpr (std::is_same_v<C, T>) return v; else return static_cast<C>(static_cast<float>(v));
}
template <class T, class C>
[[nodiscard]] inline T put(C v) noexcept {
    if constexpr (std::is_same_v<C, T>) return v; else return T(static_cast<float>(v));
}

/// A batch or a scalar of C at p (named apart from xsimd::load and xsimd::store, which
/// argument-dependent lookup finds for batch arguments; xsimd::store is the aligned one).
template <class V, class C, class S>
[[nodiscard]] inline V load_lanes(const S* p) noexcept {
    if constexpr (std::is_same_v<V, C>)
        return simd::get<C>(*p);
    else
        return simd::load<C>(p);
}
/// Stores v (a batch or a scalar) at p as S: C itself, or a type that stores from registers
/// (in_register), rounded to nearest.
template <class S, class V>
inline void store_lanes(S* p, const V& v) noexcept {
    if constexpr (std::is_arithmetic_v<V>)
        *p = S(v);
    else if constexpr (std::is_same_v<S, typename V::value_type>)
        v.store_unaligned(p);
    else
        simd::store<typename V::value_type>(p, v);
}

/// Runs f.template operator()<V>(offset) over a run of n (a pixel's channels): V = batch<C> over
/// whole batches, then V = C one element at a time.
template <class C, class F>
inline void over_channels(std::size_t n, F&& f) {
    constexpr std::size_t w = batch<C>::size;
    std::size_t i = 0;
    for (; i + w <= n; i += w) f.template operator()<batch<C>>(i);
    for (; i < n; ++i) f.template operator()<C>(i);
}

/// Runs f.template operator()<V>(i) for i in [from, to): as over_channels when `lanes`, else
/// V = C for every element. f written once for both serves loops whose every element is its own
/// (the same operations in each lane as on a scalar).
template <class C, class F>
inline void over_elements(std::size_t from, std::size_t to, bool lanes, F&& f) {
    if (lanes) return over_channels<C>(to - from, [&]<class V>(std::size_t k) { f.template operator()<V>(from + k); });
    for (std::size_t i = from; i < to; ++i) f.template operator()<C>(i);
}

/// y[i] = f(batch)[lane] for n elements of C (y may be x): every element in a full batch, the last
/// ones padded with zeros, so each element's result is the batch function's whatever its place (a
/// thread's range, the tail): the bits do not depend on where a range starts or ends.
template <class C, class F>
inline void map_batches(const C* x, C* y, std::size_t n, F&& f) noexcept {
    constexpr std::size_t w = batch<C>::size;
    std::size_t i = 0;
    for (; i + w <= n; i += w) f(batch<C>::load_unaligned(x + i)).store_unaligned(y + i);
    if (i == n) return;
    alignas(64) C lanes[w] = {};
    for (std::size_t k = i; k < n; ++k) lanes[k - i] = x[k];
    f(batch<C>::load_aligned(lanes)).store_aligned(lanes);
    for (std::size_t k = i; k < n; ++k) y[k] = lanes[k - i];
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

/// out[i] = y[i] + x[i] (x not null; else y[i]), kept only where mask[i] > 0 (mask not null; else
/// 0), computed in C and stored as O, rounded to nearest: add_to, relu_backward and a conversion in
/// one pass, the same operations on each element. y in C; x and mask stored as T; out as T, or as C
/// (out may be y: the add and the mask in place). In registers where T and O load into them
/// (in_register), else element by element.
template <class C, class T, class O = T>
inline void add_mask_store(const C* y, const T* x, const T* mask, O* out, std::size_t n) noexcept {
    std::size_t i = 0;
    if constexpr (in_register<C, T> && in_register<C, O>) {
        constexpr std::size_t w = batch<C>::size;
        const batch<C> zero(C(0));
        for (; i + w <= n; i += w) {
            auto v = batch<C>::load_unaligned(y + i);
            if (x != nullptr) v = v + load<C>(x + i);
            if (mask != nullptr) v = xsimd::select(load<C>(mask + i) > zero, v, zero);
            store<C>(out + i, v);
        }
    }
    for (; i < n; ++i) {
        C v = y[i];
        if (x != nullptr) v += get<C>(x[i]);
        if (mask != nullptr) v = get<C>(mask[i]) > C(0) ? v : C(0);
        out[i] = put<O>(v);
    }
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

}  // namespace tessera::kernels::simd
