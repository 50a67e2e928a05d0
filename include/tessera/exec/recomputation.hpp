#pragma once
// Recomputation in a staged network (PopTorch's RecomputeAll within a stage, and its recomputation
// checkpoints): which stages recompute their forward during backward, the segments they recompute
// one at a time, and the forward and backward of such a stage.
#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "tessera/config/error.hpp"
#include "tessera/exec/unit_network.hpp"
#include "tessera/nn/layer.hpp"

namespace tessera::exec {

/// What a recomputing stage keeps of a micro-batch beside its input: the inputs of its segments
/// after the first (its checkpoints), and from a split backward's input half to its weight half each
/// segment's recomputed state and the gradient that segment read.
template <UnitNetwork N>
struct recomputed_segments {
    using tensor = nn::activation<typename N::precision>;
    std::vector<tensor> checkpoints{};
    std::vector<typename N::state> states{};
    std::vector<tensor> grads{};

    void clear() noexcept {
        checkpoints.clear();
        states.clear();
        grads.clear();
    }
};

/// Which stages of a staged network recompute their forward during backward: the stages flagged
/// whole (set_stages), and those holding a recomputation checkpoint after their first unit. A
/// recomputing stage runs in segments, from its first unit, each checkpoint inside it, to its end.
/// Results are the same as without recomputation; the stash holds less, the backward runs more.
class recomputation {
public:
    /// Stages that stash only their input and recompute their forward during backward, one flag per
    /// stage (`stages` of them).
    void set_stages(std::vector<bool> flags, std::size_t stages) {
        if (flags.size() != stages)
            throw config::config_error("tessera::exec::staged_network::set_recompute: " + std::to_string(flags.size()) +
                                       " flags for " + std::to_string(stages) + " stages");
        m_stages = std::move(flags);
    }
    /// Units whose input is a recomputation checkpoint, of a network of `units` units; sorted, once each.
    void set_checkpoints(std::vector<std::size_t> checkpoints, std::size_t units) {
        for (const std::size_t u : checkpoints)
            if (u >= units)
                throw config::config_error("tessera::exec::staged_network::set_recompute_checkpoints: unit " +
                                           std::to_string(u) + " does not exist (the network has " +
                                           std::to_string(units) + " units)");
        std::sort(checkpoints.begin(), checkpoints.end());
        checkpoints.erase(std::unique(checkpoints.begin(), checkpoints.end()), checkpoints.end());
        m_checkpoints = std::move(checkpoints);
    }
    [[nodiscard]] const std::vector<std::size_t>& checkpoints() const noexcept { return m_checkpoints; }
    [[nodiscard]] bool is_checkpoint(std::size_t u) const {
        return std::binary_search(m_checkpoints.begin(), m_checkpoints.end(), u);
    }

    /// Whether stage s, units [first, last), recomputes: flagged whole, or a checkpoint inside it.
    [[nodiscard]] bool recomputes(std::size_t s, std::size_t first, std::size_t last) const {
        if (!m_stages.empty() && m_stages.at(s)) return true;
        return std::any_of(m_checkpoints.begin(), m_checkpoints.end(), [&](std::size_t u) { return u > first && u < last; });
    }

    /// The first unit, the checkpoints inside, then the end: segment k is units [bounds[k], bounds[k + 1]).
    [[nodiscard]] std::vector<std::size_t> segment_bounds(std::size_t first, std::size_t last) const {
        std::vector<std::size_t> bounds{first};
        for (const std::size_t u : m_checkpoints)
            if (u > first && u < last) bounds.push_back(u);
        bounds.push_back(last);
        return bounds;
    }

    /// The forward of a recomputing stage, units [first, last) from `input`: each segment in a state of
    /// its own, dropped when the segment is done; only the segments' inputs (kept.checkpoints) stay.
    template <UnitNetwork N>
    nn::activation<typename N::precision> forward(N& net, std::size_t first, std::size_t last,
                                                  const nn::activation<typename N::precision>& input,
                                                  recomputed_segments<N>& kept, const nn::context& ctx) const {
        using tensor = nn::activation<typename N::precision>;
        const auto bounds = segment_bounds(first, last);
        const std::size_t segments = bounds.size() - 1;
        kept.checkpoints.reserve(segments - 1);  // segments read their inputs by address
        const tensor* in = &input;
        for (std::size_t k = 0;; ++k) {
            typename N::state segment;
            const auto& y = net.forward_units(bounds[k], bounds[k + 1], *in, segment, ctx);
            if (k + 1 == segments) return tensor(y);
            in = &kept.checkpoints.emplace_back(y);
        }
    }

    /// The backward of a recomputing stage, last segment first: each segment's forward again from its
    /// checkpoint (ctx's rounding, no second move of the running statistics), then its backward. The
    /// gradient of `input` when `want_input_gradient`, else an empty tensor. InputOnly (a split
    /// backward's input half): each segment keeps its state and the gradient it read in `kept`, for
    /// backward_weights; otherwise both are dropped when the segment is done.
    template <bool InputOnly, UnitNetwork N>
    nn::activation<typename N::precision> backward(N& net, std::size_t first, std::size_t last,
                                                   const nn::activation<typename N::precision>& dy,
                                                   const nn::activation<typename N::precision>& input,
                                                   recomputed_segments<N>& kept, const nn::context& ctx,
                                                   bool want_input_gradient) const {
        using tensor = nn::activation<typename N::precision>;
        const auto bounds = segment_bounds(first, last);
        const std::size_t segments = bounds.size() - 1;
        nn::context again = ctx;
        again.update_running_statistics = false;
        if constexpr (InputOnly) kept.states.assign(segments, {}), kept.grads.assign(segments, {});
        tensor carried;  // the gradient of the segment above's input
        const tensor* grad = &dy;
        for (std::size_t k = segments; k-- > 0;) {
            typename N::state dropped;
            typename N::state& state = InputOnly ? kept.states[k] : dropped;
            (void)net.forward_units(bounds[k], bounds[k + 1], k == 0 ? input : kept.checkpoints[k - 1], state, again);
            const bool want_dx = k > 0 || want_input_gradient;
            const auto& dx = [&]() -> decltype(auto) {
                if constexpr (InputOnly)
                    return net.backward_units_input(bounds[k], bounds[k + 1], *grad, state, ctx, want_dx);
                else
                    return net.backward_units(bounds[k], bounds[k + 1], *grad, state, ctx, want_dx);
            }();
            if (k == 0) return want_input_gradient ? tensor(dx) : tensor{};
            if constexpr (InputOnly) {
                grad = &(kept.grads[k - 1] = tensor(dx));
            } else {
                carried = tensor(dx);
                grad = &carried;
            }
        }
        return tensor{};  // not reached: a stage has at least one segment
    }

private:
    std::vector<bool> m_stages;              // empty: no stage recomputes whole
    std::vector<std::size_t> m_checkpoints;  // units whose input is a recomputation checkpoint, sorted
};

/// A recomputation checkpoint at every unit's input (Graphcore's examples'
/// --recompute-checkpoint-every-layer): each stage recomputes one unit at a time during backward.
/// @code
///   settings.recompute_checkpoints = exec::checkpoint_every_unit(net);
/// @endcode
template <UnitNetwork N>
[[nodiscard]] std::vector<std::size_t> checkpoint_every_unit(const N& net) {
    std::vector<std::size_t> units(net.units() > 0 ? net.units() - 1 : 0);
    for (std::size_t u = 0; u < units.size(); ++u) units[u] = u + 1;
    return units;
}

}  // namespace tessera::exec
