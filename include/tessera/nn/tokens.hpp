#pragma once
// Token ids in an activation: each id kept in an element's bits, which no path rounds.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "tessera/nn/layer.hpp"

namespace tessera::nn {

/// The ids an element of storage type T carries: 2^16 in a 16-bit element (half, bfloat16), 2^32 in a
/// float or a double. A 16.16 run's half would hold integers exactly only up to 2,048 as values;
/// as bits it holds every id of a 65,536-token vocabulary (GPT-2's 50,257 among them).
template <kernels::Storage T>
inline constexpr std::uint64_t token_capacity = sizeof(T) >= 4 ? (std::uint64_t{1} << 32) : (std::uint64_t{1} << (8 * sizeof(T)));

/// The element whose bits are `id` (std::out_of_range when id does not fit T: token_capacity).
/// A sequence of tokens enters a network as an N × 1 × T × 1 activation of such elements; they are
/// copied between host, stages and layers, never computed on, so every id arrives as it left.
template <kernels::Storage T>
[[nodiscard]] T token_element(std::uint64_t id) {
    if (id >= token_capacity<T>)
        throw std::out_of_range("tessera::nn::token_element: token " + std::to_string(id) + " does not fit a " +
                                std::to_string(8 * sizeof(T)) + "-bit element (ids below " +
                                std::to_string(token_capacity<T>) + ")");
    if constexpr (std::is_same_v<T, tensor::half>)
        return tensor::half::from_bits(static_cast<std::uint16_t>(id));
    else if constexpr (sizeof(T) == 2)
        return std::bit_cast<T>(static_cast<std::uint16_t>(id));
    else if constexpr (sizeof(T) == 4)
        return std::bit_cast<T>(static_cast<std::uint32_t>(id));
    else
        return std::bit_cast<T>(static_cast<std::uint64_t>(id));
}

/// The id an element made by token_element carries.
template <kernels::Storage T>
[[nodiscard]] std::uint32_t token_id(const T& e) noexcept {
    if constexpr (sizeof(T) == 2)
        return std::bit_cast<std::uint16_t>(e);
    else if constexpr (sizeof(T) == 4)
        return std::bit_cast<std::uint32_t>(e);
    else
        return static_cast<std::uint32_t>(std::bit_cast<std::uint64_t>(e));
}

/// `samples` sequences of `length` ids (row after row) as the N × 1 × T × 1 activation a token
/// embedding reads.
template <Numeric P, class Id>
[[nodiscard]] activation<P> token_activation(std::span<const Id> ids, std::size_t samples, std::size_t length) {
    static_assert(std::is_integral_v<Id>, "tessera::nn::token_activation: token ids are integers");
    if (ids.size() != samples * length)
        throw tensor::shape_error("tessera::nn::token_activation: " + std::to_string(ids.size()) + " ids for " +
                                  std::to_string(samples) + " sequences of " + std::to_string(length));
    auto a = tensor::make_nhwc<typename P::data_type>({samples, 1, length, 1});
    for (std::size_t i = 0; i < ids.size(); ++i) {
        if constexpr (std::is_signed_v<Id>)
            if (ids[i] < 0)
                throw std::out_of_range("tessera::nn::token_activation: token " + std::to_string(ids[i]) +
                                        " at " + std::to_string(i) + " is negative");
        a.data()[i] = token_element<typename P::data_type>(static_cast<std::uint64_t>(ids[i]));
    }
    return a;
}

}  // namespace tessera::nn
