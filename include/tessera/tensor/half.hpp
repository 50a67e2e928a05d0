#pragma once
// tessera::half: IEEE 754 binary16 storage with round-to-nearest-even conversion from float.
#include <bit>
#include <cstdint>
#include <limits>
#include <type_traits>
#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace tessera::tensor {

namespace detail {

/// float -> binary16 bits, round to nearest, ties to even; NaNs stay NaN (quieted, payload truncated)
/// exactly as the F16C instruction VCVTPS2PH does, so both paths agree on every input.
[[nodiscard]] constexpr std::uint16_t float_to_half_bits_portable(float value) noexcept {
    const auto x = std::bit_cast<std::uint32_t>(value);
    const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
    const std::uint32_t abs = x & 0x7FFF'FFFFu;
    if (abs > 0x7F80'0000u)  // NaN
        return static_cast<std::uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu));
    if (abs >= 0x477F'F000u)  // >= 65520 rounds to infinity (ties to the even infinity)
        return static_cast<std::uint16_t>(sign | 0x7C00u);
    if (abs < 0x3880'0000u) {  // below 2^-14: a subnormal half or zero
        if (abs < 0x3300'0000u) return sign;  // below 2^-25 rounds to zero
        const std::uint32_t mantissa = (abs & 0x7F'FFFFu) | 0x80'0000u;
        const std::uint32_t shift = 126u - (abs >> 23);  // in units of 2^-24: 14..24
        std::uint32_t r = mantissa >> shift;
        const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
        const std::uint32_t halfway = 1u << (shift - 1u);
        if (rest > halfway || (rest == halfway && (r & 1u))) ++r;  // may carry into the smallest normal
        return static_cast<std::uint16_t>(sign | r);
    }
    const std::uint32_t rebiased = abs - 0x3800'0000u;  // exponent bias 127 -> 15
    return static_cast<std::uint16_t>(sign | ((rebiased + 0xFFFu + ((rebiased >> 13) & 1u)) >> 13));
}

/// binary16 bits -> float, exact; signalling NaNs come back quiet, as VCVTPH2PS returns them.
[[nodiscard]] constexpr float half_bits_to_float_portable(std::uint16_t bits) noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000u) << 16;
    const std::uint32_t exponent = (bits >> 10) & 0x1Fu;
    std::uint32_t mantissa = bits & 0x3FFu;
    if (exponent == 0x1Fu)
        return std::bit_cast<float>(sign | 0x7F80'0000u | (mantissa ? 0x40'0000u : 0u) | (mantissa << 13));
    if (exponent == 0u) {
        if (mantissa == 0u) return std::bit_cast<float>(sign);
        std::uint32_t biased = 113u;  // normalise the subnormal: 2^-14 has biased float exponent 113
        while ((mantissa & 0x400u) == 0u) {
            mantissa <<= 1;
            --biased;
        }
        return std::bit_cast<float>(sign | (biased << 23) | ((mantissa & 0x3FFu) << 13));
    }
    return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

[[nodiscard]] constexpr std::uint16_t float_to_half_bits(float value) noexcept {
#if defined(__F16C__)
    if (!std::is_constant_evaluated())
        return static_cast<std::uint16_t>(_cvtss_sh(value, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
    return float_to_half_bits_portable(value);
}

[[nodiscard]] constexpr float half_bits_to_float(std::uint16_t bits) noexcept {
#if defined(__F16C__)
    if (!std::is_constant_evaluated()) return _cvtsh_ss(bits);
#endif
    return half_bits_to_float_portable(bits);
}

}  // namespace detail

/// IEEE 754 binary16: 1 sign, 5 exponent, 10 mantissa bits. A storage type: arithmetic happens in
/// float through the implicit conversion, as on the IPU, whose half kernels accumulate in fp32.
/// @code
///   tessera::half h = 0.1f;          // rounds to nearest even: 0.0999755859375
///   float f = h * 2.0f;              // computes in float
/// @endcode
class half {
public:
    half() = default;
    constexpr half(float value) noexcept : m_bits(detail::float_to_half_bits(value)) {}  // NOLINT: implicit like float
    constexpr operator float() const noexcept { return detail::half_bits_to_float(m_bits); }  // NOLINT

    [[nodiscard]] static constexpr half from_bits(std::uint16_t bits) noexcept {
        half h;
        h.m_bits = bits;
        return h;
    }
    [[nodiscard]] constexpr std::uint16_t bits() const noexcept { return m_bits; }

private:
    std::uint16_t m_bits = 0;
};

static_assert(sizeof(half) == 2 && std::is_trivially_copyable_v<half>);

}  // namespace tessera::tensor

namespace tessera {
using tensor::half;
}

template <>
class std::numeric_limits<tessera::tensor::half> {
    using half = tessera::tensor::half;

public:
    static constexpr bool is_specialized = true, is_signed = true, is_integer = false, is_exact = false;
    static constexpr bool has_infinity = true, has_quiet_NaN = true, has_signaling_NaN = true;
    static constexpr bool is_iec559 = true, is_bounded = true, is_modulo = false;
    static constexpr std::float_round_style round_style = std::round_to_nearest;
    static constexpr int digits = 11, digits10 = 3, max_digits10 = 5, radix = 2;
    static constexpr int min_exponent = -13, min_exponent10 = -4, max_exponent = 16, max_exponent10 = 4;
    static constexpr half min() noexcept { return half::from_bits(0x0400); }
    static constexpr half max() noexcept { return half::from_bits(0x7BFF); }
    static constexpr half lowest() noexcept { return half::from_bits(0xFBFF); }
    static constexpr half epsilon() noexcept { return half::from_bits(0x1400); }
    static constexpr half round_error() noexcept { return half::from_bits(0x3800); }
    static constexpr half infinity() noexcept { return half::from_bits(0x7C00); }
    static constexpr half quiet_NaN() noexcept { return half::from_bits(0x7E00); }
    static constexpr half signaling_NaN() noexcept { return half::from_bits(0x7D00); }
    static constexpr half denorm_min() noexcept { return half::from_bits(0x0001); }
};
