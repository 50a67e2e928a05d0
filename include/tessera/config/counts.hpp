#pragma once
// The counts of the IPU batching model: replication, instances, gradient accumulation, device
// iterations and the micro-batch. Any may be `dynamic` (given at run time in config::options).
#include <cstddef>
#include <string_view>

#include "tessera/config/policy.hpp"

namespace tessera::config {

/// `R` copies of the model on disjoint IPU groups, gradients all-reduced before each update.
/// Replicas in one input group of `InputGroup` receive the same slice of the input.
template <std::size_t R, std::size_t InputGroup = 1>
struct replication {
    static_assert(R >= 1, "tessera::config::replication<R>: R must be at least 1 (1 means no replication)");
    static_assert(InputGroup >= 1 && (R == dynamic || InputGroup == dynamic || R % InputGroup == 0),
                  "tessera::config::replication<R, InputGroup>: the input group size must divide R");
    using policy_category = category::replication;
    static constexpr std::size_t value = R;
    static constexpr std::size_t input_group = InputGroup;
};

/// `P` host processes, each owning R / P replicas and its own shard of the data (PopRun instances).
template <std::size_t P>
struct instances {
    static_assert(P >= 1, "tessera::config::instances<P>: P must be at least 1 host process");
    using policy_category = category::instances;
    static constexpr std::size_t value = P;
};

/// How the accumulated gradients of G micro-batches are combined (PopTorch's
/// accumulationAndReplicationReductionType).
enum class reduction { mean, sum };

/// G micro-batches' gradients are combined before one weight update.
template <std::size_t G, reduction Reduction = reduction::mean>
struct gradient_accumulation {
    static_assert(G >= 1, "tessera::config::gradient_accumulation<G>: G must be at least 1 (use "
                          "config::dynamic to give it at run time)");
    using policy_category = category::gradient_accumulation;
    static constexpr std::size_t value = G;
    static constexpr reduction reduce = Reduction;
};

/// D weight-update loops run on the device per host call.
template <std::size_t D>
struct device_iterations {
    static_assert(D >= 1, "tessera::config::device_iterations<D>: D must be at least 1 (use "
                          "config::dynamic to give it at run time)");
    using policy_category = category::device_iterations;
    static constexpr std::size_t value = D;
};

/// Samples one stage processes at once (the data loader's batch_size; BatchNorm statistics use it).
template <std::size_t B>
struct micro_batch {
    static_assert(B >= 1, "tessera::config::micro_batch<B>: B must be at least 1 sample (use "
                          "config::dynamic to give it at run time)");
    using policy_category = category::micro_batch;
    static constexpr std::size_t value = B;
};

/// The IPUs the system offers; the config then checks at compile time that R × IPUs per replica fit.
/// Without it the check happens at run time against the emulator's device count.
template <std::size_t N>
struct available_ipus {
    static_assert(N >= 1, "tessera::config::available_ipus<N>: a system has at least 1 IPU");
    using policy_category = category::available_ipus;
    static constexpr std::size_t value = N;
};

/// Training (the default: weights are updated) or inference (forward only, no optimizer).
struct training {
    using policy_category = category::mode;
    static constexpr bool is_training = true;
    static constexpr std::string_view name = "training";
};
struct inference {
    using policy_category = category::mode;
    static constexpr bool is_training = false;
    static constexpr std::string_view name = "inference";
};

}  // namespace tessera::config
