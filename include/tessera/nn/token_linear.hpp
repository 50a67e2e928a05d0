#pragma once
// A fully connected layer applied to each position of a sequence: y = x·Wᵀ + b over the last axis.
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "tessera/kernels/initial_values.hpp"
#include "tessera/kernels/linear.hpp"
#include "tessera/nn/layer.hpp"

namespace tessera::nn {

/// PyTorch's nn.Linear on an N × H × W × in activation (every position a row): N × H × W × out.
/// W is (out × in), b (out) or none; initialised normal(0, 0.02), the bias zero, as GPT-2 and BERT
/// initialise their projections (Hugging Face's `initializer_range`).
template <Numeric P>
class token_linear {
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

    token_linear(std::size_t in_features, std::size_t out_features, bool bias = true)
        : token_linear(in_features, out_features, bias, shapes_only) {
        m_weight = tensor::dense<W, 1>::from_shape({m_in * m_out});
        m_dweight = tensor::dense<C, 1>::from_shape({m_in * m_out});
        m_dweight.fill(C(0));
        if (m_has_bias) {
            m_bias = tensor::dense<W, 1>::from_shape({m_out});
            m_dbias = tensor::dense<C, 1>::from_shape({m_out});
            m_dbias.fill(C(0));
        }
        std::mt19937_64 rng(detail::default_seed(0x70C1Eu, in_features, out_features, bias));
        initialize(rng);
    }
    /// From its shapes alone: no weights (nn::shapes_only_t).
    token_linear(std::size_t in_features, std::size_t out_features, bool bias, shapes_only_t)
        : m_in(in_features), m_out(out_features), m_has_bias(bias) {
        if (in_features == 0 || out_features == 0)
            throw tensor::shape_error("tessera::nn::token_linear: features must be positive (in=" +
                                      std::to_string(in_features) + ", out=" + std::to_string(out_features) + ")");
    }

    /// Prices the product as `pieces` products of out_features / pieces outputs each, one after the
    /// other (PopTorch's serializedMatMul in OutputChannels mode, which Graphcore's BERT gives its
    /// vocabulary projection): each piece's plan holds a piece's temporaries; the input gradient adds
    /// the pieces' products in place. The kernels compute the same product either way (modelled
    /// only). std::invalid_argument unless pieces divides out_features.
    void set_serialization(std::size_t pieces) {
        if (pieces == 0 || m_out % pieces != 0)
            throw std::invalid_argument("tessera::nn::token_linear: " + std::to_string(pieces) + " serialized pieces do "
                                        "not divide its " + std::to_string(m_out) + " outputs");
        m_pieces = pieces;
    }
    [[nodiscard]] std::size_t serialization() const noexcept { return m_pieces; }
    [[nodiscard]] std::size_t in_features() const noexcept { return m_in; }
    [[nodiscard]] std::size_t out_features() const noexcept { return m_out; }
    [[nodiscard]] std::size_t parameters() const noexcept { return m_in * m_out + (m_has_bias ? m_out : 0); }

    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const {
        if (s.c != m_in)
            throw tensor::shape_error("tessera::nn::token_linear: input " + s.str() + " has " + std::to_string(s.c) +
                                      " features per position, the layer expects " + std::to_string(m_in));
        return {s.n, s.h, s.w, m_out};
    }
    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {
        const std::size_t rows = s.pixels();
        const double r = static_cast<double>(rows), in = static_cast<double>(m_in), out = static_cast<double>(m_out);
        const double macs = r * in * out, weights = static_cast<double>(m_in * m_out);
        using enum pass_phase;
        nn::cost c{2 * macs, 4 * macs, detail::bytes_of(rows * (m_in + m_out), sizeof(T)) + weights * sizeof(W),
                   detail::bytes_of(2 * rows * (m_in + m_out), sizeof(T)) + weights * double(sizeof(W) + sizeof(C)),
                   parameters(), {}, detail::bytes_of(rows * m_out, sizeof(T))};  // keeps its output (the next layer's input)
        const double piece = out / static_cast<double>(m_pieces);
        for (std::size_t k = 0; k < m_pieces; ++k) {
            c.passes.push_back(pass::contraction(forward, r, piece, in));
            c.passes.push_back(pass::contraction(backward, r, in, piece));
            if (k > 0) c.passes.push_back(pass::elementwise(backward, r * in, 2));  // adds it to the pieces before
            c.passes.push_back(pass::contraction(backward, in, piece, r).of_weights());
        }
        if (m_has_bias) c.passes.push_back(pass::reduction(backward, r * out, 1, out).of_weights());
        return c;
    }
    const activation<P>& forward(const activation<P>& x, state& st, const context& ctx) {
        require_weights();
        const tensor::shape s = tensor::shape_of(x);
        detail::ensure_shape(st.output, output_shape(s));
        kernels::linear_forward(x.data(), s.pixels(), m_in, m_weight.data(), bias(), m_out, st.output.data(), ws(ctx),
                                ctx.gemm(), ctx.forward_rounding());
        st.input = &x;
        return st.output;
    }
    const activation<P>& backward(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        backward_input(dy, st, ctx, want_dx);
        backward_weights(st, ctx);
        return st.grad_input;
    }
    /// The input gradient alone (SplitBackwardLayer); `dy` must stay alive until backward_weights.
    const activation<P>& backward_input(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        const tensor::shape s = tensor::shape_of(*st.input);
        st.grad_output = &dy;
        if (!want_dx) return st.grad_input;
        detail::ensure_shape(st.grad_input, s);
        kernels::linear_backward_data(dy.data(), s.pixels(), m_in, m_weight.data(), m_out, st.grad_input.data(),
                                      ws(ctx), ctx.gemm(), ctx.backward_rounding());
        return st.grad_input;
    }
    /// The weight and bias gradients of the micro-batch backward_input saw (accumulated, +=).
    void backward_weights(state& st, const context& ctx) {
        if (st.grad_output == nullptr)
            throw std::logic_error("tessera::nn::token_linear::backward_weights: no backward_input before it");
        kernels::linear_backward_weights(st.input->data(), st.grad_output->data(), tensor::shape_of(*st.input).pixels(),
                                         m_in, m_out, m_dweight.data(), m_has_bias ? m_dbias.data() : nullptr, ws(ctx),
                                         ctx.gemm());
        st.grad_output = nullptr;
    }
    template <class F>
    void visit_parameters(F&& f, std::string_view prefix = {}) {
        if (m_weight.size() == 0) return;  // shapes only
        f(detail::join(prefix, "weight"), std::span<W>(m_weight.data(), m_weight.size()), detail::flat(m_dweight));
        if (m_has_bias)
            f(detail::join(prefix, "bias"), std::span<W>(m_bias.data(), m_bias.size()), detail::flat(m_dbias));
    }
    template <class F>
    void visit_buffers(F&&, std::string_view = {}) {}
    void initialize(std::mt19937_64& rng) {
        if (m_weight.size() == 0) return;
        kernels::fill_normal(std::span<W>(m_weight.data(), m_weight.size()), 0.02, rng);
        if (m_has_bias) m_bias.fill(kernels::detail::store_as<W>(0.0));
    }

private:
    void require_weights() const {
        if (m_weight.size() == 0)
            throw std::logic_error("tessera::nn::token_linear: built from shapes alone (nn::shapes_only), it cannot run");
    }
    [[nodiscard]] const W* bias() const noexcept { return m_has_bias ? m_bias.data() : nullptr; }
    std::size_t m_in, m_out;
    std::size_t m_pieces = 1;  // set_serialization
    bool m_has_bias;
    tensor::dense<W, 1> m_weight, m_bias;
    tensor::dense<C, 1> m_dweight, m_dbias;
    [[nodiscard]] kernels::workspace<C>& ws(const context& ctx) noexcept { return detail::workspace_of(ctx, m_ws); }
    kernels::workspace<C> m_ws;  // when the context gives no shared scratch
};

}  // namespace tessera::nn
