// tessera::bfloat16 against exact double arithmetic over all 65,536 bit patterns and the rounding
// boundaries, and against AVX512-BF16's VCVTNEPS2BF16 where the CPU has it.
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "tessera/tensor/bfloat16.hpp"
#include "tessera/tensor/convert.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace test_bfloat16 {

namespace {

using tessera::bfloat16;
namespace detail = tessera::tensor::detail;

double reference_value(std::uint16_t bits) {
    const int e = (bits >> 7) & 0xFF;
    const int m = bits & 0x7F;
    const double magnitude = e == 0 ? std::ldexp(m, -133) : std::ldexp(128 + m, e - 134);
    return (bits & 0x8000) ? -magnitude : magnitude;
}

bool is_nan_bits(std::uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0; }

// Nearest bfloat16 of a finite float, ties to even, between the two neighbours that truncation gives.
std::uint16_t reference_round(float f) {
    const auto truncated = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(f) >> 16);
    const auto magnitude = static_cast<std::uint16_t>(truncated & 0x7FFF);
    const std::uint16_t sign = truncated & 0x8000;
    const double a = std::fabs(static_cast<double>(f));
    const double lo = reference_value(magnitude);
    const double hi = magnitude == 0x7F7F ? std::ldexp(1.0, 128) : reference_value(static_cast<std::uint16_t>(magnitude + 1));
    if (a - lo < hi - a) return truncated;
    if (hi - a < a - lo) return static_cast<std::uint16_t>(sign | (magnitude + 1));
    return (magnitude & 1) ? static_cast<std::uint16_t>(sign | (magnitude + 1)) : truncated;
}

std::vector<float> test_floats() {
    std::vector<float> out;
    for (std::uint32_t b = 0; b < 0x7F80; ++b) {  // every finite positive bfloat16 and the midpoint above it
        const std::uint32_t base = b << 16;
        for (std::uint32_t low : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
            out.push_back(std::bit_cast<float>(base | low));
            out.push_back(std::bit_cast<float>(base | low | 0x8000'0000u));
        }
    }
    std::mt19937 rng(7);
    std::uniform_int_distribution<std::uint32_t> any_bits;
    for (int i = 0; i < 300'000; ++i) out.push_back(std::bit_cast<float>(any_bits(rng)));
    return out;
}

}  // namespace

TEST_CASE("bfloat16 -> float is exact and the round trip keeps every bit pattern", "[tensor][bfloat16]") {
    for (std::uint32_t b = 0; b <= 0xFFFF; ++b) {
        const auto bits = static_cast<std::uint16_t>(b);
        const float f = bfloat16::from_bits(bits);
        if (is_nan_bits(bits)) {
            REQUIRE(std::isnan(f));
            REQUIRE(bfloat16(f).bits() == (bits | 0x40));  // quieted, sign and payload kept
        } else {
            if (!std::isinf(f)) REQUIRE(static_cast<double>(f) == reference_value(bits));
            REQUIRE(bfloat16(f).bits() == bits);
        }
    }
}

TEST_CASE("float -> bfloat16 rounds to nearest even, subnormals included", "[tensor][bfloat16]") {
    for (float f : test_floats()) {
        const std::uint16_t got = bfloat16(f).bits();
        INFO("float bits 0x" << std::hex << std::bit_cast<std::uint32_t>(f));
        if (std::isnan(f))
            REQUIRE(is_nan_bits(got));
        else if (std::isinf(f))
            REQUIRE(got == (std::signbit(f) ? 0xFF80 : 0x7F80));
        else
            REQUIRE(got == reference_round(f));
    }
    STATIC_REQUIRE(bfloat16(1.0f).bits() == 0x3F80);
    STATIC_REQUIRE(bfloat16(3.4e38f).bits() == 0x7F80);  // above the largest bfloat16 midpoint: infinity
    STATIC_REQUIRE(float(std::numeric_limits<bfloat16>::max()) == 3.3895313892515355e38f);
}

#if defined(__x86_64__)
__attribute__((target("avx512bf16,avx512vl"))) static std::uint16_t hardware_bf16(float f) {
    const __m128bh r = _mm_cvtneps_pbh(_mm_set1_ps(f));
    return static_cast<std::uint16_t>(_mm_extract_epi16(reinterpret_cast<const __m128i&>(r), 0));
}
#endif

TEST_CASE("AVX512-BF16 agrees with the conversion on normal inputs", "[tensor][bfloat16]") {
#if defined(__x86_64__)
    if (!__builtin_cpu_supports("avx512bf16")) {
        WARN("this CPU has no AVX512-BF16: nothing to compare");
        return;
    }
    for (float f : test_floats()) {
        // The instruction treats subnormal inputs as zero; tessera keeps them (they matter for gradients).
        if (std::fpclassify(f) == FP_SUBNORMAL) continue;
        INFO("float bits 0x" << std::hex << std::bit_cast<std::uint32_t>(f));
        REQUIRE(hardware_bf16(f) == bfloat16(f).bits());
    }
#else
    WARN("not an x86-64 build: no hardware conversion to compare");
#endif
}

TEST_CASE("bulk bfloat16 conversion matches the scalar one", "[tensor][bfloat16]") {
    std::vector<float> in{1.0f, -2.5f, 1e-40f, 3.0e38f, 0.1f};
    std::vector<bfloat16> b(in.size());
    tessera::tensor::convert(std::span<const float>(in), std::span<bfloat16>(b));
    std::vector<float> back(in.size());
    tessera::tensor::convert(std::span<const bfloat16>(b), std::span<float>(back));
    for (std::size_t i = 0; i < in.size(); ++i) {
        REQUIRE(b[i].bits() == bfloat16(in[i]).bits());
        REQUIRE(back[i] == float(b[i]));
    }
    REQUIRE_THROWS_AS(tessera::tensor::convert(std::span<const float>(in), std::span<bfloat16>(b).first(2)),
                      std::invalid_argument);
}

}  // namespace test_bfloat16
