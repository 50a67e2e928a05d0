#pragma once
// Bulk conversion between float and the 16-bit storage types, with an F16C fast path chosen at run time.
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

#include "tessera/tensor/bfloat16.hpp"
#include "tessera/tensor/half.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define TESSERA_X86_DISPATCH 1
#else
#define TESSERA_X86_DISPATCH 0
#endif

namespace tessera::tensor {

namespace detail {

inline void check_same_size(std::size_t from, std::size_t to, const char* what) {
    if (from != to)
        throw std::invalid_argument(std::string("tessera::tensor::") + what + ": source has " +
                                    std::to_string(from) + " elements, destination " + std::to_string(to));
}

#if TESSERA_X86_DISPATCH
/// True when this CPU executes F16C; asked once (the answer cannot change while the program runs).
[[nodiscard]] inline bool cpu_has_f16c() noexcept {
#if defined(__clang__)  // clang 14 knows no "f16c" for __builtin_cpu_supports: ask CPUID, and XGETBV for AVX state
    static const bool has = [] {
        unsigned a = 0, b = 0, c = 0, d = 0;
        if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
        if (!(c & bit_F16C) || !(c & bit_AVX) || !(c & bit_OSXSAVE)) return false;
        unsigned lo = 0, hi = 0;
        __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        return (lo & 0x6u) == 0x6u;  // the OS saves SSE and AVX registers
    }();
#else
    static const bool has = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
#endif
    return has;
}

__attribute__((target("avx,f16c"))) inline void float_to_half_f16c(const float* in, std::uint16_t* out,
                                                                   std::size_t n) noexcept {
    constexpr int rounding = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const std::size_t whole = n - n % 8;
    for (std::size_t i = 0; i < whole; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), rounding));
    for (std::size_t i = whole; i < n; ++i) out[i] = static_cast<std::uint16_t>(_cvtss_sh(in[i], rounding));
}

__attribute__((target("avx,f16c"))) inline void half_to_float_f16c(const std::uint16_t* in, float* out,
                                                                   std::size_t n) noexcept {
    const std::size_t whole = n - n % 8;
    for (std::size_t i = 0; i < whole; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
    for (std::size_t i = whole; i < n; ++i) out[i] = _cvtsh_ss(in[i]);
}
#endif

}  // namespace detail

/// Converts `from` into `to` element by element (round to nearest even); sizes must match.
/// Uses the CPU's F16C instructions when present, whatever flags the caller compiled with.
inline void convert(std::span<const float> from, std::span<half> to) {
    detail::check_same_size(from.size(), to.size(), "convert(float -> half)");
#if TESSERA_X86_DISPATCH
    if (detail::cpu_has_f16c()) {
        static_assert(sizeof(half) == sizeof(std::uint16_t));
        detail::float_to_half_f16c(from.data(), reinterpret_cast<std::uint16_t*>(to.data()), from.size());
        return;
    }
#endif
    for (std::size_t i = 0; i < from.size(); ++i)
        to[i] = half::from_bits(detail::float_to_half_bits_portable(from[i]));
}

inline void convert(std::span<const half> from, std::span<float> to) {
    detail::check_same_size(from.size(), to.size(), "convert(half -> float)");
#if TESSERA_X86_DISPATCH
    if (detail::cpu_has_f16c()) {
        detail::half_to_float_f16c(reinterpret_cast<const std::uint16_t*>(from.data()), to.data(), from.size());
        return;
    }
#endif
    for (std::size_t i = 0; i < from.size(); ++i) to[i] = detail::half_bits_to_float_portable(from[i].bits());
}

inline void convert(std::span<const float> from, std::span<bfloat16> to) {
    detail::check_same_size(from.size(), to.size(), "convert(float -> bfloat16)");
    for (std::size_t i = 0; i < from.size(); ++i) to[i] = bfloat16(from[i]);  // vectorises as written
}

inline void convert(std::span<const bfloat16> from, std::span<float> to) {
    detail::check_same_size(from.size(), to.size(), "convert(bfloat16 -> float)");
    for (std::size_t i = 0; i < from.size(); ++i) to[i] = from[i];
}

}  // namespace tessera::tensor
