#pragma once
// GELU layer, in its erf form (BERT) or its tanh form (GPT-2).
#include "tessera/kernels/gelu.hpp"
#include "tessera/nn/layer.hpp"

namespace tessera::nn {

/// x·Φ(x), or its tanh approximation (kernels::gelu_form); backward from the saved input.
template <Numeric P>
class gelu : public parameter_free {
public:
    using precision = P;
    using T = typename P::data_type;
    using C = typename P::accumulate_type;
    struct state {
        const activation<P>* input = nullptr;
        activation<P> output, grad_input;
    };

    explicit gelu(kernels::gelu_form form = kernels::gelu_form::erf) noexcept : m_form(form) {}
    [[nodiscard]] kernels::gelu_form form() const noexcept { return m_form; }

    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const { return s; }
    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {
        const double n = static_cast<double>(s.size());
        // About 20 operations an element forward (a tanh or an erf), 30 backward: a count, not a measurement.
        return {20 * n, 30 * n, detail::bytes_of(2 * s.size(), sizeof(T)), detail::bytes_of(3 * s.size(), sizeof(T)), 0,
                {pass::elementwise(pass_phase::forward, n, 2), pass::elementwise(pass_phase::backward, n, 3)},
                detail::bytes_of(s.size(), sizeof(T))};  // its output; its input is the layer before's
    }
    const activation<P>& forward(const activation<P>& x, state& st, const context& ctx) {
        detail::ensure_shape(st.output, tensor::shape_of(x));
        kernels::gelu_forward(x.data(), x.size(), st.output.data(), m_form, ws(ctx), ctx.parallel(), ctx.forward_rounding());
        st.input = &x;
        return st.output;
    }
    const activation<P>& backward(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        if (want_dx) {
            detail::ensure_shape(st.grad_input, tensor::shape_of(*st.input));
            kernels::gelu_backward(st.input->data(), dy.data(), dy.size(), st.grad_input.data(), m_form, ws(ctx),
                                   ctx.parallel(), ctx.backward_rounding());
        }
        return st.grad_input;
    }

private:
    kernels::gelu_form m_form;
    [[nodiscard]] kernels::workspace<C>& ws(const context& ctx) noexcept { return detail::workspace_of(ctx, m_ws); }
    kernels::workspace<C> m_ws;  // when the context gives no shared scratch
};

}  // namespace tessera::nn
