#pragma once
// The hooks through which collectives across host processes (tessera::dist) join the executor.
#include <cstddef>
#include <functional>
#include <span>

namespace tessera::exec {

/// How gradients are reduced across host processes after the in-process all-reduce (tessera::dist
/// plugs in here; exec never includes dist). reduce(stage, sum) replaces the process's sum of its
/// replicas' gradients by the sum over all processes, deterministically (a fixed rank order); it runs
/// on one thread per stage while the process's other replicas wait. The mean divides by
/// local replicas × processes.
/// With the optimiser state sharded (session_options::optimizer_sharding) two more are needed:
/// gather(stage, weights, bounds) fills in, in place, the parts [bounds[p], bounds[p + 1]) of the
/// other processes p (each process brings its own part: its replicas' shards), and vote(flags)
/// replaces the process's overflow votes by their sum over the processes.
struct cross_process_reduction {
    std::function<void(std::size_t stage, std::span<float> gradients)> reduce{};
    std::size_t processes = 1;
    std::size_t rank = 0;  ///< this process among them: its replicas are rank × local replicas, ...
    std::function<void(std::size_t stage, std::span<float> values, std::span<const std::size_t> bounds)> gather{};
    std::function<void(std::span<float> flags)> vote{};
};

}  // namespace tessera::exec
