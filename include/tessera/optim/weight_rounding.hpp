#pragma once
// How an optimiser stores an updated 16-bit weight: round to nearest, or stochastically as the IPU
// does with stochastic rounding on (an update smaller than half a unit in the last place moves the
// weight in expectation instead of vanishing).
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/simd.hpp"
#include "tessera/tensor/half.hpp"
#include "tessera/tensor/stochastic_rounding.hpp"

namespace tessera::optim {

/// The rounding of updated weights stored in 16 bits; fp32 weights are stored exactly either way.
/// With `stochastic`, element k of the parameter named n at optimiser step t draws its bits from
/// tensor::counter_bits(seed, detail::rounding_stream(n, t), k): the same on every replica, every
/// pipeline stage and every thread count, so replicas keep equal weights and every strategy stays
/// bit-identical to the sequential run (replicas that rounded their copies differently would drift
/// apart).
struct weight_rounding {
    bool stochastic = false;
    std::uint64_t seed = 0;
};

namespace detail {

/// FNV-1a over a parameter's name: which stream of random bits its elements use.
[[nodiscard]] constexpr std::uint64_t name_hash(std::string_view name) noexcept {
    std::uint64_t h = 0xCBF29CE484222325ull;
    for (const char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
    return h;
}

/// The stream of parameter `name` at optimiser step `step`.
[[nodiscard]] constexpr std::uint64_t rounding_stream(std::string_view name, std::uint64_t step) noexcept {
    return tensor::mix64(name_hash(name) ^ tensor::mix64(step));
}

/// Stores updated value `v` of element `k` as a `W`: round to nearest, or stochastically for 16-bit
/// weights when `r.stochastic` (stream from rounding_stream).
template <class W>
[[nodiscard]] inline W store_weight(float v, const weight_rounding& r, std::uint64_t stream, std::size_t k) noexcept {
    if constexpr (std::is_same_v<W, tensor::half>) {
        if (r.stochastic) return tensor::round_to_half_stochastic(v, tensor::counter_bits(r.seed, stream, k));
    }
    return kernels::detail::store_as<W>(v);
}

/// Runs f.template operator()<V>(k) for the elements k in [from, to) of a parameter stored as W with
/// gradients stored as G: V a batch of float lanes over whole batches where both load into registers
/// (kernels::simd::in_register) and the weights round to nearest, then V = float one element at a
/// time; everywhere else, one element at a time. f computes each element's update in fp32 with the
/// same operations in every lane as on a scalar, so the bits do not depend on where the batches fall.
template <class W, class G, class F>
inline void over_updates(std::size_t from, std::size_t to, const weight_rounding& r, F&& f) {
    if constexpr (kernels::simd::in_register<float, W> && kernels::simd::in_register<float, G>) {
        kernels::simd::over_elements<float>(from, to, !(std::is_same_v<W, tensor::half> && r.stochastic), f);
    } else {
        for (std::size_t k = from; k < to; ++k) f.template operator()<float>(k);
    }
}

/// Stores updated values v (a batch from over_updates, or one value) at p, element k first:
/// store_weight's rounding.
template <class W, class V>
inline void store_weights(W* p, const V& v, const weight_rounding& r, std::uint64_t stream, std::size_t k) noexcept {
    if constexpr (std::is_arithmetic_v<V>)
        *p = store_weight<W>(v, r, stream, k);
    else
        kernels::simd::store_lanes(p, v);  // fp32, or 16 bits to nearest: over_updates's batches
}

}  // namespace detail
}  // namespace tessera::optim
