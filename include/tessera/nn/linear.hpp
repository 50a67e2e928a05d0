#pragma once
// Fully connected layer: y = x·Wᵀ + b over the flattened (h·w·c) features of each sample.
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "tessera/kernels/linear.hpp"
#include "tessera/kernels/initial_values.hpp"
#include "tessera/kernels/instances.hpp"
#include "tessera/nn/layer.hpp"

namespace tessera::nn {

/// W is (out × in) and b (out), initialised uniform(±1/√in) as PyTorch's nn.Linear.
template <Numeric P>
class linear {
public:
    using precision = P;
    using T = typename P::data_type;
    using W = typename P::weight_type;
    using C = typename P::accumulate_type;
    struct state {
        const activation<P>* input = nullptr;
        const activation<P>* grad_output = nullptr;  ///< between backward_input and backward_weights
        activation<P> output, grad_input;
    };

    linear(std::size_t in_features, std::size_t out_features) : linear(in_features, out_features, defer_initialization) {
        // Usable as constructed (seeded by the layer's shape); initialize(rng) draws again.
        std::mt19937_64 rng(detail::default_seed(0x11EA4u, in_features, out_features, 0));
        initialize(rng);
    }
    /// From its shapes alone: no weights (nn::shapes_only_t).
    linear(std::size_t in_features, std::size_t out_features, shapes_only_t) : m_in(in_features), m_out(out_features) {
        if (in_features == 0 || out_features == 0)
            throw tensor::shape_error("tessera::nn::linear: features must be positive (in=" + std::to_string(in_features) +
                                      ", out=" + std::to_string(out_features) + ")");
    }
    /// The weights and bias left zero until initialize(rng) (see defer_initialization_t).
    linear(std::size_t in_features, std::size_t out_features, defer_initialization_t)
        : m_in(in_features), m_out(out_features), m_weight(tensor::dense<W, 1>::from_shape({in_features * out_features})),
          m_bias(tensor::dense<W, 1>::from_shape({out_features})),
          m_dweight(tensor::dense<C, 1>::from_shape({in_features * out_features})),
          m_dbias(tensor::dense<C, 1>::from_shape({out_features})) {
        if (in_features == 0 || out_features == 0)
            throw tensor::shape_error("tessera::nn::linear: features must be positive (in=" + std::to_string(in_features) +
                                      ", out=" + std::to_string(out_features) + ")");
        m_weight.fill(kernels::detail::store_as<W>(0.0));
        m_bias.fill(kernels::detail::store_as<W>(0.0));
        m_dweight.fill(C(0));
        m_dbias.fill(C(0));
    }

    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const {
        if (s.per_sample() != m_in)
            throw tensor::shape_error("tessera::nn::linear: input " + s.str() + " has " + std::to_string(s.per_sample()) +
                                      " features per sample, the layer expects " + std::to_string(m_in));
        return {s.n, 1, 1, m_out};
    }
    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {
        const double macs = static_cast<double>(s.n * m_in * m_out);
        const double n = static_cast<double>(s.n), in = static_cast<double>(m_in), out = static_cast<double>(m_out);
        using enum pass_phase;
        const std::size_t weights = m_in * m_out;
        return {2 * macs, 4 * macs, detail::bytes_of(s.n * (m_in + m_out), sizeof(T)) + detail::bytes_of(weights, sizeof(W)),
                detail::bytes_of(2 * s.n * (m_in + m_out), sizeof(T)) + detail::bytes_of(weights, sizeof(W) + sizeof(C)),
                weights + m_out,
                {pass::contraction(forward, n, out, in), pass::contraction(backward, n, in, out),
                 pass::contraction(backward, in, out, n).of_weights(),      // weight gradient, summed over the samples
                 pass::reduction(backward, n * out, 1, out).of_weights()},  // bias gradient
                detail::bytes_of(s.n * m_out, sizeof(T))};  // keeps its output
    }
    const activation<P>& forward(const activation<P>& x, state& st, const context& ctx) {
        if (m_weight.size() == 0)
            throw std::logic_error("tessera::nn::linear: built from shapes alone (nn::shapes_only), it cannot run");
        const tensor::shape s = tensor::shape_of(x);
        detail::ensure_shape(st.output, output_shape(s));
        kernels::linear_forward(x.data(), s.n, m_in, m_weight.data(), m_bias.data(), m_out, st.output.data(), ws(ctx), ctx.gemm(),
                                ctx.forward_rounding());
        st.input = &x;
        return st.output;
    }
    const activation<P>& backward(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        const tensor::shape s = tensor::shape_of(*st.input);
        if (want_dx) detail::ensure_shape(st.grad_input, s);
        kernels::linear_backward(st.input->data(), dy.data(), s.n, m_in, m_weight.data(), m_out,
                                 want_dx ? st.grad_input.data() : static_cast<T*>(nullptr), m_dweight.data(),
                                 m_dbias.data(), ws(ctx), ctx.gemm(), ctx.backward_rounding());
        return st.grad_input;
    }
    /// The input gradient alone (SplitBackwardLayer); `dy` must stay alive until backward_weights.
    const activation<P>& backward_input(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        const tensor::shape s = tensor::shape_of(*st.input);
        st.grad_output = &dy;
        if (!want_dx) return st.grad_input;
        detail::ensure_shape(st.grad_input, s);
        kernels::linear_backward_data(dy.data(), s.n, m_in, m_weight.data(), m_out, st.grad_input.data(), ws(ctx),
                                      ctx.gemm(), ctx.backward_rounding());
        return st.grad_input;
    }
    /// The weight and bias gradients of the micro-batch backward_input saw (accumulated, +=).
    void backward_weights(state& st, const context& ctx) {
        if (st.grad_output == nullptr)
            throw std::logic_error("tessera::nn::linear::backward_weights: no backward_input before it");
        kernels::linear_backward_weights(st.input->data(), st.grad_output->data(), tensor::shape_of(*st.input).n, m_in,
                                         m_out, m_dweight.data(), m_dbias.data(), ws(ctx), ctx.gemm());
        st.grad_output = nullptr;
    }
    template <class F>
    void visit_parameters(F&& f, std::string_view prefix = {}) {
        f(detail::join(prefix, "weight"), std::span<W>(m_weight.data(), m_weight.size()), detail::flat(m_dweight));
        f(detail::join(prefix, "bias"), std::span<W>(m_bias.data(), m_bias.size()), detail::flat(m_dbias));
    }
    template <class F>
    void visit_buffers(F&&, std::string_view = {}) {}
    void initialize(std::mt19937_64& rng) {
        const double bound = 1.0 / std::sqrt(static_cast<double>(m_in));
        kernels::fill_uniform(std::span<W>(m_weight.data(), m_weight.size()), bound, rng);
        kernels::fill_uniform(std::span<W>(m_bias.data(), m_bias.size()), bound, rng);
    }

private:
    std::size_t m_in, m_out;
    tensor::dense<W, 1> m_weight, m_bias;
    tensor::dense<C, 1> m_dweight, m_dbias;
    [[nodiscard]] kernels::workspace<C>& ws(const context& ctx) noexcept { return detail::workspace_of(ctx, m_ws); }
    kernels::workspace<C> m_ws;  // when the context gives no shared scratch
};

}  // namespace tessera::nn
