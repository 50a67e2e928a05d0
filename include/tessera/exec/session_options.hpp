#pragma once
// The settings of a session that are not policies: the device, the host, reports, stage cuts.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <vector>

#include "tessera/emulator/device_spec.hpp"
#include "tessera/emulator/host_clock.hpp"
#include "tessera/emulator/host_spec.hpp"
#include "tessera/exec/cost.hpp"
#include "tessera/exec/cross_process.hpp"
#include "tessera/exec/run_result.hpp"

namespace tessera::exec {

/// Settings of a session that are not policies.
struct session_options {
    emulator::device_spec device{};       ///< the emulated IPU's figures
    std::ostream* progress = nullptr;     ///< where the "Graph compilation" bar goes (none by default)
    bool record_trace = true;             ///< keep the modelled clocks' intervals (timeline reports)
    tensor_locations locations{};         ///< on chip or in Streaming Memory, per kind of tensor
    /// Tiles of each IPU set aside for host I/O (PopTorch's opts.TensorLocations.numIOTiles with
    /// inputs and outputs set to overlap): inputs stream in and outputs out while the other tiles
    /// compute. 0: host transfers stop the IPU's compute.
    std::size_t io_tiles = 0;
    /// The type of convolutions' and matrix products' partial sums with 16-bit data (PopTorch's
    /// opts.Precision.setPartialsType): float, the default, or half, at twice the AMP rate and half
    /// the temporary memory. The modelled clock and the memory plan use it; the emulator's kernels sum
    /// in float either way, so results do not change.
    emulator::partials_type partials = emulator::partials_type::float32;
    /// The share of each tile's memory a convolution or matrix product may take for its temporaries
    /// (PopTorch's opts.setAvailableMemoryProportion; poplibs' default 0.6): each pass's plan is the
    /// fastest whose busiest tile's temporaries fit it, or where none does the one with the least.
    /// The modelled clock and the memory plan use it (the fullest tile holds the largest pass's
    /// temporaries); results do not change.
    double available_memory_proportion = emulator::default_available_memory_proportion;
    /// One share per IPU of a replica, where they differ (PopTorch's
    /// setAvailableMemoryProportion({"IPU0": 0.15, "IPU1": 0.25, ...}), as Graphcore's BERT gave
    /// them); empty: available_memory_proportion on every IPU.
    std::vector<double> ipu_available_memory_proportion{};
    /// Pipelines run in lock-step pipeline cycles, as Poplar runs them: each cycle every IPU runs its
    /// passes, then all of them synchronise and exchange, and the gradients are reduced and the
    /// weights updated after the last cycle. The modelled clock charges the cycles (a call's clocks
    /// are the replay a dry run makes); the IPU threads themselves do not wait for each other, so
    /// wall time is dataflow's. false: asynchronous dataflow on the modelled clock too, each pass as
    /// soon as its inputs arrive (a what-if: results are the same either way).
    bool lock_step = true;
    cross_process_reduction across{};     ///< instances > 1: the reduction across processes (tessera::dist)
    std::vector<std::size_t> first_units{};  ///< networks: the first unit of each stage (PopTorch's block
                                              ///< marks); empty = balanced automatically by FLOPs
    std::vector<bool> recompute{};  ///< networks: per stage, recompute the forward during backward instead of
                                    ///< stashing activations (PopTorch's RecomputeAll); empty = none
    /// Networks: units whose input is a recomputation checkpoint (PopTorch's recomputationCheckpoint):
    /// a stage holding one stashes its input and checkpoints and recomputes one segment between them
    /// at a time during backward (staged_network::set_recompute_checkpoints); the same results.
    std::vector<std::size_t> recompute_checkpoints{};
    std::size_t kernel_threads_per_ipu = 1;  ///< networks: threads for each IPU's kernels (more cores than
                                             ///< IPUs); results are the same as with one
    std::optional<output_selection> outputs{};  ///< the output mode at run time, instead of the config's (tools)
    std::optional<double> loss_scale{};      ///< networks: the (initial) loss scale, instead of the config's
    /// Networks: dynamic loss scaling (the overflow vote, skipped steps) on or off, instead of the
    /// config's; dynamic takes dynamic_loss_scaling<>'s factor and interval (tools: one type, two modes).
    std::optional<bool> dynamic_loss_scaling{};
    /// Training with replicas: each replica keeps the optimiser state of 1/replicas of the weights and
    /// updates those, the all-reduce becoming a reduce-scatter and an all-gather (PopTorch's replicated
    /// tensor sharding of the optimiser state, ZeRO stage 1). The weights are bit-identical to a run
    /// without; the memory plan holds 1/replicas of the state per IPU. Needs a ShardedOptimizerModel.
    bool optimizer_sharding = false;
    /// Networks with 16-bit activations: round activations and activation gradients to half
    /// stochastically in training, as the IPU does with stochastic rounding on, the bits keyed by this
    /// seed, the replica, the step and the micro-batch (exec::micro_batch_rounding), so every strategy
    /// draws the same. The optimiser's own option (optim::weight_rounding) rounds the weights.
    /// Needs a StochasticRoundingModel; none: round to nearest.
    std::optional<std::uint64_t> stochastic_rounding{};
    /// Networks with dropout: the seed of its masks, which are keyed besides by the step, the layer and
    /// each sample's place in the step's combined batch (staged_network::set_dropout), so every
    /// strategy, replica count and thread count draws the same.
    std::uint64_t dropout_seed = 0;
    emulator::host_spec host{};              ///< the host on the modelled clock (run_result::host)
    emulator::host_loading loading{};        ///< how it loads: sync or async, workers, prefetch depth
};

}  // namespace tessera::exec
