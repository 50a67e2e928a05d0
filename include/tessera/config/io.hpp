#pragma once
// The type the host sends images in: float, half, or 8-bit with normalisation on the device.
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "tessera/config/policy.hpp"
#include "tessera/tensor/half.hpp"

namespace tessera::config {

/// Host → device image type. `io<std::uint8_t>` sends raw pixels (a quarter of float's bytes over
/// the host link) and the device normalises them into the compute precision.
template <class T>
struct io {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, tessera::half> || std::is_same_v<T, std::uint8_t>,
                  "tessera::config::io<T>: the host sends float, tessera::half or std::uint8_t (8-bit I/O)");
    using policy_category = category::io;
    using type = T;
    static constexpr bool is_eight_bit = std::is_same_v<T, std::uint8_t>;
    static constexpr std::size_t bytes_per_value = sizeof(T);
};

using float_io = io<float>;
using eight_bit_io = io<std::uint8_t>;

}  // namespace tessera::config
