#pragma once
// The hook through which a reduction across host processes (tessera::dist) joins the executor.
#include <cstddef>
#include <functional>
#include <span>

namespace tessera::exec {

/// How gradients are reduced across host processes after the in-process all-reduce (tessera::dist
/// plugs in here; exec never includes dist). reduce(stage, sum) replaces the process's sum of its
/// replicas' gradients by the sum over all processes, deterministically (a fixed rank order); it runs
/// on one thread per stage while the process's other replicas wait. The mean divides by
/// local replicas × processes.
struct cross_process_reduction {
    std::function<void(std::size_t stage, std::span<float> gradients)> reduce{};
    std::size_t processes = 1;
};

}  // namespace tessera::exec
