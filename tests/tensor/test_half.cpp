// tessera::half against an independent reference (exact double arithmetic), over all 65,536 bit
// patterns, the rounding boundaries between every pair of neighbours, and random floats; and the
// portable conversion against the CPU's F16C instructions where the CPU has them.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "tessera/tensor/convert.hpp"
#include "tessera/tensor/half.hpp"

namespace test_half {

namespace {

using tessera::half;
namespace detail = tessera::tensor::detail;

// binary16 value by definition: (-1)^s * 2^(e-15) * 1.m, or 2^-14 * 0.m for e == 0.
double reference_value(std::uint16_t bits) {
    const int e = (bits >> 10) & 0x1F;
    const int m = bits & 0x3FF;
    const double magnitude = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
    return (bits & 0x8000) ? -magnitude : magnitude;
}

// Nearest binary16 to a finite float, ties to the even mantissa, by search over all finite halves.
std::uint16_t reference_round(float f) {
    static const std::vector<double> positives = [] {
        std::vector<double> v;
        for (std::uint16_t b = 0; b <= 0x7BFF; ++b) v.push_back(reference_value(b));
        return v;
    }();
    const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    const double a = std::fabs(static_cast<double>(f));
    if (a >= 65520.0) return sign | 0x7C00;
    const auto hi = std::lower_bound(positives.begin(), positives.end(), a);
    if (hi == positives.end()) return sign | 0x7BFF;
    auto hi_bits = static_cast<std::uint16_t>(hi - positives.begin());
    if (*hi == a || hi_bits == 0) return sign | hi_bits;
    const auto lo_bits = static_cast<std::uint16_t>(hi_bits - 1);
    const double up = *hi - a, down = a - positives[lo_bits];
    if (up < down) return sign | hi_bits;
    if (down < up) return sign | lo_bits;
    return sign | ((lo_bits & 1) ? hi_bits : lo_bits);
}

bool is_nan_bits(std::uint16_t b) { return (b & 0x7C00) == 0x7C00 && (b & 0x3FF) != 0; }

// Floats around every rounding boundary: each half value and each midpoint, one float ulp either side.
std::vector<float> boundary_floats() {
    std::vector<float> out;
    for (std::uint16_t b = 0; b < 0x7C00; ++b) {
        const double here = reference_value(b);
        const double next = b == 0x7BFF ? 65536.0 : reference_value(static_cast<std::uint16_t>(b + 1));
        for (double centre : {here, (here + next) / 2}) {
            const auto c = static_cast<float>(centre);  // exact: both fit in 24 bits
            for (float f : {std::nextafter(c, 0.0f), c, std::nextafter(c, 1e30f)}) {
                out.push_back(f);
                out.push_back(-f);
            }
        }
    }
    return out;
}

std::vector<float> random_floats(std::size_t n) {
    std::mt19937 rng(20261121);
    std::vector<float> out;
    std::uniform_int_distribution<std::uint32_t> any_bits;
    std::uniform_real_distribution<float> in_range(-70000.0f, 70000.0f);
    for (std::size_t i = 0; i < n; ++i) {
        out.push_back(std::bit_cast<float>(any_bits(rng)));
        out.push_back(in_range(rng));
        out.push_back(std::ldexp(in_range(rng), -20));  // subnormal territory
    }
    return out;
}

}  // namespace

TEST_CASE("half -> float is exact for all 65,536 bit patterns", "[tensor][half]") {
    for (std::uint32_t b = 0; b <= 0xFFFF; ++b) {
        const auto bits = static_cast<std::uint16_t>(b);
        const float f = detail::half_bits_to_float_portable(bits);
        if (is_nan_bits(bits)) {
            REQUIRE(std::isnan(f));
            REQUIRE(std::signbit(f) == bool(bits & 0x8000));
        } else if ((bits & 0x7FFF) == 0x7C00) {
            REQUIRE(std::isinf(f));
            REQUIRE(std::signbit(f) == bool(bits & 0x8000));
        } else {
            REQUIRE(static_cast<double>(f) == reference_value(bits));
            REQUIRE(std::signbit(f) == bool(bits & 0x8000));  // -0 stays -0
        }
    }
}

TEST_CASE("half round trip keeps every bit pattern; signalling NaNs come back quiet", "[tensor][half]") {
    for (std::uint32_t b = 0; b <= 0xFFFF; ++b) {
        const auto bits = static_cast<std::uint16_t>(b);
        const std::uint16_t back = detail::float_to_half_bits_portable(detail::half_bits_to_float_portable(bits));
        const std::uint16_t expected = is_nan_bits(bits) ? static_cast<std::uint16_t>(bits | 0x200) : bits;
        REQUIRE(back == expected);
        REQUIRE(half(static_cast<float>(half::from_bits(bits))).bits() == expected);  // the class, whatever path it compiled to
    }
}

TEST_CASE("float -> half rounds to nearest even at every boundary and on random floats", "[tensor][half]") {
    auto inputs = boundary_floats();
    const auto more = random_floats(300'000);
    inputs.insert(inputs.end(), more.begin(), more.end());
    for (float f : inputs) {
        const std::uint16_t got = detail::float_to_half_bits_portable(f);
        if (std::isnan(f)) {
            REQUIRE(is_nan_bits(got));
            continue;
        }
        if (std::isinf(f)) {
            REQUIRE(got == (std::signbit(f) ? 0xFC00 : 0x7C00));
            continue;
        }
        INFO("float " << f << " bits 0x" << std::hex << std::bit_cast<std::uint32_t>(f));
        REQUIRE(got == reference_round(f));
    }
}

TEST_CASE("half special values and limits", "[tensor][half]") {
    STATIC_REQUIRE(half(1.0f).bits() == 0x3C00);
    STATIC_REQUIRE(half(-2.0f).bits() == 0xC000);
    STATIC_REQUIRE(half(65504.0f).bits() == 0x7BFF);
    STATIC_REQUIRE(half(65519.99f).bits() == 0x7BFF);
    STATIC_REQUIRE(half(65520.0f).bits() == 0x7C00);
    STATIC_REQUIRE(half(5.9604644775390625e-8f).bits() == 0x0001);  // 2^-24, the smallest subnormal
    STATIC_REQUIRE(half(2.98023223876953125e-8f).bits() == 0x0000);  // 2^-25 ties to even: zero
    STATIC_REQUIRE(half(-0.0f).bits() == 0x8000);
    STATIC_REQUIRE(float(std::numeric_limits<half>::max()) == 65504.0f);
    STATIC_REQUIRE(float(std::numeric_limits<half>::epsilon()) == 0.0009765625f);
    STATIC_REQUIRE(float(std::numeric_limits<half>::min()) == 6.103515625e-05f);
    REQUIRE(std::isnan(float(std::numeric_limits<half>::quiet_NaN())));
    REQUIRE(float(half(0.1f)) == 0.0999755859375f);
}

TEST_CASE("the F16C instructions agree with the portable conversion", "[tensor][half]") {
#if TESSERA_X86_DISPATCH
    if (!detail::cpu_has_f16c()) {
        WARN("this CPU has no F16C: nothing to compare");
        return;
    }
    std::vector<std::uint16_t> all(65536);
    for (std::uint32_t b = 0; b <= 0xFFFF; ++b) all[b] = static_cast<std::uint16_t>(b);
    std::vector<float> hw(all.size());
    detail::half_to_float_f16c(all.data(), hw.data(), all.size());
    for (std::uint32_t b = 0; b <= 0xFFFF; ++b)
        REQUIRE(std::bit_cast<std::uint32_t>(hw[b]) ==
                std::bit_cast<std::uint32_t>(detail::half_bits_to_float_portable(all[b])));

    auto inputs = boundary_floats();
    const auto more = random_floats(300'000);
    inputs.insert(inputs.end(), more.begin(), more.end());
    for (std::uint64_t b = 0; b <= 0xFFFF'FFFFu; b += 4099) inputs.push_back(std::bit_cast<float>(std::uint32_t(b)));
    std::vector<std::uint16_t> out(inputs.size());
    detail::float_to_half_f16c(inputs.data(), out.data(), inputs.size());
    for (std::size_t i = 0; i < inputs.size(); ++i) {
        INFO("float bits 0x" << std::hex << std::bit_cast<std::uint32_t>(inputs[i]));
        REQUIRE(out[i] == detail::float_to_half_bits_portable(inputs[i]));
    }
#else
    WARN("not an x86-64 build: no hardware conversion to compare");
#endif
}

TEST_CASE("bulk half conversion matches the scalar one on odd sizes and checks sizes", "[tensor][half]") {
    for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 31u, 1000u}) {
        std::vector<float> in(n);
        for (std::size_t i = 0; i < n; ++i) in[i] = 0.37f * static_cast<float>(i) - 11.0f;
        std::vector<half> h(n);
        tessera::tensor::convert(std::span<const float>(in), std::span<half>(h));
        std::vector<float> back(n);
        tessera::tensor::convert(std::span<const half>(h), std::span<float>(back));
        for (std::size_t i = 0; i < n; ++i) {
            REQUIRE(h[i].bits() == detail::float_to_half_bits_portable(in[i]));
            REQUIRE(back[i] == detail::half_bits_to_float_portable(h[i].bits()));
        }
    }
    std::vector<float> three(3);
    std::vector<half> two(2);
    REQUIRE_THROWS_WITH(tessera::tensor::convert(std::span<const float>(three), std::span<half>(two)),
                        Catch::Contains("source has 3 elements, destination 2"));
}

}  // namespace test_half
