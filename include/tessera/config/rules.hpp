#pragma once
// The rules of DESIGN.md ("Rules users meet") as compile-time checks. Each is a function template
// so that a failure shows the values it was instantiated with next to the sentence; `Applies` says
// whether the rule concerns the configuration at all (a template is checked even where `&&` would skip it).
#include <cstddef>

#include "tessera/config/policy.hpp"
#include "tessera/config/strategy.hpp"

namespace tessera::config::rules {

template <std::size_t Replicas, std::size_t Instances>
constexpr bool replicas_divide_among_instances() {
    static_assert(Replicas == dynamic || Instances == dynamic || Replicas % Instances == 0,
                  "tessera::config: replication<R> must be divisible by instances<P> (every host process "
                  "owns R / P whole replicas); choose R as a multiple of P");
    return true;
}

template <std::size_t LocalReplicas, std::size_t InputGroup>
constexpr bool input_groups_divide_local_replicas() {
    static_assert(LocalReplicas == dynamic || InputGroup == dynamic || LocalReplicas % InputGroup == 0,
                  "tessera::config: the input group size of replication<R, InputGroup> must divide the "
                  "replicas of each instance (R / P)");
    return true;
}

template <std::size_t Replicas, std::size_t IpusPerReplica, std::size_t Available>
constexpr bool ipus_needed_fit_the_system() {
    static_assert(Available == dynamic || Replicas == dynamic || IpusPerReplica == dynamic ||
                      Replicas * IpusPerReplica <= Available,
                  "tessera::config: the configuration needs more IPUs than available_ipus<N> offers "
                  "(replication<R> × IPUs per replica); lower R or use fewer stages");
    return true;
}

template <bool Applies, std::size_t Stages, std::size_t G>
constexpr bool pipelined_training_needs_accumulation() {
    static_assert(!Applies || G == dynamic || Stages == dynamic || G >= 2 * Stages - 1,
                  "tessera::config: pipelined training needs gradient_accumulation<G> with G >= 2*Stages - 1 "
                  "(the last forward and first backward stage are merged, so training runs 2*Stages - 1 "
                  "stages and each needs a micro-batch in flight); raise G or use fewer stages");
    return true;
}

template <bool Applies, std::size_t Ipus, std::size_t Count, bool Training>
constexpr bool interleaved_pipeline_needs_whole_groups() {
    static_assert(!Applies || Count == dynamic || interleaved_count_fits(Count, Ipus, Training),
                  "tessera::config: an interleaved pipeline runs its micro-batches in groups of as many as it has "
                  "IPUs: gradient_accumulation<G> (device_iterations<D> for inference) must be a multiple of the "
                  "IPU count I, and at least 2*I - 1 when training");
    return true;
}

template <bool Applies, std::size_t Stages, std::size_t D>
constexpr bool pipelined_inference_needs_device_iterations() {
    static_assert(!Applies || D == dynamic || Stages == dynamic || D >= Stages,
                  "tessera::config: pipelined inference needs device_iterations<D> with D >= Stages (each "
                  "stage needs a micro-batch in flight); raise D or use fewer stages");
    return true;
}

template <bool Applies, std::size_t G>
constexpr bool inference_has_no_gradient_accumulation() {
    static_assert(!Applies || G == dynamic || G == 1,
                  "tessera::config: inference has no gradients to accumulate: use gradient_accumulation<1> "
                  "(or config::for_inference, which sets it) and device_iterations<D> to amortise host calls");
    return true;
}

}  // namespace tessera::config::rules
