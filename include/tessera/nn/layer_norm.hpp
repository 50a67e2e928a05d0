#pragma once
// Layer normalisation over each position's features (PyTorch's nn.LayerNorm over the last axis).
#include <cstddef>
#include <stdexcept>
#include <string>

#include "tessera/kernels/layer_norm.hpp"
#include "tessera/nn/layer.hpp"

namespace tessera::nn {

/// y = (x − mean) / √(var + eps) · weight + bias over the `width` channels of every position; the
/// same in training and evaluation (no running statistics). weight starts at 1, bias at 0. eps:
/// 1e-5 in GPT-2, 1e-12 in BERT.
template <Numeric P>
class layer_norm {
public:
    using precision = P;
    using T = typename P::data_type;
    using W = typename P::weight_type;
    using C = typename P::accumulate_type;
    struct state {
        const activation<P>* input = nullptr;
        activation<P> output, grad_input;
        kernels::aligned_vector<C> mean, rstd;  ///< per position, for the backward
    };

    explicit layer_norm(std::size_t width, double eps = 1e-5) : layer_norm(width, eps, shapes_only) {
        m_weight = tensor::dense<W, 1>::from_shape({width});
        m_bias = tensor::dense<W, 1>::from_shape({width});
        m_dweight = tensor::dense<C, 1>::from_shape({width});
        m_dbias = tensor::dense<C, 1>::from_shape({width});
        m_dweight.fill(C(0));
        m_dbias.fill(C(0));
        std::mt19937_64 unused;
        initialize(unused);
    }
    /// From its shapes alone: no weights (nn::shapes_only_t).
    layer_norm(std::size_t width, double eps, shapes_only_t) : m_width(width), m_eps(eps) {
        if (width == 0) throw tensor::shape_error("tessera::nn::layer_norm: width must be positive");
        if (!(eps > 0)) throw std::invalid_argument("tessera::nn::layer_norm: eps must be positive, got " + std::to_string(eps));
    }

    [[nodiscard]] std::size_t width() const noexcept { return m_width; }
    [[nodiscard]] double eps() const noexcept { return m_eps; }
    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const {
        if (s.c != m_width)
            throw tensor::shape_error("tessera::nn::layer_norm: input " + s.str() + " has " + std::to_string(s.c) +
                                      " features per position, the layer normalises " + std::to_string(m_width));
        return s;
    }
    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {
        const double n = static_cast<double>(s.size()), rows = static_cast<double>(s.pixels());
        using enum pass_phase;
        return {8 * n, 14 * n, detail::bytes_of(2 * s.size(), sizeof(T)), detail::bytes_of(3 * s.size(), sizeof(T)),
                2 * m_width,
                {pass::reduction(forward, n, 1, 2 * rows), pass::elementwise(forward, n, 2),
                 pass::reduction(backward, n, 2, 2 * rows), pass::elementwise(backward, n, 3),
                 pass::reduction(backward, n, 2, 2 * static_cast<double>(m_width)).of_weights()},
                detail::bytes_of(s.size(), sizeof(T)) + detail::bytes_of(2 * s.pixels(), sizeof(C))};
    }
    const activation<P>& forward(const activation<P>& x, state& st, const context& ctx) {
        if (m_weight.size() == 0)
            throw std::logic_error("tessera::nn::layer_norm: built from shapes alone (nn::shapes_only), it cannot run");
        const tensor::shape s = output_shape(tensor::shape_of(x));
        detail::ensure_shape(st.output, s);
        st.mean.resize(s.pixels());
        st.rstd.resize(s.pixels());
        kernels::layer_norm_forward(x.data(), s.pixels(), m_width, m_weight.data(), m_bias.data(), static_cast<C>(m_eps),
                                    st.output.data(), st.mean.data(), st.rstd.data(), ws(ctx), ctx.parallel(),
                                    ctx.forward_rounding());
        st.input = &x;
        return st.output;
    }
    const activation<P>& backward(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        const tensor::shape s = tensor::shape_of(*st.input);
        if (want_dx) detail::ensure_shape(st.grad_input, s);
        kernels::layer_norm_backward(st.input->data(), dy.data(), s.pixels(), m_width, m_weight.data(), st.mean.data(),
                                     st.rstd.data(), want_dx ? st.grad_input.data() : static_cast<T*>(nullptr),
                                     m_dweight.data(), m_dbias.data(), ws(ctx), ctx.parallel(), ctx.backward_rounding());
        return st.grad_input;
    }
    template <class F>
    void visit_parameters(F&& f, std::string_view prefix = {}) {
        if (m_weight.size() == 0) return;  // shapes only
        f(detail::join(prefix, "weight"), std::span<W>(m_weight.data(), m_weight.size()), detail::flat(m_dweight));
        f(detail::join(prefix, "bias"), std::span<W>(m_bias.data(), m_bias.size()), detail::flat(m_dbias));
    }
    template <class F>
    void visit_buffers(F&&, std::string_view = {}) {}
    /// weight 1, bias 0 (no draw).
    void initialize(std::mt19937_64&) {
        m_weight.fill(kernels::detail::store_as<W>(1.0));
        m_bias.fill(kernels::detail::store_as<W>(0.0));
    }

private:
    std::size_t m_width;
    double m_eps;
    tensor::dense<W, 1> m_weight, m_bias;
    tensor::dense<C, 1> m_dweight, m_dbias;
    [[nodiscard]] kernels::workspace<C>& ws(const context& ctx) noexcept { return detail::workspace_of(ctx, m_ws); }
    kernels::workspace<C> m_ws;  // when the context gives no shared scratch
};

}  // namespace tessera::nn
