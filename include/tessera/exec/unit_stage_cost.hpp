#pragma once
// What one pipeline stage of a unit network costs per micro-batch: its FLOPs, its bytes, and its
// layers' passes, which the IPU model, the memory plan and the what-if planner read.
#include <algorithm>
#include <cstddef>
#include <utility>

#include "tessera/exec/cost.hpp"
#include "tessera/exec/recomputation.hpp"
#include "tessera/exec/unit_network.hpp"
#include "tessera/nn/cost.hpp"
#include "tessera/tensor/dense.hpp"

namespace tessera::exec {

/// The figures of units [first, last) of `net` as one stage, for micro-batches of `input` (the
/// network's input shape). `with_loss`: the last stage, whose forward ends in the softmax cross-entropy.
/// `state_values`: fp32 values of optimiser state per parameter. `recompute`: the recomputation of a
/// stage that recomputes its forward during backward (its checkpoints cut its segments), else null.
/// Unit 0's first layer computes no input gradient (the images need none).
template <UnitNetwork N>
[[nodiscard]] stage_cost unit_stage_cost(const N& net, std::size_t first, std::size_t last, tessera::tensor::shape input,
                                         bool with_loss, std::size_t state_values, const recomputation* recompute) {
    using precision = typename N::precision;
    stage_cost c;
    tessera::tensor::shape shape = net.unit_input_shape(first, input);
    const std::size_t data = sizeof(typename precision::data_type);
    c.input_bytes = shape.n * shape.per_sample() * data;
    std::size_t parameters = 0;
    double written = 0;
    c.recompute = recompute != nullptr;
    c.model_recomputes = c.recompute;
    double segment = 0, largest_segment = 0;
    for (std::size_t u = first; u < last; ++u) {
        if (u > first && c.recompute && recompute->is_checkpoint(u)) {
            c.checkpoint_bytes += shape.n * shape.per_sample() * data;
            largest_segment = std::max(largest_segment, std::exchange(segment, 0.0));
        }
        const nn::cost uc = net.unit_cost(u, shape);
        segment += uc.stash_bytes();
        c.unit_peak_bytes = std::max(c.unit_peak_bytes, shape.n * shape.per_sample() * data +
                                                            static_cast<std::size_t>(uc.inference_peak_bytes()));
        c.forward_flops += uc.forward_flops;
        c.backward_flops += uc.backward_flops;
        parameters += uc.parameters;
        written += uc.stash_bytes();  // the activations its forward writes and its backward reads
        bool first_backward = u == 0;
        for (const nn::pass& p : uc.passes) {
            if (p.phase == nn::pass_phase::forward) {
                c.forward_passes.push_back(p);
                continue;
            }
            // The network's first layer computes no gradient of the images (want_dx is false).
            if (std::exchange(first_backward, false) && p.kind == nn::pass_kind::contraction) continue;
            c.backward_passes.push_back(p);
        }
        shape = net.unit_output_shape(u, shape);
    }
    c.output_bytes = shape.n * shape.per_sample() * data;
    if (with_loss) {  // softmax cross-entropy: probabilities, then their gradient
        const double logits = static_cast<double>(shape.n * shape.per_sample());
        c.forward_passes.push_back(nn::pass::reduction(nn::pass_phase::forward, logits, 1, double(shape.n)));
        c.forward_passes.push_back(nn::pass::elementwise(nn::pass_phase::forward, logits, 3));
    }
    c.parameters = parameters;
    c.weight_bytes = parameters * sizeof(typename precision::weight_type);
    c.gradient_bytes = parameters * sizeof(float);
    c.optimiser_bytes = parameters * state_values * sizeof(float);
    // The step reads and writes the weights and the optimizer state, reads and zeroes the gradients.
    c.update_bytes = 2 * (c.weight_bytes + c.gradient_bytes + c.optimiser_bytes);
    c.update_flops = 2.0 * double(parameters);
    c.stash_bytes = static_cast<std::size_t>(written);
    if (c.recompute) c.segment_bytes = static_cast<std::size_t>(std::max(largest_segment, segment));
    return c;
}

}  // namespace tessera::exec
