#pragma once
// tessera::bfloat16: the upper half of a float, with round-to-nearest-even conversion from float.
#include <bit>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace tessera::tensor {

namespace detail {

/// float -> bfloat16 bits, round to nearest, ties to even, subnormals kept (not flushed); a NaN
/// stays NaN with the quiet bit set, as VCVTNEPS2BF16 returns it.
[[nodiscard]] constexpr std::uint16_t float_to_bfloat16_bits(float value) noexcept {
    const auto x = std::bit_cast<std::uint32_t>(value);
    if ((x & 0x7FFF'FFFFu) > 0x7F80'0000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
    return static_cast<std::uint16_t>((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

[[nodiscard]] constexpr float bfloat16_bits_to_float(std::uint16_t bits) noexcept {
    return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

}  // namespace detail

/// bfloat16: 1 sign, 8 exponent, 7 mantissa bits; float's range with 3 significant digits.
/// A storage type: arithmetic happens in float through the implicit conversion.
class bfloat16 {
public:
    bfloat16() = default;
    constexpr bfloat16(float value) noexcept : m_bits(detail::float_to_bfloat16_bits(value)) {}  // NOLINT
    constexpr operator float() const noexcept { return detail::bfloat16_bits_to_float(m_bits); }  // NOLINT

    [[nodiscard]] static constexpr bfloat16 from_bits(std::uint16_t bits) noexcept {
        bfloat16 b;
        b.m_bits = bits;
        return b;
    }
    [[nodiscard]] constexpr std::uint16_t bits() const noexcept { return m_bits; }

private:
    std::uint16_t m_bits = 0;
};

static_assert(sizeof(bfloat16) == 2 && std::is_trivially_copyable_v<bfloat16>);

}  // namespace tessera::tensor

namespace tessera {
using tensor::bfloat16;
}

template <>
class std::numeric_limits<tessera::tensor::bfloat16> {
    using bfloat16 = tessera::tensor::bfloat16;

public:
    static constexpr bool is_specialized = true, is_signed = true, is_integer = false, is_exact = false;
    static constexpr bool has_infinity = true, has_quiet_NaN = true, has_signaling_NaN = true;
    static constexpr bool is_iec559 = false, is_bounded = true, is_modulo = false;
    static constexpr std::float_round_style round_style = std::round_to_nearest;
    static constexpr int digits = 8, digits10 = 2, max_digits10 = 4, radix = 2;
    static constexpr int min_exponent = -125, min_exponent10 = -37, max_exponent = 128, max_exponent10 = 38;
    static constexpr bfloat16 min() noexcept { return bfloat16::from_bits(0x0080); }
    static constexpr bfloat16 max() noexcept { return bfloat16::from_bits(0x7F7F); }
    static constexpr bfloat16 lowest() noexcept { return bfloat16::from_bits(0xFF7F); }
    static constexpr bfloat16 epsilon() noexcept { return bfloat16::from_bits(0x3C00); }
    static constexpr bfloat16 round_error() noexcept { return bfloat16::from_bits(0x3F00); }
    static constexpr bfloat16 infinity() noexcept { return bfloat16::from_bits(0x7F80); }
    static constexpr bfloat16 quiet_NaN() noexcept { return bfloat16::from_bits(0x7FC0); }
    static constexpr bfloat16 signaling_NaN() noexcept { return bfloat16::from_bits(0x7FA0); }
    static constexpr bfloat16 denorm_min() noexcept { return bfloat16::from_bits(0x0001); }
};
