#pragma once
// AdamW: Adam with decoupled weight decay (Loshchilov & Hutter; PyTorch's torch.optim.AdamW).
#include <cmath>
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

struct adamw_options {
    double learning_rate = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 1e-2;
    weight_rounding rounding{};  ///< how updated 16-bit weights are stored
    /// Clip the gradients to this global L2 norm before the step (PopTorch's max_grad_norm; +inf: never).
    double max_grad_norm = std::numeric_limits<double>::infinity();
};

/// p ← p·(1 − lr·wd);  m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²;
/// p ← p − lr · (m / (1−β1ᵗ)) / (√(v / (1−β2ᵗ)) + eps). Moments in fp32; β1·m, β2·v and
/// p·(1 − lr·wd) are fused with the sums they feed by hand (kernels::simd::fused_multiply_add), as in sgd.
class adamw {
public:
    explicit adamw(adamw_options options = {}) : m_options(options) {
        detail::check_max_grad_norm(options.max_grad_norm, "tessera::optim::adamw");
        if (options.learning_rate < 0 || options.weight_decay < 0 || options.eps <= 0 || options.beta1 < 0 ||
            options.beta1 >= 1 || options.beta2 < 0 || options.beta2 >= 1)
            throw std::invalid_argument("tessera::optim::adamw: need lr >= 0, wd >= 0, eps > 0 and betas in [0, 1) (beta1=" +
                                        std::to_string(options.beta1) + ", beta2=" + std::to_string(options.beta2) + ")");
    }

    [[nodiscard]] adamw_options& options() noexcept { return m_options; }
    [[nodiscard]] const adamw_options& options() const noexcept { return m_options; }
    [[nodiscard]] double learning_rate() const noexcept { return m_options.learning_rate; }
    void set_learning_rate(double lr) noexcept { m_options.learning_rate = lr; }
    [[nodiscard]] std::uint64_t steps() const noexcept { return m_steps; }
    /// fp32 values of state per parameter: the two moments.
    [[nodiscard]] std::size_t state_values_per_parameter() const noexcept { return 2; }

    /// Allocates the moments for params (done by the first step); with a `shard`, for its elements only.
    template <ParameterSet S>
    void prepare(S& params, element_range shard = {}) {
        std::size_t i = 0;
        visit_in_range(params, shard, [&](std::string_view, auto, auto, std::size_t lo, std::size_t hi) {
            moments(i++, hi - lo);
        });
    }

    /// One step (with max_grad_norm, of gradients clipped to the norm over `global_norm`, else params'
    /// own: see detail::clipped_scale); a large parameter's elements are split between par's threads (each element's update
    /// is its own, so the result is the same on any number of threads). With a `shard`, only its
    /// elements are updated and have moments (sharded optimiser state: see sgd::step).
    template <ParameterSet S>
    void step(S& params, double grad_scale = 1.0, kernels::parallelism par = {}, element_range shard = {},
              std::optional<double> global_norm = {}) {
        grad_scale = detail::clipped_scale(params, grad_scale, m_options.max_grad_norm, shard, global_norm, par, "tessera::optim::adamw");
        ++m_steps;
        const double t = static_cast<double>(m_steps);
        const float lr = static_cast<float>(m_options.learning_rate);
        const float decay = static_cast<float>(1.0 - m_options.learning_rate * m_options.weight_decay);
        const float b1 = static_cast<float>(m_options.beta1), b2 = static_cast<float>(m_options.beta2);
        const float c1 = static_cast<float>(1.0 / (1.0 - std::pow(m_options.beta1, t)));
        const float c2 = static_cast<float>(1.0 / (1.0 - std::pow(m_options.beta2, t)));
        const float eps = static_cast<float>(m_options.eps), gs = static_cast<float>(grad_scale);
        std::size_t i = 0;
        visit_in_range(params, shard, [&](std::string_view name, auto value, auto grad, std::size_t lo, std::size_t hi) {
            using W = typename decltype(value)::value_type;
            using G = std::remove_const_t<typename decltype(grad)::value_type>;
            auto [m, v] = moments(i++, hi - lo);
            const std::uint64_t stream = m_options.rounding.stochastic ? detail::rounding_stream(name, m_steps) : 0;
            kernels::detail::parallel_ranges(par, hi - lo, update_grain, [&](std::size_t from, std::size_t to, std::size_t) {
                detail::over_updates<W, G>(lo + from, lo + to, m_options.rounding, [&]<class V>(std::size_t k) {
                    using kernels::simd::fused_multiply_add;
                    using kernels::simd::square_root;
                    const V g = kernels::simd::load_lanes<V, float>(grad.data() + k) * V(gs);
                    float* const mk = m.data() + (k - lo);
                    float* const vk = v.data() + (k - lo);
                    const V m1 = fused_multiply_add(V(b1), kernels::simd::load_lanes<V, float>(mk), V(1 - b1) * g);
                    const V v1 = fused_multiply_add(V(b2), kernels::simd::load_lanes<V, float>(vk), V(1 - b2) * g * g);
                    kernels::simd::store_lanes(mk, m1);
                    kernels::simd::store_lanes(vk, v1);
                    const V change = V(lr) * (m1 * V(c1)) / (square_root(v1 * V(c2)) + V(eps));
                    const V p = kernels::simd::load_lanes<V, float>(value.data() + k);
                    detail::store_weights(value.data() + k, fused_multiply_add(p, V(decay), -change), m_options.rounding, stream, k);
                });
            });
        });
    }

    /// Keeps the moments of `shard`'s elements only (a replica's part when the state is sharded).
    template <ParameterSet S>
    void keep_shard(S& params, element_range shard) {
        detail::keep_shard(m_m, params, shard, "tessera::optim::adamw");
        detail::keep_shard(m_v, params, shard, "tessera::optim::adamw");
    }
    /// This optimiser with the moments of every element of params, from `shards` (see sgd::gather_shards).
    template <ParameterSet S>
    void gather_shards(S& params, std::span<const adamw* const> shards) {
        std::vector<const std::vector<std::vector<float>>*> m, v;
        for (const adamw* o : shards) m.push_back(&o->m_m), v.push_back(&o->m_v);
        m_m = detail::gather_shards(params, m, "tessera::optim::adamw");
        m_v = detail::gather_shards(params, v, "tessera::optim::adamw");
        if (!shards.empty()) m_steps = shards.front()->m_steps;
    }

    template <class F>
    void visit_state(F&& f) {
        for (std::size_t i = 0; i < m_m.size(); ++i) {
            f("exp_avg." + std::to_string(i), std::span<float>(m_m[i]));
            f("exp_avg_sq." + std::to_string(i), std::span<float>(m_v[i]));
        }
    }
    void set_steps(std::uint64_t s) noexcept { m_steps = s; }

private:
    std::pair<std::span<float>, std::span<float>> moments(std::size_t i, std::size_t n) {
        if (m_m.size() <= i) m_m.resize(i + 1);
        if (m_v.size() <= i) m_v.resize(i + 1);
        if (m_m[i].empty()) m_m[i].assign(n, 0.0f);
        if (m_v[i].empty()) m_v[i].assign(n, 0.0f);
        if (m_m[i].size() != n || m_v[i].size() != n)
            throw std::invalid_argument("tessera::optim::adamw: parameter " + std::to_string(i) + " has " +
                                        std::to_string(n) + " values to update but its moments " + std::to_string(m_m[i].size()) +
                                        " (a different parameter set or shard?)");
        return {m_m[i], m_v[i]};
    }

    adamw_options m_options;
    std::vector<std::vector<float>> m_m, m_v;
    std::uint64_t m_steps = 0;
};

}  // namespace tessera::optim
