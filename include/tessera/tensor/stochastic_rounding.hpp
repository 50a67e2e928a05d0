#pragma once
// Stochastic rounding to binary16, as the IPU's floating-point unit does when its `esr` bit is set
// (PopTorch's opts.Precision.enableStochasticRounding): a float between two neighbouring halves
// becomes the upper one with probability proportional to its distance from the lower one, so the
// rounding is exact in expectation. The random bits come from a counter-based generator: a pure
// function of (seed, stream, counter), so a result does not depend on thread count or order.
#include <bit>
#include <cstddef>
#include <cstdint>

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

/// `value` rounded to one of the two halves around it: up (away from zero) with probability
/// (|value| − |lower|) / (|upper| − |lower|), decided by `random` (64 uniform bits). Halves stay
/// themselves; NaN and infinities convert as round-to-nearest converts them, and so do magnitudes
/// at or above 65520 (to infinity). Between 65504 and 65520 the upper neighbour is infinity.
[[nodiscard]] constexpr half round_to_half_stochastic(float value, std::uint64_t random) noexcept {
    const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
    const std::uint32_t abs = x & 0x7FFF'FFFFu;
    if (abs >= 0x477F'F000u) return half(value);  // NaN, infinity, and what rounds to infinity anyway
    const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
    const int biased = static_cast<int>(abs >> 23);
    // value = m · 2^(e − 23), m with its implicit bit (float subnormals: biased exponent 0, no bit).
    const std::uint64_t m = biased == 0 ? (abs & 0x7F'FFFFu) : ((abs & 0x7F'FFFFu) | 0x80'0000u);
    const int e = biased == 0 ? -126 : biased - 127;
    // The halves around it are multiples of 2^(max(e, −14) − 10): drop d bits of m, adding d random
    // bits first (below 2^-64 the chance of rounding up is under 2^-40: taken as zero).
    const int d = 13 + (e < -14 ? -14 - e : 0);
    const std::uint64_t q = d >= 64 ? 0 : (m + (random & ((std::uint64_t{1} << d) - 1))) >> d;
    // q of those units is the half whose bits are q plus the exponent field of 2^max(e, −14) less its
    // implicit bit: q = 2^11 carries into the next binade (from 65504, into infinity); below 2^-14, q
    // itself is the subnormal's bits (and 2^10 the smallest normal).
    const auto bits = static_cast<std::uint16_t>((static_cast<std::uint64_t>(e < -14 ? 0 : e + 14) << 10) + q);
    return half::from_bits(static_cast<std::uint16_t>(sign | bits));
}

/// How a value computed in float is stored in 16 bits: to nearest (the default), or stochastically
/// with element k drawing counter_bits(seed, stream, k). A stream names one tensor of one pass of one
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

/// to[i] = from[i] rounded to half stochastically, element i drawing the bits of element `first + i`
/// of r's stream (a range of a tensor rounds as the whole tensor would: thread splits do not matter).
inline void convert_stochastic(const float* from, half* to, std::size_t n, const rounding& r,
                               std::size_t first = 0) noexcept {
    const std::uint64_t base = counter_base(r.seed, r.stream);
    for (std::size_t i = 0; i < n; ++i) to[i] = round_to_half_stochastic(from[i], counter_bits_at(base, first + i));
}

}  // namespace tessera::tensor
