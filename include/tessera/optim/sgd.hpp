#pragma once
// Stochastic gradient descent with momentum, Nesterov momentum and L2 weight decay (PyTorch's torch.optim.SGD).
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/kernels/simd.hpp"
#include "tessera/optim/clip.hpp"
#include "tessera/optim/shard.hpp"
#include "tessera/optim/parameters.hpp"
#include "tessera/optim/weight_rounding.hpp"

namespace tessera::optim {

/// Hyper-parameters of sgd; learning_rate may be changed between steps (schedules).
struct sgd_options {
    double learning_rate = 0.1;
    double momentum = 0.0;
    double dampening = 0.0;
    double weight_decay = 0.0;
    bool nesterov = false;
    weight_rounding rounding{};  ///< how updated 16-bit weights are stored
    /// Clip the gradients to this global L2 norm before the step (PopTorch's max_grad_norm; +inf: never).
    double max_grad_norm = std::numeric_limits<double>::infinity();
};

/// For each parameter p with gradient g (times grad_scale, e.g. 1/loss scale):
///   g += weight_decay·p;  b = momentum·b + (1 − dampening)·g  (b = g on the first step);
///   g = nesterov ? g + momentum·b : b;  p −= learning_rate·g.
/// The momentum buffers are fp32 whatever the weight type; 16-bit weights are updated in fp32 and
/// rounded as `options.rounding` says (to nearest by default). Each product that feeds a sum is fused
/// with it by hand (kernels::simd::fused_multiply_add: g·grad_scale + weight_decay·p,
/// momentum·b + (1 − dampening)·g, momentum·b + g, p − learning_rate·g), so every instantiation of
/// the step in a build (sharded or not, in any strategy) computes the same bits whatever the compiler
/// would contract.
/// @code
///   optim::sgd opt({.learning_rate = 0.1, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true});
///   opt.step(model);
/// @endcode
class sgd {
public:
    explicit sgd(sgd_options options = {}) : m_options(options) {
        detail::check_max_grad_norm(options.max_grad_norm, "tessera::optim::sgd");
        if (options.learning_rate < 0 || options.momentum < 0 || options.weight_decay < 0 || options.dampening < 0)
            throw std::invalid_argument("tessera::optim::sgd: learning rate, momentum, dampening and weight decay must "
                                        "be non-negative (lr=" + std::to_string(options.learning_rate) + ", momentum=" +
                                        std::to_string(options.momentum) + ")");
        if (options.nesterov && (options.momentum <= 0 || options.dampening != 0))
            throw std::invalid_argument("tessera::optim::sgd: Nesterov momentum needs momentum > 0 and dampening 0");
    }

    [[nodiscard]] sgd_options& options() noexcept { return m_options; }
    [[nodiscard]] const sgd_options& options() const noexcept { return m_options; }
    [[nodiscard]] double learning_rate() const noexcept { return m_options.learning_rate; }
    void set_learning_rate(double lr) noexcept { m_options.learning_rate = lr; }
    [[nodiscard]] std::uint64_t steps() const noexcept { return m_steps; }
    /// fp32 values of state per parameter: a momentum buffer, or none (for memory plans and cost models).
    [[nodiscard]] std::size_t state_values_per_parameter() const noexcept { return m_options.momentum > 0 ? 1 : 0; }

    /// Allocates the state for params (done by the first step; call it before loading a checkpoint).
    /// With a `shard`, only for its elements (what this replica updates when the state is sharded).
    template <ParameterSet S>
    void prepare(S& params, element_range shard = {}) {
        if (m_options.momentum <= 0) return;  // plain SGD keeps no state
        std::size_t i = 0;
        visit_in_range(params, shard, [&](std::string_view, auto, auto, std::size_t lo, std::size_t hi) {
            buffer(i++, hi - lo);
        });
    }

    /// One step (with max_grad_norm, of gradients clipped to the norm over `global_norm`, else params'
    /// own: see detail::clipped_scale); a large parameter's elements are split between par's threads (each element's update
    /// is its own, so the result is the same on any number of threads). With a `shard`, only the
    /// elements in it are updated, and the momentum is kept for them alone: replicas that each step
    /// their own shard compute, element by element, what one unsharded step computes.
    template <ParameterSet S>
    void step(S& params, double grad_scale = 1.0, kernels::parallelism par = {}, element_range shard = {},
              std::optional<double> global_norm = {}) {
        grad_scale = detail::clipped_scale(params, grad_scale, m_options.max_grad_norm, shard, global_norm, par, "tessera::optim::sgd");
        const float lr = static_cast<float>(m_options.learning_rate), mom = static_cast<float>(m_options.momentum);
        const float wd = static_cast<float>(m_options.weight_decay), damp = static_cast<float>(1.0 - m_options.dampening);
        const float gs = static_cast<float>(grad_scale);
        const bool first = m_steps == 0, nesterov = m_options.nesterov;
        const weight_rounding rounding = m_options.rounding;
        std::size_t i = 0;
        visit_in_range(params, shard, [&](std::string_view name, auto value, auto grad, std::size_t lo, std::size_t hi) {
            using W = typename decltype(value)::value_type;
            using G = std::remove_const_t<typename decltype(grad)::value_type>;
            float* b = mom > 0 ? buffer(i, hi - lo).data() : nullptr;
            const std::uint64_t stream = rounding.stochastic ? detail::rounding_stream(name, m_steps) : 0;
            ++i;
            kernels::detail::parallel_ranges(par, hi - lo, update_grain, [&](std::size_t from, std::size_t to, std::size_t) {
                detail::over_updates<W, G>(lo + from, lo + to, rounding, [&]<class V>(std::size_t k) {
                    using kernels::simd::fused_multiply_add;
                    const V p = kernels::simd::load_lanes<V, float>(value.data() + k);
                    V g = fused_multiply_add(kernels::simd::load_lanes<V, float>(grad.data() + k), V(gs), V(wd) * p);
                    if (b != nullptr) {
                        float* v = b + (k - lo);
                        const V m = first ? g : fused_multiply_add(V(mom), kernels::simd::load_lanes<V, float>(v), V(damp) * g);
                        kernels::simd::store_lanes(v, m);
                        g = nesterov ? fused_multiply_add(V(mom), m, g) : m;
                    }
                    detail::store_weights(value.data() + k, fused_multiply_add(V(-lr), g, p), rounding, stream, k);
                });
            });
        });
        ++m_steps;
    }

    /// Keeps the momentum of `shard`'s elements only (a replica's part when the state is sharded).
    template <ParameterSet S>
    void keep_shard(S& params, element_range shard) {
        detail::keep_shard(m_buffers, params, shard, "tessera::optim::sgd");
    }
    /// This optimiser with the momentum of every element of params, from `shards` (consecutive
    /// shards covering params, in order, each from keep_shard and its steps).
    template <ParameterSet S>
    void gather_shards(S& params, std::span<const sgd* const> shards) {
        std::vector<const std::vector<std::vector<float>>*> parts;
        for (const sgd* o : shards) parts.push_back(&o->m_buffers);
        m_buffers = detail::gather_shards(params, parts, "tessera::optim::sgd");
        if (!shards.empty()) m_steps = shards.front()->m_steps;
    }

    /// Optimiser state for checkpoints: f(name, std::span<float>) per buffer.
    template <class F>
    void visit_state(F&& f) {
        for (std::size_t i = 0; i < m_buffers.size(); ++i) f("momentum." + std::to_string(i), std::span<float>(m_buffers[i]));
    }
    void set_steps(std::uint64_t s) noexcept { m_steps = s; }

private:
    std::vector<float>& buffer(std::size_t i, std::size_t n) {
        if (m_buffers.size() <= i) m_buffers.resize(i + 1);
        if (m_buffers[i].empty()) m_buffers[i].assign(n, 0.0f);
        if (m_buffers[i].size() != n)
            throw std::invalid_argument("tessera::optim::sgd: parameter " + std::to_string(i) + " has " + std::to_string(n) +
                                        " values to update but its momentum buffer " + std::to_string(m_buffers[i].size()) +
                                        " (a different parameter set or shard?)");
        return m_buffers[i];
    }

    sgd_options m_options;
    std::vector<std::vector<float>> m_buffers;
    std::uint64_t m_steps = 0;
};

}  // namespace tessera::optim
