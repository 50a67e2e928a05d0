#pragma once
// What each stage costs: FLOPs for the modelled clock, bytes for links and the memory plan.
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace tessera::exec {

/// Where a kind of tensor lives: In-Processor memory or off-chip Streaming Memory.
enum class location { on_chip, streaming_memory };

/// Where each kind of tensor lives (PopTorch's TensorLocationSettings). Off-chip tensors leave the
/// IPU's memory plan and cost modelled transfer time each time they are used.
struct tensor_locations {
    location weights = location::on_chip;                ///< streamed in for each forward and backward pass
    location optimiser_state = location::on_chip;        ///< read and written back at each update
    location gradient_accumulators = location::on_chip;  ///< read and written back at each backward pass
    location activations = location::on_chip;            ///< the stash: written by forward, read by backward
};

/// The figures of one stage for one micro-batch (weights: for the whole stage).
struct stage_cost {
    double forward_flops = 0;
    double backward_flops = 0;
    double update_flops = 0;
    std::size_t weight_bytes = 0;      ///< parameters (and the same again as gradient accumulators when training)
    std::size_t optimiser_bytes = 0;   ///< optimizer state (momentum, Adam moments)
    std::size_t input_bytes = 0;       ///< the stage's input per micro-batch (stage 0: what the host sends)
    std::size_t output_bytes = 0;      ///< its output per micro-batch (sent forward; its gradient comes back)
    std::size_t stash_bytes = 0;       ///< saved for the backward pass per micro-batch
    bool recompute = false;            ///< stash only the input and recompute the forward during backward
};

/// Per-stage costs plus the arithmetic width (16 for fp16 data, 32 for fp32).
struct cost_model {
    std::vector<stage_cost> stages;
    int bits = 32;
    std::size_t label_bytes = 0;  ///< per micro-batch, to the IPU that computes the loss
    std::size_t output_bytes_to_host = sizeof(float);  ///< outfeed per micro-batch (a loss when training)
    tensor_locations locations{};                      ///< phased schedules stream weights and stashes whatever this says

    /// Activations kept per stashed micro-batch: the input if recomputing, the stash otherwise.
    [[nodiscard]] std::size_t stashed_bytes(std::size_t stage) const {
        const auto& c = stages.at(stage);
        return c.recompute ? c.input_bytes : c.stash_bytes;
    }
    void check(std::size_t schedule_stages) const {
        if (stages.size() != schedule_stages)
            throw std::invalid_argument("tessera::exec::cost_model: costs for " + std::to_string(stages.size()) +
                                        " stages, the schedule has " + std::to_string(schedule_stages));
        if (bits != 16 && bits != 32)
            throw std::invalid_argument("tessera::exec::cost_model: bits must be 16 or 32, got " + std::to_string(bits));
    }
};

/// `stages` identical stages (a balanced pipeline), e.g. for the utilisation identity G / (G + S - 1).
[[nodiscard]] inline cost_model balanced_costs(std::size_t stages, stage_cost each, int bits = 32) {
    cost_model m;
    m.stages.assign(stages, each);
    m.bits = bits;
    return m;
}

}  // namespace tessera::exec
