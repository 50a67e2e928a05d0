#pragma once
// A small seeded generator whose output is fixed by its definition (splitmix64), so a seed gives the
// same shuffle and the same augmentation on every machine and standard library.
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

namespace tessera::data {

namespace detail {
__extension__ typedef unsigned __int128 uint128;  // GCC and Clang; __extension__ keeps -Wpedantic quiet
}  // namespace detail

/// splitmix64 (Steele, Lea and Flood, 2014): 64-bit state, passes BigCrush, trivially seedable.
/// std::uniform_int_distribution is not used anywhere in the data layer: its output differs between
/// standard libraries, and a seed must mean the same order everywhere.
class splitmix64 {
public:
    using result_type = std::uint64_t;

    constexpr explicit splitmix64(std::uint64_t seed = 0) noexcept : m_state(seed) {}

    [[nodiscard]] constexpr std::uint64_t next() noexcept {
        std::uint64_t z = (m_state += 0x9E37'79B9'7F4A'7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58'476D'1CE4'E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D0'49BB'1331'11EBull;
        return z ^ (z >> 31);
    }
    constexpr std::uint64_t operator()() noexcept { return next(); }
    static constexpr std::uint64_t min() noexcept { return 0; }
    static constexpr std::uint64_t max() noexcept { return ~std::uint64_t{0}; }

    /// Uniform in [0, bound) without bias (Lemire's multiply-shift with rejection); bound > 0.
    [[nodiscard]] constexpr std::uint64_t below(std::uint64_t bound) noexcept {
        detail::uint128 m = static_cast<detail::uint128>(next()) * bound;
        auto low = static_cast<std::uint64_t>(m);
        if (low < bound) {
            const std::uint64_t threshold = (0 - bound) % bound;
            while (low < threshold) {
                m = static_cast<detail::uint128>(next()) * bound;
                low = static_cast<std::uint64_t>(m);
            }
        }
        return static_cast<std::uint64_t>(m >> 64);
    }

    /// Uniform in [0, 1) with 24 random bits (exact in float).
    [[nodiscard]] constexpr float unit_float() noexcept {
        return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
    }

private:
    std::uint64_t m_state;
};

/// Combines two values into a well-mixed seed (for per-epoch and per-sample streams).
[[nodiscard]] constexpr std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b) noexcept {
    splitmix64 g(a ^ (b * 0xD1B5'4A32'D192'ED03ull + 0x8CB9'2BA7'2F3D'8DD7ull));
    (void)g.next();
    return g.next();
}

/// Fisher–Yates shuffle driven by splitmix64: the same seed gives the same permutation everywhere.
template <class T>
constexpr void shuffle(std::span<T> values, std::uint64_t seed) noexcept {
    splitmix64 g(seed);
    for (std::size_t i = values.size(); i > 1; --i) {
        const auto j = static_cast<std::size_t>(g.below(i));
        std::swap(values[i - 1], values[j]);
    }
}

}  // namespace tessera::data
