#pragma once
// LAMB: Adam's step scaled per tensor by a trust ratio (You et al. 2019; poptorch.optim.LAMB, the
// optimiser of Graphcore's BERT).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/kernels/simd.hpp"
#include "tessera/optim/clip.hpp"
#include "tessera/optim/parameters.hpp"
#include "tessera/optim/shard.hpp"
#include "tessera/optim/square_sum.hpp"
#include "tessera/optim/weight_rounding.hpp"

namespace tessera::optim {

/// poptorch.optim.LAMB's hyper-parameters (its defaults: lr 1e-3, betas (0.9, 0.999), eps 1e-8,
/// weight decay 1e-2, bias correction on, no cap on the weight norm).
struct lamb_options {
    double learning_rate = 1e-3;
    double beta1 = 0.9;
    double beta2 = 0.999;
    double eps = 1e-8;
    double weight_decay = 1e-2;
    bool bias_correction = true;
    /// ‖w‖ in the trust ratio is capped at this (PopTorch's max_weight_norm; +inf: no cap).
    double max_weight_norm = std::numeric_limits<double>::infinity();
    weight_rounding rounding{};  ///< how updated 16-bit weights are stored
    /// Clip the gradients to this global L2 norm before the step (PopTorch's max_grad_norm; +inf: never).
    double max_grad_norm = std::numeric_limits<double>::infinity();
};

/// For each parameter tensor w with gradient g (× grad_scale, clipped by max_grad_norm):
///   m ← β1·m + (1−β1)·g;  v ← β2·v + (1−β2)·g²;  u = m̂ / (√v̂ + eps) + wd·w, with m̂ = m / (1−β1ᵗ),
///   v̂ = v / (1−β2ᵗ) under bias correction (else m, v);  r = min(‖w‖, max_weight_norm) / ‖u‖
///   (1 when either norm is 0);  w ← w − lr·r·u.
/// The norms are exact fixed-point sums (square_sum): a tensor split between threads, or between
/// the replicas that shard the state (their parts added by a replica_sum), gives the same r.
class lamb {
public:
    explicit lamb(lamb_options options = {}) : m_options(options) {
        if (options.learning_rate < 0 || options.weight_decay < 0 || options.eps <= 0 || options.beta1 < 0 ||
            options.beta1 >= 1 || options.beta2 < 0 || options.beta2 >= 1 || !(options.max_weight_norm > 0))
            throw std::invalid_argument("tessera::optim::lamb: need lr >= 0, wd >= 0, eps > 0, betas in [0, 1) and "
                                        "max_weight_norm > 0 (beta1=" + std::to_string(options.beta1) + ", beta2=" +
                                        std::to_string(options.beta2) + ", max_weight_norm=" +
                                        std::to_string(options.max_weight_norm) + ")");
        detail::check_max_grad_norm(options.max_grad_norm, "tessera::optim::lamb");
    }

    [[nodiscard]] lamb_options& options() noexcept { return m_options; }
    [[nodiscard]] const lamb_options& options() const noexcept { return m_options; }
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

    /// One step over whole tensors. A large tensor's elements are split between par's threads in two
    /// passes: the first updates the moments and sums ‖u‖² and ‖w‖², the second recomputes u from
    /// them and moves w. `global_norm`: the gradient norm over the whole model when params is a part
    /// of it (a pipeline stage), for max_grad_norm; else params' own.
    template <ParameterSet S>
    void step(S& params, double grad_scale = 1.0, kernels::parallelism par = {}, element_range shard = {},
              std::optional<double> global_norm = {}) {
        if (!shard.whole())
            throw std::invalid_argument("tessera::optim::lamb: a step over a shard of the weights needs the other "
                                        "replicas' parts of each tensor's norms (the replica_sum overload)");
        run_step(params, grad_scale, par, shard, global_norm, nullptr);
    }
    /// One step over `shard` of the weights (sharded optimiser state): each tensor's norms add this
    /// replica's part to the others' through `across_replicas`, which every replica calls once.
    template <ParameterSet S>
    void step(S& params, double grad_scale, kernels::parallelism par, element_range shard,
              std::optional<double> global_norm, replica_sum across_replicas) {
        run_step(params, grad_scale, par, shard, global_norm, &across_replicas);
    }

    /// Keeps the moments of `shard`'s elements only (a replica's part when the state is sharded).
    template <ParameterSet S>
    void keep_shard(S& params, element_range shard) {
        detail::keep_shard(m_m, params, shard, "tessera::optim::lamb");
        detail::keep_shard(m_v, params, shard, "tessera::optim::lamb");
    }
    /// This optimiser with the moments of every element of params, from `shards` (see sgd::gather_shards).
    template <ParameterSet S>
    void gather_shards(S& params, std::span<const lamb* const> shards) {
        std::vector<const std::vector<std::vector<float>>*> m, v;
        for (const lamb* o : shards) m.push_back(&o->m_m), v.push_back(&o->m_v);
        m_m = detail::gather_shards(params, m, "tessera::optim::lamb");
        m_v = detail::gather_shards(params, v, "tessera::optim::lamb");
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
    template <ParameterSet S>
    void run_step(S& params, double grad_scale, kernels::parallelism par, element_range shard,
                  std::optional<double> global_norm, const replica_sum* across) {
        grad_scale = detail::clipped_scale(params, grad_scale, m_options.max_grad_norm, shard, global_norm, par,
                                           "tessera::optim::lamb");
        ++m_steps;
        const double t = static_cast<double>(m_steps);
        const bool bc = m_options.bias_correction;
        const float b1 = static_cast<float>(m_options.beta1), b2 = static_cast<float>(m_options.beta2);
        const float c1 = bc ? static_cast<float>(1.0 / (1.0 - std::pow(m_options.beta1, t))) : 1.0f;
        const float c2 = bc ? static_cast<float>(1.0 / (1.0 - std::pow(m_options.beta2, t))) : 1.0f;
        const float eps = static_cast<float>(m_options.eps), gs = static_cast<float>(grad_scale);
        const float wd = static_cast<float>(m_options.weight_decay);
        // u = m̂ / (√v̂ + eps) + wd·w of element k (moments at k − lo): both passes compute it alike.
        const auto update = [&]<class V>(const auto* w, const float* m, const float* v, std::size_t k) {
            using kernels::simd::fused_multiply_add;
            using kernels::simd::square_root;
            const V p = kernels::simd::load_lanes<V, float>(w + k);
            const V m1 = kernels::simd::load_lanes<V, float>(m), v1 = kernels::simd::load_lanes<V, float>(v);
            return fused_multiply_add(V(wd), p, (m1 * V(c1)) / (square_root(v1 * V(c2)) + V(eps)));
        };
        std::vector<square_sum> norms;  // per tensor: ‖u‖², then ‖w‖² (this replica's part of them)
        std::size_t i = 0;
        visit_in_range(params, shard, [&](std::string_view, auto value, auto grad, std::size_t lo, std::size_t hi) {
            using W = std::remove_const_t<typename decltype(value)::value_type>;
            using G = std::remove_const_t<typename decltype(grad)::value_type>;
            auto [m, v] = moments(i++, hi - lo);
            square_sum u_squares, w_squares;
            std::mutex merge;
            kernels::detail::parallel_ranges(par, hi - lo, update_grain, [&](std::size_t from, std::size_t to, std::size_t) {
                square_sum us, ws;
                detail::over_updates<W, G>(lo + from, lo + to, m_options.rounding, [&]<class V>(std::size_t k) {
                    using kernels::simd::fused_multiply_add;
                    const V g = kernels::simd::load_lanes<V, float>(grad.data() + k) * V(gs);
                    float* const mk = m.data() + (k - lo);
                    float* const vk = v.data() + (k - lo);
                    kernels::simd::store_lanes(mk, fused_multiply_add(V(b1), kernels::simd::load_lanes<V, float>(mk), V(1 - b1) * g));
                    kernels::simd::store_lanes(vk, fused_multiply_add(V(b2), kernels::simd::load_lanes<V, float>(vk), V(1 - b2) * g * g));
                    add_squares(us, update.template operator()<V>(value.data(), mk, vk, k));
                    add_squares(ws, kernels::simd::load_lanes<V, float>(value.data() + k));
                });
                const std::lock_guard lock(merge);
                u_squares += us;  // exact sums: the merges' order does not matter
                w_squares += ws;
            });
            norms.push_back(u_squares), norms.push_back(w_squares);
        });
        if (across != nullptr) {  // the other replicas' parts, exactly (square_sum's chunks)
            std::vector<float> chunks(norms.size() * square_sum::chunk_count);
            for (std::size_t j = 0; j < norms.size(); ++j)
                norms[j].to_chunks(std::span<float>(chunks).subspan(j * square_sum::chunk_count, square_sum::chunk_count));
            (*across)(chunks);
            for (std::size_t j = 0; j < norms.size(); ++j)
                norms[j] = square_sum::from_chunks(std::span<const float>(chunks).subspan(j * square_sum::chunk_count,
                                                                                          square_sum::chunk_count));
        }
        i = 0;
        visit_in_range(params, shard, [&](std::string_view name, auto value, auto grad, std::size_t lo, std::size_t hi) {
            using W = std::remove_const_t<typename decltype(value)::value_type>;
            using G = std::remove_const_t<typename decltype(grad)::value_type>;
            auto [m, v] = moments(i, hi - lo);
            const double u_norm = std::sqrt(norms[2 * i].value());
            const double w_norm = std::min(std::sqrt(norms[2 * i + 1].value()), m_options.max_weight_norm);
            ++i;
            const double ratio = w_norm > 0 && u_norm > 0 ? w_norm / u_norm : 1.0;
            const float step = static_cast<float>(m_options.learning_rate * ratio);
            const std::uint64_t stream = m_options.rounding.stochastic ? detail::rounding_stream(name, m_steps) : 0;
            kernels::detail::parallel_ranges(par, hi - lo, update_grain, [&](std::size_t from, std::size_t to, std::size_t) {
                detail::over_updates<W, G>(lo + from, lo + to, m_options.rounding, [&]<class V>(std::size_t k) {
                    using kernels::simd::fused_multiply_add;
                    const V p = kernels::simd::load_lanes<V, float>(value.data() + k);
                    const V u = update.template operator()<V>(value.data(), m.data() + (k - lo), v.data() + (k - lo), k);
                    detail::store_weights(value.data() + k, fused_multiply_add(V(-step), u, p), m_options.rounding, stream, k);
                });
            });
        });
    }

    template <class V>
    static void add_squares(square_sum& s, const V& x) noexcept {
        if constexpr (std::is_arithmetic_v<V>) {
            s.add(x);
        } else {
            alignas(64) float lanes[V::size];
            x.store_aligned(lanes);
            for (const float e : lanes) s.add(e);
        }
    }
    std::pair<std::span<float>, std::span<float>> moments(std::size_t i, std::size_t n) {
        if (m_m.size() <= i) m_m.resize(i + 1);
        if (m_v.size() <= i) m_v.resize(i + 1);
        if (m_m[i].empty()) m_m[i].assign(n, 0.0f);
        if (m_v[i].empty()) m_v[i].assign(n, 0.0f);
        if (m_m[i].size() != n || m_v[i].size() != n)
            throw std::invalid_argument("tessera::optim::lamb: parameter " + std::to_string(i) + " has " + std::to_string(n) +
                                        " values but its moments " + std::to_string(m_m[i].size()) +
                                        " (a different parameter set?)");
        return {m_m[i], m_v[i]};
    }

    lamb_options m_options;
    std::vector<std::vector<float>> m_m, m_v;
    std::uint64_t m_steps = 0;
};

}  // namespace tessera::optim
