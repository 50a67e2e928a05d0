#pragma once
// Graph compilation without threads: the schedule and cost model a config makes of a staged model.
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "tessera/config/batching.hpp"
#include "tessera/config/config.hpp"
#include "tessera/config/description.hpp"
#include "tessera/config/error.hpp"
#include "tessera/exec/concepts.hpp"
#include "tessera/exec/cost.hpp"
#include "tessera/exec/cross_process.hpp"
#include "tessera/exec/schedule.hpp"
#include "tessera/exec/session_options.hpp"
#include "tessera/exec/staged_network.hpp"

namespace tessera::exec {

/// What graph compilation makes of a model: one replica's program, its costs, and the reduction
/// across processes (instances > 1).
struct compiled_plan {
    schedule program;
    cost_model costs;
    cross_process_reduction across;
};

/// What crosses the host link per micro-batch, as configuration `c`'s I/O policy sends it: the input
/// at its bytes per value (8-bit I/O: one, and the first IPU normalises it; float I/O to a 16-bit
/// model: four, and the IPU casts), class labels as 32-bit integers, and per micro-batch the output
/// mode sends, a loss and an accuracy (training) or the output (inference).
template <StagedModel M>
void describe_host_io(cost_model& costs, const config::batching& b, const config::description& c) {
    const double values = double(costs.stages.front().input_bytes) / (c.storage_bits / 8.0);
    costs.io_bytes_per_value = c.io_bytes_per_value;
    costs.infeed_bytes = static_cast<std::size_t>(values) * c.io_bytes_per_value;
    if (c.eight_bit_io || c.io_bytes_per_value * 8 != std::size_t(c.storage_bits))
        costs.infeed_passes.push_back(nn::pass::elementwise(nn::pass_phase::forward, values, 2));
    if (c.training && std::is_same_v<typename M::label, class_labels>) costs.label_bytes = b.micro_batch * sizeof(std::int32_t);
    costs.output_bytes_to_host = sizeof(float) * (ScoredModel<M> ? 2 : 1);
}

/// What a plan is compiled for: running (a multi-process config then needs its cross-process
/// reduction) or a dry run (nothing is computed, so none is needed).
enum class compile_for { execution, dry_run };

/// Compiles `model` for the configuration `c` describes and batching `b`: checks the strategy against
/// the model, makes the schedule (R replicas over all processes, the overflow vote of dynamic loss
/// scaling) and the cost model. `progress()` is called once per step (sessions draw the "Graph
/// compilation" bar with it). Sessions and dry runs compile through here, so a dry run costs exactly
/// what a session would run.
template <StagedModel M, class Progress = void (*)()>
[[nodiscard]] compiled_plan compile_plan(const config::description& c, const M& model, const config::batching& b,
                                         const session_options& settings, Progress progress = [] {},
                                         compile_for purpose = compile_for::execution) {
    const std::size_t stages = b.stages;
    if (model.stages() != stages)
        throw config::config_error("tessera::exec::session: the strategy has " + std::to_string(stages) +
                                   " stages, the model " + std::to_string(model.stages()));
    const std::size_t micro_batches = c.training ? b.gradient_accumulation : b.device_iterations;
    compiled_plan plan;
    plan.across = settings.across;
    if (b.instances > 1 && !plan.across.reduce && purpose == compile_for::execution)
        throw config::config_error("tessera::exec::session: " + std::to_string(b.instances) +
                                   " instances need a cross-process reduction (session_options::across, from "
                                   "tessera::dist); without one the replicas of different processes would diverge");
    if (plan.across.reduce || purpose == compile_for::dry_run) plan.across.processes = b.instances;
    schedule_request request = request_for(c, micro_batches, b.local_replicas() * plan.across.processes, b.ipu_of_stage);
    if (c.strategy == config::strategy_kind::pipelined && b.virtual_stages > 1) {  // run-time chunks per IPU
        request.order = detail::order_of(c.schedule_is_gpipe, b.virtual_stages, config::zero_bubble_kind::none);
        request.virtual_stages = b.virtual_stages;
    }
    if (c.strategy == config::strategy_kind::pipelined && b.zero_bubble != c.zero_bubble)  // run-time zero-bubble
        request.order = detail::order_of(false, 1, b.zero_bubble);
    // Dynamic loss scaling: a step's updates wait for its overflow vote, so all stages skip together.
    request.check_overflow = c.training && settings.dynamic_loss_scaling.value_or(c.loss_scaling.dynamic);
    request.optimizer_sharding = c.training && settings.optimizer_sharding;
    // max_grad_norm: the same vote carries the parts of the global gradient norm.
    if constexpr (requires { { model.clips_gradients() } -> std::convertible_to<bool>; })
        request.gradient_norm = c.training && model.clips_gradients();
    // A tied table: the vote adds its two copies' gradients, on whichever stages they are.
    if constexpr (requires { { model.tied_elements() } -> std::convertible_to<std::size_t>; })
        request.tied_table = c.training && model.tied_elements() > 0;
    request.lock_step = settings.lock_step;
    plan.program = make_schedule(request);
    progress();
    plan.costs.bits = c.storage_bits;
    plan.costs.locations = settings.locations;
    if (settings.io_tiles >= settings.device.tiles)
        throw config::config_error("tessera::exec::session: " + std::to_string(settings.io_tiles) +
                                   " I/O tiles leave none of the IPU's " + std::to_string(settings.device.tiles) +
                                   " tiles to compute");
    plan.costs.io_tiles = settings.io_tiles;
    plan.costs.partials = settings.partials;
    for (const double amp : settings.ipu_available_memory_proportion)
        if (!(amp >= 0 && amp <= 1))
            throw config::config_error("tessera::exec::session: an IPU's available memory proportion must be in [0, 1], "
                                       "got " + std::to_string(amp));
    if (!(settings.available_memory_proportion >= 0 && settings.available_memory_proportion <= 1))
        throw config::config_error("tessera::exec::session: the available memory proportion must be in [0, 1], got " +
                                   std::to_string(settings.available_memory_proportion));
    plan.costs.available_memory_proportion = settings.available_memory_proportion;
    if (const auto& per_ipu = settings.ipu_available_memory_proportion; !per_ipu.empty()) {
        if (per_ipu.size() != plan.program.ipus)
            throw config::config_error("tessera::exec::session: " + std::to_string(per_ipu.size()) +
                                       " available memory proportions for the " + std::to_string(plan.program.ipus) +
                                       " IPUs of a replica (one per IPU)");
        for (std::size_t s = 0; s < stages; ++s)
            plan.costs.stage_available_memory_proportion.push_back(per_ipu[request.ipu_of_stage[s]]);
    }
    plan.costs.processes = plan.across.processes;
    plan.costs.host_network_bandwidth = settings.host.reduce_through_hosts ? settings.host.network_bandwidth : 0.0;
    for (std::size_t s = 0; s < stages; ++s) {
        plan.costs.stages.push_back(model.cost(s));
        progress();
    }
    describe_host_io<M>(plan.costs, b, c);
    return plan;
}

/// compile_plan for configuration type C.
template <config::Config C, StagedModel M, class Progress = void (*)()>
[[nodiscard]] compiled_plan compile_plan(const M& model, const config::batching& b, const session_options& settings,
                                         Progress progress = [] {}, compile_for purpose = compile_for::execution) {
    return compile_plan(config::description::of<C>(), model, b, settings, std::move(progress), purpose);
}

}  // namespace tessera::exec
