#pragma once
// ReLU layer.
#include "tessera/kernels/activation.hpp"
#include "tessera/nn/layer.hpp"

namespace tessera::nn {

/// max(x, 0); backward masks by the saved output.
template <Numeric P>
class relu : public parameter_free {
public:
    using precision = P;
    using T = typename P::data_type;
    using C = typename P::accumulate_type;
    struct state {
        activation<P> output, grad_input;
    };

    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const { return s; }
    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {
        const double n = static_cast<double>(s.size());
        return {n, n, detail::bytes_of(2 * s.size(), sizeof(T)), detail::bytes_of(3 * s.size(), sizeof(T)), 0,
                {pass::elementwise(pass_phase::forward, n, 2), pass::elementwise(pass_phase::backward, n, 3)},
                detail::bytes_of(s.size(), sizeof(T))};  // keeps its output (its backward's mask)
    }
    const activation<P>& forward(const activation<P>& x, state& st, const context& ctx) {
        detail::ensure_shape(st.output, tensor::shape_of(x));
        kernels::relu_forward(x.data(), x.size(), st.output.data(), ws(ctx), ctx.parallel());
        return st.output;
    }
    const activation<P>& backward(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        if (want_dx) {
            detail::ensure_shape(st.grad_input, tensor::shape_of(st.output));
            kernels::relu_backward(st.output.data(), dy.data(), dy.size(), st.grad_input.data(), ws(ctx), ctx.parallel());
        }
        return st.grad_input;
    }

private:
    [[nodiscard]] kernels::workspace<C>& ws(const context& ctx) noexcept { return detail::workspace_of(ctx, m_ws); }
    kernels::workspace<C> m_ws;  // when the context gives no shared scratch
};

}  // namespace tessera::nn
