#pragma once
// What one host call asks of the host: preparing its combined batch and feeding it to the IPUs.
#include <cstddef>

#include "tessera/config/batching.hpp"
#include "tessera/data/loader_options.hpp"
#include "tessera/emulator/host_clock.hpp"
#include "tessera/emulator/host_spec.hpp"
#include "tessera/exec/cost.hpp"

namespace tessera::exec {

/// One host process's work for one call: its combined batch (the samples of its replicas' input
/// groups, D × G micro-batches each), prepared at the I/O's bytes per value and handed to the device.
struct host_work {
    double samples = 0;          ///< in the process's combined batch
    double bytes = 0;            ///< of input it sends
    double prepare_seconds = 0;  ///< on one loader worker
    double feed_seconds = 0;     ///< the training loop handing it over
};

/// The host work of one call of a plan with costs `costs` and batching `b` on `host`.
/// @code
///   auto w = exec::host_work_of(plan.costs, session.batching(), emulator::host_spec{});
/// @endcode
[[nodiscard]] inline host_work host_work_of(const cost_model& costs, const config::batching& b,
                                            const emulator::host_spec& host) {
    host_work w;
    w.samples = double(b.combined_batch());
    const double per_micro_batch = double(costs.host_input_bytes());
    const double bytes_per_value = double(costs.io_bytes_per_value ? costs.io_bytes_per_value : std::size_t(costs.bits / 8));
    const double values = b.micro_batch ? per_micro_batch / bytes_per_value / double(b.micro_batch) : 0.0;
    w.bytes = w.samples * values * bytes_per_value;
    w.prepare_seconds = host.prepare_seconds(w.samples, values, std::size_t(bytes_per_value));
    w.feed_seconds = host.feed_seconds(w.bytes);
    return w;
}

/// The host_loading of a data loader's options, for session_options::loading (so the modelled clock
/// loads as the loader does).
/// @code
///   auto run = exec::training_model<c>(net, sgd, sample, counts, {.loading = exec::loading_of(loader_options)});
/// @endcode
[[nodiscard]] inline emulator::host_loading loading_of(const data::loader_options& o) noexcept {
    return {.async = o.mode != data::loader_mode::sync,
            .rebatched = o.mode == data::loader_mode::async_rebatched,
            .workers = o.num_workers == 0 ? 1 : o.num_workers,
            .prefetch_depth = o.prefetch_depth == 0 ? 1 : o.prefetch_depth,
            .instances = o.size == 0 ? 1 : o.size};
}

}  // namespace tessera::exec
