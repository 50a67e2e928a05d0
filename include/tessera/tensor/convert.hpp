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
#include <cstring>
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

// F16C through the compiler's builtins, the ones <immintrin.h>'s _mm256_cvtps_ph, _mm256_cvtph_ps,
// _cvtss_sh and _cvtsh_ss expand to (GCC and clang name them alike): <immintrin.h> declares every x86
// extension and takes 0.4 s to parse, a tenth of the umbrella header, for these four instructions.
using f16c_v4sf = float __attribute__((vector_size(16)));
using f16c_v8sf = float __attribute__((vector_size(32)));
using f16c_v8hi = short __attribute__((vector_size(16)));
inline constexpr int f16c_round_to_nearest = 0x08;  // _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC

__attribute__((target("avx,f16c"))) inline void float_to_half_f16c(const float* in, std::uint16_t* out,
                                                                   std::size_t n) noexcept {
    const std::size_t whole = n - n % 8;
    for (std::size_t i = 0; i < whole; i += 8) {
        f16c_v8sf v;
        std::memcpy(&v, in + i, sizeof v);
        const f16c_v8hi h = __builtin_ia32_vcvtps2ph256(v, f16c_round_to_nearest);
        std::memcpy(out + i, &h, sizeof h);
    }
    for (std::size_t i = whole; i < n; ++i) {
        const f16c_v8hi h = __builtin_ia32_vcvtps2ph(f16c_v4sf{in[i], 0, 0, 0}, f16c_round_to_nearest);
        out[i] = static_cast<std::uint16_t>(h[0]);
    }
}

__attribute__((target("avx,f16c"))) inline void half_to_float_f16c(const std::uint16_t* in, float* out,
                                                                   std::size_t n) noexcept {
    const std::size_t whole = n - n % 8;
    for (std::size_t i = 0; i < whole; i += 8) {
        f16c_v8hi h;
        std::memcpy(&h, in + i, sizeof h);
        const f16c_v8sf v = __builtin_ia32_vcvtph2ps256(h);
        std::memcpy(out + i, &v, sizeof v);
    }
    for (std::size_t i = whole; i < n; ++i)
        out[i] = __builtin_ia32_vcvtph2ps(f16c_v8hi{static_cast<short>(in[i]), 0, 0, 0, 0, 0, 0, 0})[0];
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
