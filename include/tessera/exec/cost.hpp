#pragma once
// What each stage costs: its passes (or FLOPs) for the modelled clock, bytes for links and the memory plan.
#include <algorithm>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/emulator/available_memory.hpp"
#include "tessera/emulator/partials.hpp"
#include "tessera/nn/cost.hpp"

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

/// The figures of one stage for one micro-batch (weights: for the whole stage). The modelled clock
/// charges the passes through emulator::pass_model when a stage lists them (a prediction), and the
/// FLOPs at the IPU's peak rate when it does not (a bound, for models that describe no passes).
struct stage_cost {
    double forward_flops = 0;
    double backward_flops = 0;
    double update_flops = 0;
    std::vector<nn::pass> forward_passes{};   ///< the forward pass's layer passes (the last stage: with the loss)
    std::vector<nn::pass> backward_passes{};  ///< the backward pass's
    std::size_t update_bytes = 0;      ///< bytes the optimizer step reads and writes (weights, gradients, state);
                                       ///< charged as a 32-bit vector pass when non-zero, else update_flops
    std::size_t weight_bytes = 0;      ///< parameters in their storage type
    std::size_t gradient_bytes = 0;    ///< gradient accumulators (what the all-reduce moves); 0: as weight_bytes
    std::size_t optimiser_bytes = 0;   ///< optimizer state (momentum, Adam moments)
    std::size_t parameters = 0;        ///< the parameters weight_bytes, gradient_bytes and optimiser_bytes hold
    /// Of `parameters`, those of each copy of a tied table (a transformer's embedding and head) the
    /// stage holds, and how many copies it holds: two copies on one IPU are one table there, held
    /// once (exec::lay_out_memory).
    std::size_t tied_parameters = 0, tied_copies = 0;
    std::size_t input_bytes = 0;       ///< the stage's input per micro-batch (stage 0: what the host sends)
    std::size_t output_bytes = 0;      ///< its output per micro-batch (sent forward; its gradient comes back)
    std::size_t stash_bytes = 0;       ///< saved for the backward pass per micro-batch
    bool recompute = false;            ///< stash only the input and recompute the forward during backward
    /// recompute: bytes of the recomputation checkpoints inside the stage (PopTorch's
    /// recomputationCheckpoint), stashed per micro-batch beside the input; 0: none.
    std::size_t checkpoint_bytes = 0;
    /// recompute: the largest stash between two checkpoints, what recomputing holds at once; 0: stash_bytes.
    std::size_t segment_bytes = 0;
    /// recompute: the model's stash holds the input and the checkpoints and its backward recomputes
    /// from them (staged_network); false: the executor keeps the input and calls recompute(s, x).
    bool model_recomputes = false;
    /// The largest unit's input and activations: what a forward that keeps nothing for a backward
    /// (inference) holds at once, its buffers freed unit by unit; 0: stash_bytes.
    std::size_t unit_peak_bytes = 0;

    /// Gradient accumulators' bytes (gradient_bytes, or weight_bytes when not given).
    [[nodiscard]] std::size_t accumulator_bytes() const noexcept { return gradient_bytes ? gradient_bytes : weight_bytes; }
    /// Activations kept per stashed micro-batch: the input and checkpoints if recomputing, the stash otherwise.
    [[nodiscard]] std::size_t stashed_bytes() const noexcept { return recompute ? input_bytes + checkpoint_bytes : stash_bytes; }
    /// Activations a forward or a backward of one micro-batch holds while it runs: the stash, or when
    /// recomputing between checkpoints its largest segment's; at least the output.
    [[nodiscard]] std::size_t working_bytes() const noexcept {
        return std::max(output_bytes, recompute && segment_bytes > 0 ? segment_bytes : stash_bytes);
    }
    /// Activations an inference forward of one micro-batch holds while it runs.
    [[nodiscard]] std::size_t inference_working_bytes() const noexcept {
        return std::max(output_bytes, unit_peak_bytes > 0 ? unit_peak_bytes : stash_bytes);
    }
};

/// Per-stage costs plus the arithmetic width (16 for fp16 data, 32 for fp32) and the host I/O.
struct cost_model {
    std::vector<stage_cost> stages;
    int bits = 32;
    /// The type of contractions' partial sums with 16-bit data (session_options::partials).
    emulator::partials_type partials = emulator::partials_type::float32;
    /// The share of a tile's memory contractions may take for temporaries (session_options::available_memory_proportion).
    double available_memory_proportion = emulator::default_available_memory_proportion;
    /// Each stage's share, where its IPU has its own (session_options::ipu_available_memory_proportion);
    /// empty: available_memory_proportion for every stage.
    std::vector<double> stage_available_memory_proportion{};
    std::size_t label_bytes = 0;  ///< per micro-batch, to the IPU that computes the loss
    /// Per micro-batch over the host link to stage 0 (8-bit I/O: one byte per value); unset: stage 0's input_bytes.
    std::optional<std::size_t> infeed_bytes{};
    std::vector<nn::pass> infeed_passes{};             ///< what the IPU runs on each input it receives (8-bit I/O: normalisation)
    /// Outfeed per micro-batch the output mode sends (training: its loss and score; inference: its output).
    std::size_t output_bytes_to_host = sizeof(float);
    std::size_t io_bytes_per_value = 0;                ///< bytes the host sends per input value (0: unknown)
    tensor_locations locations{};                      ///< phased schedules stream weights and stashes whatever this says
    /// Tiles set aside for host I/O (session_options::io_tiles): host transfers overlap compute,
    /// which runs on the other tiles; 0: transfers stop the IPU.
    std::size_t io_tiles = 0;
    std::size_t processes = 1;                         ///< host processes whose replicas reduce gradients together
    /// processes > 1: bytes/s between the processes' hosts when gradients meet through them; 0: they
    /// meet over IPU-Links (one IPU-POD), in the ring of all replicas.
    double host_network_bandwidth = 0;

    [[nodiscard]] std::size_t host_input_bytes() const {
        return infeed_bytes.value_or(stages.empty() ? 0 : stages.front().input_bytes);
    }

    /// The available memory proportion stage `stage`'s passes are planned with.
    [[nodiscard]] double available_memory_proportion_of(std::size_t stage) const {
        return stage_available_memory_proportion.empty() ? available_memory_proportion
                                                         : stage_available_memory_proportion.at(stage);
    }
    /// Activations kept per stashed micro-batch of `stage` (stage_cost::stashed_bytes).
    [[nodiscard]] std::size_t stashed_bytes(std::size_t stage) const { return stages.at(stage).stashed_bytes(); }
    void check(std::size_t schedule_stages) const {
        if (stages.size() != schedule_stages)
            throw std::invalid_argument("tessera::exec::cost_model: costs for " + std::to_string(stages.size()) +
                                        " stages, the schedule has " + std::to_string(schedule_stages));
        if (bits != 16 && bits != 32)
            throw std::invalid_argument("tessera::exec::cost_model: bits must be 16 or 32, got " + std::to_string(bits));
        if (!stage_available_memory_proportion.empty() && stage_available_memory_proportion.size() != stages.size())
            throw std::invalid_argument("tessera::exec::cost_model: " + std::to_string(stage_available_memory_proportion.size()) +
                                        " available memory proportions for " + std::to_string(stages.size()) + " stages");
        for (std::size_t s = 0; s <= stage_available_memory_proportion.size(); ++s) {
            const double amp = s == stage_available_memory_proportion.size() ? available_memory_proportion
                                                                            : stage_available_memory_proportion[s];
            if (!(amp >= 0 && amp <= 1))
                throw std::invalid_argument("tessera::exec::cost_model: the available memory proportion must be in [0, 1], got " +
                                            std::to_string(amp));
        }
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
