#pragma once
// Dry runs: whole epochs on the modelled clock from the schedule and the cost model, computing nothing.
#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tessera/config/batching.hpp"
#include "tessera/config/config.hpp"
#include "tessera/config/description.hpp"
#include "tessera/config/error.hpp"
#include "tessera/emulator/host_clock.hpp"
#include "tessera/emulator/modelled_clock.hpp"
#include "tessera/exec/breakdown.hpp"
#include "tessera/exec/call_trace.hpp"
#include "tessera/exec/compile.hpp"
#include "tessera/exec/concepts.hpp"
#include "tessera/exec/host_work.hpp"
#include "tessera/exec/memory_plan.hpp"
#include "tessera/exec/network_session.hpp"
#include "tessera/exec/run_result.hpp"
#include "tessera/exec/session_options.hpp"
#include "tessera/exec/timing.hpp"

namespace tessera::exec {

/// What a dry run does with a plan that does not fit the IPUs' memory: throw
/// emulator::out_of_device_memory as a session would, or report it (epoch_estimate::fits).
enum class over_budget { throws, reported };

/// What a dry run predicts for one epoch.
struct epoch_estimate {
    std::size_t calls = 0;             ///< host calls in the epoch (each process)
    std::size_t samples = 0;           ///< samples trained on, over all processes
    double seconds = 0;                ///< the modelled epoch: host and IPUs
    double device_seconds = 0;         ///< of which the IPUs ran calls
    double host_wait_seconds = 0;      ///< and waited for the host (data, feeding, dispatch)
    double host_prepare_seconds = 0;   ///< of which for batches to be prepared (the rest: feeding and dispatch)
    double call_device_seconds = 0;    ///< one call on the IPUs
    /// From a call's start to its first output at the host (an inference configuration: one
    /// micro-batch's latency on the IPUs and the host link); 0 when the call sends none.
    double first_output_seconds = 0;
    host_work host_per_call{};         ///< one call's host work (one process)
    compiled_plan plan{};              ///< the schedule and costs that were charged
    memory_plan memory{};              ///< per IPU of one replica
    bool fits = true;                  ///< every IPU's on-chip items within its budget
    std::size_t overshoot_bytes = 0;   ///< by how much the fullest IPU is over its budget (0 when it fits)
    std::vector<emulator::modelled_clock> call_clocks;  ///< one call of one replica, per IPU (recorded)
    std::vector<emulator::call_timing> host_calls;      ///< the epoch's calls on the host's clock
    /// The epoch's seconds by what filled them (settings.record_trace: otherwise empty): the critical
    /// IPU's call breakdown times the calls, and host_wait_seconds beside it, add up to `seconds`.
    time_breakdown device_breakdown{};

    [[nodiscard]] double samples_per_second() const noexcept { return seconds > 0 ? double(samples) / seconds : 0.0; }
};

/// Predicts epochs of a staged model under config C without running anything: graph compilation as
/// a session does it (the same schedule, costs, memory plan — out_of_device_memory if it does not
/// fit), one call's IPU time by simulate(), and `epochs` epochs of host calls on a host_clock with
/// the session's host and loading settings. The threaded executor gives the same modelled seconds
/// for the same configuration. `samples`: the dataset's size (each process gets an equal share;
/// drop_last: calls = floor(share / combined batch)). The epoch returned is the last one (the first
/// of an async run includes filling the prefetch ring).
/// @code
///   auto e = exec::dry_run<cfg>(model, {.micro_batch = 32, .gradient_accumulation = 8}, 50'000,
///                               {.loading = {.async = true}});
///   std::printf("%.1f s, %.0f images/s\n", e.seconds, e.samples_per_second());
/// @endcode
template <StagedModel M>
[[nodiscard]] epoch_estimate dry_run(const config::description& c, const M& model, const config::options& options,
                                     std::size_t samples, const session_options& settings = {}, std::size_t epochs = 2,
                                     over_budget memory = over_budget::throws) {
    const config::batching b = config::make_batching(c, options);
    b.check_fits_dataset(samples);
    epoch_estimate e;
    e.plan = compile_plan(c, model, b, settings, [] {}, compile_for::dry_run);
    e.memory = lay_out_memory(e.plan.program, e.plan.costs, settings.device, memory == over_budget::throws);
    e.overshoot_bytes = memory_overshoot(e.memory);
    e.fits = e.overshoot_bytes == 0;
    const std::size_t iterations = c.training ? b.device_iterations : 1;
    e.call_clocks = simulate(e.plan.program, e.plan.costs, settings.device, iterations,
                             settings.outputs.value_or(output_selection{c.outputs, c.output_period}), settings.record_trace,
                             &e.first_output_seconds);
    for (const auto& clock : e.call_clocks) e.call_device_seconds = std::max(e.call_device_seconds, clock.now());
    e.host_per_call = host_work_of(e.plan.costs, b, settings.host);
    e.calls = samples / b.instances / b.combined_batch();
    e.samples = e.calls * b.combined_batch() * b.instances;
    emulator::host_clock host(settings.host, settings.loading);
    for (std::size_t epoch = 0; epoch < std::max<std::size_t>(epochs, 1); ++epoch) {
        const double start = host.now(), waited = host.host_wait(), prepared = host.prepare_wait();
        for (std::size_t k = 0; k < e.calls; ++k)
            (void)host.call(e.host_per_call.prepare_seconds, e.host_per_call.feed_seconds, e.call_device_seconds);
        e.seconds = host.now() - start;
        e.host_wait_seconds = host.host_wait() - waited;
        e.host_prepare_seconds = host.prepare_wait() - prepared;
    }
    e.host_calls.assign(host.calls().end() - std::ptrdiff_t(e.calls), host.calls().end());
    e.device_seconds = double(e.calls) * e.call_device_seconds;
    if (settings.record_trace)
        e.device_breakdown =
            breakdown_of(e.call_clocks, e.plan.program, e.plan.costs, settings.device).scaled(double(e.calls));
    return e;
}

/// Writes the first `calls` calls of dry run `e`'s epoch (at least one, at most the epoch's; recorded
/// with settings.record_trace) into `out`: one replica's IPUs (the others run the same), each call
/// the one call the dry run simulated, placed where the host's clock puts it and standing for
/// e.calls / calls calls of the epoch. Returns the calls written.
inline std::size_t write_trace(report::trace_writer& out, const epoch_estimate& e, std::size_t calls) {
    if (e.calls == 0) return 0;
    if (!e.call_clocks.empty() && e.call_clocks.front().spans().empty())
        throw std::invalid_argument("tessera::exec::write_trace: the dry run recorded no trace (session_options::record_trace)");
    calls = std::clamp<std::size_t>(calls, 1, e.calls);
    call_tracer tracer(out, e.plan.program, e.plan.costs, e.memory, 1, false);
    const double stands_for = double(e.calls) / double(calls);
    for (std::size_t k = 0; k < calls; ++k) tracer.modelled(k, e.call_clocks, e.host_calls[k], stands_for);
    return calls;
}

/// dry_run for configuration type C.
template <config::Config C, StagedModel M>
[[nodiscard]] epoch_estimate dry_run(const M& model, const config::options& options, std::size_t samples,
                                     const session_options& settings = {}, std::size_t epochs = 2,
                                     over_budget memory = over_budget::throws) {
    return dry_run(config::description::of<C>(), model, options, samples, settings, epochs, memory);
}

/// dry_run of a unit network (nn::resnet, nn::gpt) cut into the stages of the configuration `c`
/// describes: the staged network a training (or inference) session would run, built as it builds it
/// (cut at settings.first_units, or balanced by FLOPs). Loss: as training_model's (exec::token_loss<P>{}
/// for a language model).
template <UnitNetwork N, StageOptimizer<N> O, StagedLoss<typename N::precision> Loss = class_loss<typename N::precision>>
[[nodiscard]] epoch_estimate dry_run(const config::description& c, const N& net, const O& optimizer,
                                     tessera::tensor::shape sample, const config::options& options, std::size_t samples,
                                     const session_options& settings = {}, std::size_t epochs = 2,
                                     over_budget memory = over_budget::throws, Loss = {}) {
    const config::batching b = config::make_batching(c, options);
    session_options building = settings;
    building.kernel_threads_per_ipu = 1;  // nothing runs: no kernel thread pools
    if (!c.training)
        return dry_run(c, detail::staged_for_inference<N, O, Loss>(net, optimizer, sample, b, building), options, samples,
                       settings, epochs, memory);
    return dry_run(c, detail::staged_for_training<N, O, Loss>(c, net, optimizer, sample, b, building), options, samples,
                   settings, epochs, memory);
}

/// dry_run of a unit network for configuration type C.
/// @code
///   nn::resnet50<cfg::half> net(3, 1000);
///   auto e = exec::dry_run<cfg>(net, optim::sgd({.momentum = 0.9}), {1, 224, 224, 3}, {.micro_batch = 18}, 1'281'167);
/// @endcode
template <config::Config C, UnitNetwork N, StageOptimizer<N> O,
          StagedLoss<typename N::precision> Loss = class_loss<typename N::precision>>
[[nodiscard]] epoch_estimate dry_run(const N& net, const O& optimizer, tessera::tensor::shape sample,
                                     const config::options& options, std::size_t samples,
                                     const session_options& settings = {}, std::size_t epochs = 2,
                                     over_budget memory = over_budget::throws, Loss loss = {}) {
    return dry_run(config::description::of<C>(), net, optimizer, sample, options, samples, settings, epochs, memory, loss);
}

}  // namespace tessera::exec
