// Stochastic rounding to half against its definition: halves stay, every result is one of the two
// neighbours, and the mean over many keys is the value (a statistical bound; the keys are fixed, so
// the test is deterministic).
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tessera/tensor/stochastic_rounding.hpp"

namespace test_stochastic_rounding {

namespace tn = tessera::tensor;
using tessera::half;

namespace {

// The halves just below and above |x| (toward and away from zero), as floats of x's sign: found by
// walking the bit patterns, not by the arithmetic under test.
std::pair<float, float> neighbours(float x) {
    const float a = std::fabs(x);
    std::uint16_t lo = 0;
    while (lo < 0x7C00 && static_cast<float>(half::from_bits(static_cast<std::uint16_t>(lo + 1))) <= a) ++lo;
    const float below = static_cast<float>(half::from_bits(lo));
    const float above = below == a ? below : static_cast<float>(half::from_bits(static_cast<std::uint16_t>(lo + 1)));
    return x < 0 ? std::pair{-below, -above} : std::pair{below, above};
}

}  // namespace

TEST_CASE("counter_bits is a pure function of seed, stream and counter, and each word matters", "[tensor][rounding]") {
    CHECK(tn::counter_bits(1, 2, 3) == tn::counter_bits(1, 2, 3));
    CHECK(tn::counter_bits(1, 2, 3) != tn::counter_bits(2, 2, 3));
    CHECK(tn::counter_bits(1, 2, 3) != tn::counter_bits(1, 3, 3));
    CHECK(tn::counter_bits(1, 2, 3) != tn::counter_bits(1, 2, 4));
    // Roughly half the bits are set, over many counters (64 · 4096 bits: mean 32, σ ≈ 0.06).
    double ones = 0;
    for (std::uint64_t k = 0; k < 4096; ++k) ones += std::popcount(tn::counter_bits(7, 0, k));
    CHECK(std::abs(ones / 4096 - 32.0) < 0.5);
}

TEST_CASE("stochastic rounding leaves halves as they are, and gives one of the two neighbours", "[tensor][rounding]") {
    for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
        const half h = half::from_bits(static_cast<std::uint16_t>(bits));
        const float f = h;
        if (std::isnan(f)) {
            CHECK(std::isnan(static_cast<float>(tn::round_to_half_stochastic(f, 0x123456789ull))));
            continue;
        }
        for (const std::uint64_t r : {std::uint64_t{0}, ~std::uint64_t{0}, tn::counter_bits(1, 1, bits)})
            REQUIRE(tn::round_to_half_stochastic(f, r).bits() == h.bits());
    }
    for (const float x : {1.0001f, -3.14159f, 1e-5f, 3e-8f, -6e-8f, 65500.0f, 0.3f}) {
        const auto [below, above] = neighbours(x);
        bool saw_below = false, saw_above = false;
        for (std::uint64_t k = 0; k < 2000; ++k) {
            const float r = tn::round_to_half_stochastic(x, tn::counter_bits(3, 0, k));
            INFO(x << " rounded to " << r << ", neighbours " << below << " and " << above);
            REQUIRE((r == below || r == above));
            saw_below |= r == below;
            saw_above |= r == above;
        }
        CHECK((saw_below && saw_above));
    }
    // Zero bits round toward zero, all-ones bits away from it (a fraction above zero).
    CHECK(static_cast<float>(tn::round_to_half_stochastic(1.0001f, 0)) == 1.0f);
    CHECK(static_cast<float>(tn::round_to_half_stochastic(1.0001f, ~0ull)) == neighbours(1.0001f).second);
    // What round-to-nearest sends to infinity, and infinities, stay so; above the largest half the
    // upper neighbour is infinity.
    CHECK(std::isinf(static_cast<float>(tn::round_to_half_stochastic(70000.0f, 0))));
    CHECK(static_cast<float>(tn::round_to_half_stochastic(-std::numeric_limits<float>::infinity(), 0)) < 0);
    CHECK(static_cast<float>(tn::round_to_half_stochastic(65510.0f, 0)) == 65504.0f);
    CHECK(std::isinf(static_cast<float>(tn::round_to_half_stochastic(65510.0f, ~0ull))));
    CHECK(std::signbit(static_cast<float>(tn::round_to_half_stochastic(-1e-30f, ~0ull))));
}

TEST_CASE("stochastic rounding is unbiased: the mean over many keys is the value", "[tensor][rounding]") {
    // With p the probability of rounding up, the mean of N roundings has standard deviation
    // ulp·sqrt(p(1 − p)/N) ≤ ulp/(2·sqrt(N)); the bound is five of those. Round-to-nearest, for
    // contrast, is off by up to half an ulp.
    constexpr std::uint64_t N = 100000;
    for (const float x : {1.0f + 1.0f / 4096, 1.37f, -2.71828f, 1000.3f, 1e-5f, 3e-8f, -0.2f}) {
        const auto [below, above] = neighbours(x);
        const double ulp = std::fabs(double(above) - double(below));
        double sum = 0;
        for (std::uint64_t k = 0; k < N; ++k) sum += tn::round_to_half_stochastic(x, tn::counter_bits(11, 5, k));
        const double mean = sum / N;
        INFO(x << ": mean " << mean << ", ulp " << ulp << ", round to nearest " << float(half(x)));
        CHECK(std::abs(mean - x) <= 5 * ulp / (2 * std::sqrt(double(N))));
    }
}

TEST_CASE("convert_stochastic stores what round_element gives each element, in every range, from any offset",
          "[tensor][rounding]") {
    // Values over every range the fast path and the general rounding split: normal halves, half
    // subnormals, float subnormals, zeros, the top binade up to and past 65520, infinities and NaN;
    // runs of each long enough to fill whole blocks of one kind, and mixed blocks.
    std::mt19937 gen(12);
    std::vector<float> values;
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-40, 16);
    for (int run = 0; run < 64; ++run)
        for (int i = 0; i < 700; ++i) {
            const float u = unit(gen);
            switch (run % 4) {
                case 0: values.push_back(std::ldexp(u, exponent(gen))); break;          // anything from 2^-41 up
                case 1: values.push_back(u * 3.0f); break;                                 // normal halves only
                case 2: values.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(gen()))); break;  // any bits
                default: values.push_back(i % 7 == 0 ? 0.0f : u * 65530.0f); break;     // zeros, the top binade
            }
        }
    values.insert(values.end(), {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                                 std::numeric_limits<float>::quiet_NaN(), 65519.0f, 65520.0f, -65504.0f, 6.1e-5f,
                                 -5.9e-8f, 1e-40f});
    const tn::rounding r{.stochastic = true, .seed = 21, .stream = 8};
    for (const std::size_t first : {std::size_t{0}, std::size_t{1000}}) {
        std::vector<half> got(values.size());
        tn::convert_stochastic(values.data(), got.data(), values.size(), r, first);
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < values.size(); ++i) {
            const half want = tn::round_element(values[i], r, first + i);
            if (std::isnan(values[i]))
                wrong += !std::isnan(static_cast<float>(got[i]));
            else
                wrong += got[i].bits() != want.bits();
        }
        CHECK(wrong == 0);
    }
    // Converting a tensor in two ranges (two threads) gives the bits of converting it whole.
    std::vector<half> whole(values.size()), parts(values.size());
    tn::convert_stochastic(values.data(), whole.data(), values.size(), r);
    const std::size_t cut = 12345;
    tn::convert_stochastic(values.data(), parts.data(), cut, r, 0);
    tn::convert_stochastic(values.data() + cut, parts.data() + cut, values.size() - cut, r, cut);
    for (std::size_t i = 0; i < values.size(); ++i)
        if (!std::isnan(values[i])) REQUIRE(whole[i].bits() == parts[i].bits());
}

TEST_CASE("bulk stochastic rounding with 32 random bits an element is unbiased too", "[tensor][rounding]") {
    // As above, over the elements of one stream: N elements of the same value, their mean.
    constexpr std::size_t N = 100000;
    const tn::rounding r{.stochastic = true, .seed = 2, .stream = 3};
    for (const float x : {1.0f + 1.0f / 4096, 1.37f, -2.71828f, 1000.3f, 1e-5f, 3e-8f, -0.2f}) {
        const auto [below, above] = neighbours(x);
        const double ulp = std::fabs(double(above) - double(below));
        const std::vector<float> same(N, x);
        std::vector<half> out(N);
        tn::convert_stochastic(same.data(), out.data(), N, r);
        double sum = 0;
        for (const half h : out) sum += static_cast<float>(h);
        const double mean = sum / N;
        INFO(x << ": mean " << mean << ", ulp " << ulp);
        CHECK(std::abs(mean - x) <= 5 * ulp / (2 * std::sqrt(double(N))));
    }
    // element_bits: each word matters, and about half the bits are set (32 · 4096 bits: σ ≈ 0.04).
    CHECK(tn::element_bits(1, 2) != tn::element_bits(1, 3));
    CHECK(tn::element_bits(1, 2) != tn::element_bits(std::uint64_t{1} << 32 | 1, 2));
    double ones = 0;
    for (std::uint32_t k = 0; k < 4096; ++k) ones += std::popcount(tn::element_bits(tn::counter_base(7, 0), k));
    CHECK(std::abs(ones / 4096 - 16.0) < 0.3);
}

}  // namespace test_stochastic_rounding
