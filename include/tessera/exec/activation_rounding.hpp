#pragma once
// Which random bits the 16-bit activations and activation gradients of a training step round with,
// when they round stochastically (session_options::stochastic_rounding): a stream per micro-batch,
// keyed by what identifies it in every strategy alike (seed, replica, step, micro-batch), never by a
// stage, an IPU or a thread. A network gives each unit child(u) of it (nn::context::child), so a
// pipeline stage draws the bits the whole network run sequentially draws.
#include <cstdint>

#include "tessera/tensor/stochastic_rounding.hpp"

namespace tessera::exec {

/// The rounding of micro-batch `micro_batch` of replica `replica` (counted over every process) at
/// optimiser step `step` (steps taken, skipped ones included) under `seed`.
[[nodiscard]] constexpr tensor::rounding micro_batch_rounding(std::uint64_t seed, std::uint64_t replica,
                                                              std::uint64_t step, std::uint64_t micro_batch) noexcept {
    constexpr std::uint64_t golden = 0x9E3779B97F4A7C15ull;
    const std::uint64_t stream = tensor::mix64(tensor::mix64(tensor::mix64(replica + golden) ^ (step + 2 * golden)) ^
                                               (micro_batch + 3 * golden));
    return {true, seed, stream};
}

/// The rounding of the loss gradient (d loss / d logits) of a micro-batch: a part of its stream no
/// unit uses (units take child(0), child(1), ...).
[[nodiscard]] constexpr tensor::rounding loss_gradient_rounding(const tensor::rounding& micro_batch) noexcept {
    return micro_batch.child(~std::uint64_t{1});
}

/// The rounding of the input a micro-batch's first stage normalises from 8-bit pixels on the IPU.
[[nodiscard]] constexpr tensor::rounding input_rounding(const tensor::rounding& micro_batch) noexcept {
    return micro_batch.child(~std::uint64_t{2});
}

}  // namespace tessera::exec
