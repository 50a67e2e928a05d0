#pragma once
// The type an IPU keeps a contraction's partial sums in (PopTorch's opts.Precision.setPartialsType).
#include <cstdint>

namespace tessera::emulator {

/// The type of the partial sums of convolutions and matrix products with 16-bit data. float32 is
/// poplibs' and PopTorch's default (ConvOptions.hpp, MatMul.cpp: partialsType = FLOAT); float16 is
/// what Graphcore's ResNet-50 configurations choose (configs.yml: half_partial: true), for twice the
/// AMP rate and half the temporary memory. 32-bit data always sums in float.
enum class partials_type : std::uint8_t { float32, float16 };

[[nodiscard]] constexpr const char* to_string(partials_type p) noexcept {
    return p == partials_type::float16 ? "half" : "float";
}

/// Bytes of one partial sum of `bits`-bit data.
[[nodiscard]] constexpr double partial_bytes(int bits, partials_type p) noexcept {
    return bits == 16 && p == partials_type::float16 ? 2.0 : 4.0;
}

}  // namespace tessera::emulator
