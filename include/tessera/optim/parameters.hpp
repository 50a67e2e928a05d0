#pragma once
// What optimisers work on: anything that visits (name, value, gradient) — a model or a range of its units.
#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/thread_pool.hpp"

namespace tessera::optim {

namespace detail {
/// A visitor accepting any parameter; used only to state the concept.
struct any_parameter_visitor {
    template <class V, class G>
    void operator()(std::string_view, std::span<V>, std::span<G>) const noexcept {}
};
}  // namespace detail

/// A set of parameters: visit_parameters(f) calls f(name, std::span<W> value, std::span<G> grad) for
/// each, always in the same order (an nn::Layer, a resnet, or unit_range over part of one).
template <class S>
concept ParameterSet = requires(S& s, detail::any_parameter_visitor f) { s.visit_parameters(f); };

/// The parameters (and buffers) of units [first, last) of a model that exposes units (nn::resnet):
/// what one pipeline stage owns and updates.
template <class Model>
class unit_range {
public:
    unit_range(Model& model, std::size_t first, std::size_t last) : m_model(&model), m_first(first), m_last(last) {}
    template <class F>
    void visit_parameters(F&& f) {
        m_model->visit_unit_parameters(m_first, m_last, f);
    }
    template <class F>
    void visit_buffers(F&& f) {
        m_model->visit_unit_buffers(m_first, m_last, f);
    }

private:
    Model* m_model;
    std::size_t m_first, m_last;
};

/// Elements of one parameter per thread below which an optimiser's pass over it stays on one thread.
/// At 32 Ki, every parameter of ResNet-20 (the largest, a 64-channel 3×3 convolution's weights, holds
/// 36,864 values) was updated on the calling thread alone while a second thread waited, and fell
/// asleep when the update outlasted its spin; at 4 Ki the 32- and 64-channel convolutions' weights
/// are split between two threads.
inline constexpr std::size_t update_grain = std::size_t{1} << 12;

/// Sets every gradient to zero; a large parameter's elements are split between par's threads.
template <ParameterSet S>
void zero_grad(S& params, kernels::parallelism par = {}) {
    params.visit_parameters([&](std::string_view, auto, auto grad) {
        kernels::detail::parallel_ranges(par, grad.size(), update_grain, [&](std::size_t b, std::size_t e, std::size_t) {
            std::fill(grad.begin() + static_cast<std::ptrdiff_t>(b), grad.begin() + static_cast<std::ptrdiff_t>(e), 0);
        });
    });
}

/// True when every gradient is finite (no inf or NaN): the overflow test of dynamic loss scaling.
template <ParameterSet S>
[[nodiscard]] bool gradients_finite(S& params) {
    bool finite = true;
    params.visit_parameters([&](std::string_view, auto, auto grad) {
        if (!finite) return;
        for (const auto g : grad)
            if (!std::isfinite(static_cast<double>(g))) {
                finite = false;
                return;
            }
    });
    return finite;
}

/// Multiplies every gradient by factor (e.g. 1/loss scale, or 1/G for a mean over micro-batches).
template <ParameterSet S>
void scale_gradients(S& params, double factor) {
    params.visit_parameters([&](std::string_view, auto, auto grad) {
        using G = typename decltype(grad)::value_type;
        for (auto& g : grad) g = static_cast<G>(g * factor);
    });
}

/// Number of parameter tensors and of scalar parameters.
template <ParameterSet S>
[[nodiscard]] std::size_t parameter_count(S& params) {
    std::size_t n = 0;
    params.visit_parameters([&](std::string_view, auto v, auto) { n += v.size(); });
    return n;
}

}  // namespace tessera::optim
