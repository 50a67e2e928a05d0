#pragma once
// One optimizer type for a command line that chooses SGD, AdamW or LAMB at run time (one set of sessions).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include <tessera/optim.hpp>

namespace tessera::programs {

/// optim::sgd, optim::adamw or optim::lamb behind one type: every call forwards to the one it holds.
class any_optimizer {
public:
    any_optimizer(optim::sgd o) : m_opt(std::move(o)) {}    // NOLINT(google-explicit-constructor)
    any_optimizer(optim::adamw o) : m_opt(std::move(o)) {}  // NOLINT(google-explicit-constructor)
    any_optimizer(optim::lamb o) : m_opt(std::move(o)) {}   // NOLINT(google-explicit-constructor)

    /// What every optimizer held has: its max_grad_norm (staged_network asks for the global norm).
    struct common_options {
        double max_grad_norm;
    };
    [[nodiscard]] common_options options() const {
        return std::visit([](const auto& o) { return common_options{o.options().max_grad_norm}; }, m_opt);
    }

    template <class S>
    void step(S& params, double grad_scale = 1.0, kernels::parallelism par = {}, optim::element_range shard = {},
              std::optional<double> global_norm = {}) {
        std::visit([&](auto& o) { o.step(params, grad_scale, par, shard, global_norm); }, m_opt);
    }
    /// A step over a shard whose update needs sums over the replicas (LAMB's norms); the others ignore them.
    template <class S>
    void step(S& params, double grad_scale, kernels::parallelism par, optim::element_range shard,
              std::optional<double> global_norm, optim::replica_sum across_replicas) {
        std::visit([&]<class O>(O& o) {
            if constexpr (std::is_same_v<O, optim::lamb>)
                o.step(params, grad_scale, par, shard, global_norm, across_replicas);
            else
                o.step(params, grad_scale, par, shard, global_norm);
        }, m_opt);
    }
    template <class S>
    void prepare(S& params, optim::element_range shard = {}) {
        std::visit([&](auto& o) { o.prepare(params, shard); }, m_opt);
    }
    template <class S>
    void keep_shard(S& params, optim::element_range shard) {
        std::visit([&](auto& o) { o.keep_shard(params, shard); }, m_opt);
    }
    /// Gathers the shards' state (each holding the same kind of optimizer as this one).
    template <class S>
    void gather_shards(S& params, std::span<const any_optimizer* const> shards) {
        std::visit(
            [&]<class O>(O& o) {
                std::vector<const O*> parts;
                for (const any_optimizer* s : shards) parts.push_back(&std::get<O>(s->m_opt));
                o.gather_shards(params, std::span<const O* const>(parts));
            },
            m_opt);
    }
    template <class F>
    void visit_state(F&& f) {
        std::visit([&](auto& o) { o.visit_state(f); }, m_opt);
    }
    [[nodiscard]] std::uint64_t steps() const {
        return std::visit([](const auto& o) { return o.steps(); }, m_opt);
    }
    void set_steps(std::uint64_t n) {
        std::visit([&](auto& o) { o.set_steps(n); }, m_opt);
    }
    void set_learning_rate(double lr) {
        std::visit([&](auto& o) { o.set_learning_rate(lr); }, m_opt);
    }
    /// "sgd", "adamw" or "lamb": the optimizer held.
    [[nodiscard]] const char* name() const noexcept {
        return m_opt.index() == 0 ? "sgd" : m_opt.index() == 1 ? "adamw" : "lamb";
    }
    [[nodiscard]] std::size_t state_values_per_parameter() const {
        return std::visit([](const auto& o) { return o.state_values_per_parameter(); }, m_opt);
    }
    /// How the optimizer held stores updated 16-bit weights.
    [[nodiscard]] optim::weight_rounding rounding() const {
        return std::visit([](const auto& o) { return o.options().rounding; }, m_opt);
    }

private:
    std::variant<optim::sgd, optim::adamw, optim::lamb> m_opt;
};

}  // namespace tessera::programs
