#pragma once
// Stochastic rounding to binary16, as the IPU's floating-point unit does when its `esr` bit is set
// (PopTorch's opts.Precision.enableStochasticRounding): a float between two neighbouring halves
// becomes the upper one with probability proportional to its distance from the lower one, so the
// rounding is exact in expectation. The random bits come from a counter-based generator: a pure
// function of (seed, stream, counter), so a result does not depend on thread count or order.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tessera/tensor/half.hpp"

namespace tessera::tensor {

/// SplitMix64's finaliser (Steele, Lea and Flood, "Fast splittable pseudorandom number generators",
/// OOPSLA 2014): a bijection of 64-bit words whose every output bit depends on every input bit.
[[nodiscard]] constexpr std::uint64_t mix64(std::uint64_t z) noexcept {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/// The part of counter_bits that depends on (seed, stream) alone: computed once for a whole tensor.
[[nodiscard]] constexpr std::uint64_t counter_base(std::uint64_t seed, std::uint64_t stream) noexcept {
    constexpr std::uint64_t golden = 0x9E3779B97F4A7C15ull;
    return mix64(mix64(seed + golden) ^ (stream + 2 * golden));
}

/// 64 random bits for element `counter` of the stream whose counter_base is `base`.
[[nodiscard]] constexpr std::uint64_t counter_bits_at(std::uint64_t base, std::uint64_t counter) noexcept {
    constexpr std::uint64_t golden = 0x9E3779B97F4A7C15ull;
    return mix64(base ^ (counter + 3 * golden));
}

/// 64 random bits for element `counter` of stream `stream` under `seed`: the three words are mixed in
/// turn, each offset by the golden-ratio increment SplitMix64 steps by.
[[nodiscard]] constexpr std::uint64_t counter_bits(std::uint64_t seed, std::uint64_t stream,
                                                   std::uint64_t counter) noexcept {
    return counter_bits_at(counter_base(seed, stream), counter);
}

namespace detail {

/// The bits of `value` (given as its bits, x) rounded stochastically to a half, for |value| < 65520
/// (NaN, infinities and what rounds to infinity anyway are round_to_half_stochastic's to handle).
/// round_to_half_stochastic's arithmetic for values in range (convert_stochastic's general path too).
[[nodiscard]] constexpr std::uint16_t stochastic_half_bits(std::uint32_t x, std::uint64_t random) noexcept {
    const std::uint32_t abs = x & 0x7FFF'FFFFu;
    const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
    const int biased = static_cast<int>(abs >> 23);
    // value = m · 2^(e − 23), m with its implicit bit (float subnormals: biased exponent 0, no bit).
    const std::uint64_t m = (abs & 0x7F'FFFFu) | (biased == 0 ? 0u : 0x80'0000u);
    const int e = biased == 0 ? -126 : biased - 127;
    // The halves around it are multiples of 2^(max(e, −14) − 10): drop d bits of m, adding d random
    // bits first (below 2^-64 the chance of rounding up is under 2^-40: taken as zero).
    const int d = 13 + (e < -14 ? -14 - e : 0);
    const int shift = d < 63 ? d : 63;
    const std::uint64_t rounded = (m + (random & ((std::uint64_t{1} << shift) - 1))) >> shift;
    const std::uint64_t q = d >= 64 ? 0 : rounded;
    // q of those units is the half whose bits are q plus the exponent field of 2^max(e, −14) less its
    // implicit bit: q = 2^11 carries into the next binade (from 65504, into infinity); below 2^-14, q
    // itself is the subnormal's bits (and 2^10 the smallest normal).
    const auto bits = static_cast<std::uint16_t>((static_cast<std::uint64_t>(e < -14 ? 0 : e + 14) << 10) + q);
    return static_cast<std::uint16_t>(sign | bits);
}

/// Magnitudes (as bits) from which a float rounds to infinity, or is NaN or infinite.
inline constexpr std::uint32_t stochastic_half_limit = 0x477F'F000u;

}  // namespace detail

/// `value` rounded to one of the two halves around it: up (away from zero) with probability
/// (|value| − |lower|) / (|upper| − |lower|), decided by `random` (64 uniform bits). Halves stay
/// themselves; NaN and infinities convert as round-to-nearest converts them, and so do magnitudes
/// at or above 65520 (to infinity). Between 65504 and 65520 the upper neighbour is infinity.
[[nodiscard]] constexpr half round_to_half_stochastic(float value, std::uint64_t random) noexcept {
    const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
    if ((x & 0x7FFF'FFFFu) >= detail::stochastic_half_limit) return half(value);
    return half::from_bits(detail::stochastic_half_bits(x, random));
}

/// How a value computed in float is stored in 16 bits: to nearest (the default), or stochastically
/// with element k drawing element_bits(counter_base(seed, stream), k) (round_element). A stream names one tensor of one pass of one
/// micro-batch; child(tag) names a distinct tensor inside it (a layer inside a network, the gradient
/// beside the output), so no two tensors of a step share their bits.
struct rounding {
    bool stochastic = false;
    std::uint64_t seed = 0;
    std::uint64_t stream = 0;

    /// The stream of part `tag` of this one (itself when rounding to nearest: nothing to draw).
    [[nodiscard]] constexpr rounding child(std::uint64_t tag) const noexcept {
        if (!stochastic) return *this;
        return {true, seed, mix64(stream ^ mix64(tag + 0x9E3779B97F4A7C15ull))};
    }
    friend constexpr bool operator==(const rounding&, const rounding&) = default;
};

/// Chris Wellons' "lowbias32" (hash-prospector): a bijection of 32-bit words with low bias, two
/// 32-bit multiplies, so a loop of it vectorises on any x86-64 vector unit.
[[nodiscard]] constexpr std::uint32_t hash32(std::uint32_t x) noexcept {
    x ^= x >> 16;
    x *= 0x7FEB'352Du;
    x ^= x >> 15;
    x *= 0x846C'A68Bu;
    x ^= x >> 16;
    return x;
}

/// 32 random bits for element k (modulo 2^32) of the stream whose counter_base is `base`: what a bulk
/// conversion draws (convert_stochastic), cheaper than counter_bits_at's 64 bits and enough for a half:
/// 13 bits decide between two normal halves; below 2^-14 a value uses the bits it needs up to 32, so
/// magnitudes under 2^-32 (half a billionth of the smallest subnormal) round to zero.
[[nodiscard]] constexpr std::uint32_t element_bits(std::uint64_t base, std::uint32_t k) noexcept {
    return hash32(hash32(static_cast<std::uint32_t>(base) ^ k) ^ static_cast<std::uint32_t>(base >> 32));
}

/// Element k of r's stream rounded stochastically to a half: what convert_stochastic stores for it
/// (a tensor's stray element, or a test's reference).
[[nodiscard]] constexpr half round_element(float value, const rounding& r, std::size_t k) noexcept {
    return round_to_half_stochastic(value, element_bits(counter_base(r.seed, r.stream), static_cast<std::uint32_t>(k)));
}

/// to[i] = from[i] rounded to half stochastically with element_bits(counter_base(seed, stream),
/// first + i): round_to_half_stochastic given those 32 bits. A range of a tensor rounds as the whole
/// tensor would, so thread splits do not matter. Values between 2^-14 and 65520 in magnitude (nearly
/// all) take a vectorised path: their float bits plus 13 random bits, cut to a half's 10.
inline void convert_stochastic(const float* from, half* to, std::size_t n, const rounding& r,
                               std::size_t first = 0) noexcept {
    const std::uint64_t base = counter_base(r.seed, r.stream);
    constexpr std::uint32_t smallest_normal = 0x3880'0000u;  // 2^-14 as a float's bits
    static_assert(sizeof(half) == sizeof(std::uint16_t) && std::is_standard_layout_v<half>);
    auto* out = reinterpret_cast<std::uint16_t*>(to);  // a half is its bits (its only member)
    const auto k0 = static_cast<std::uint32_t>(first);
    const auto outside = [](std::uint32_t abs) {  // subnormal halves, zeros, NaN, infinities, what rounds to infinity
        return abs - smallest_normal >= detail::stochastic_half_limit - smallest_normal;
    };
    constexpr std::size_t block = 512;  // rounded again by the general rounding when any element is outside
    for (std::size_t b = 0; b < n; b += block) {
        const std::size_t e = b + block < n ? b + block : n;
        std::uint32_t rare = 0;
        for (std::size_t i = b; i < e; ++i) {
            const std::uint32_t x = std::bit_cast<std::uint32_t>(from[i]);
            const std::uint32_t abs = x & 0x7FFF'FFFFu;
            const std::uint32_t bits = element_bits(base, k0 + static_cast<std::uint32_t>(i));
            rare |= static_cast<std::uint32_t>(outside(abs));
            // (float bits + 13 random bits) >> 13 is the half's exponent and mantissa over a float's
            // bias: the carry out of the mantissa moves to the next binade, as q = 2^11 does above.
            out[i] = static_cast<std::uint16_t>(((x >> 16) & 0x8000u) |
                                                (((abs + (bits & 0x1FFFu)) >> 13) - ((127u - 15u) << 10)));
        }
        if (rare == 0) continue;
        for (std::size_t i = b; i < e; ++i)
            if (outside(std::bit_cast<std::uint32_t>(from[i]) & 0x7FFF'FFFFu))
                to[i] = round_to_half_stochastic(from[i], element_bits(base, k0 + static_cast<std::uint32_t>(i)));
    }
}

}  // namespace tessera::tensor
