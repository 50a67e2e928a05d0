#pragma once
// Dropout layer: the context's counter-based stream decides, so the mask is recomputed, not kept.
#include <stdexcept>
#include <string>

#include "tessera/kernels/dropout.hpp"
#include "tessera/nn/layer.hpp"

namespace tessera::nn {

/// Zeroes each value with probability p and scales the others by 1 / (1 − p) in training, when the
/// context's dropout stream is active (nn::context::dropout); passes everything otherwise
/// (evaluation). Which values it keeps depends on the stream (seed, step, the layer's place) and the
/// value's place in the combined batch, not on the thread count, the strategy or the replica. When it
/// drops nothing (p = 0, or no active stream) it returns its input, and its backward the gradient, as
/// they are: no copy, no buffer.
template <Numeric P>
class dropout : public parameter_free {
public:
    using precision = P;
    using T = typename P::data_type;
    using C = typename P::accumulate_type;
    struct state {
        activation<P> output, grad_input;
        kernels::dropout_stream stream{};  ///< the forward's, for the backward
    };

    explicit dropout(double p) : m_p(p) { (void)kernels::dropout_threshold(p); }
    [[nodiscard]] double probability() const noexcept { return m_p; }

    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const { return s; }
    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {
        if (m_p == 0) return {};  // the identity: nothing runs, nothing is kept
        const double n = static_cast<double>(s.size());
        return {2 * n, 2 * n, detail::bytes_of(2 * s.size(), sizeof(T)), detail::bytes_of(2 * s.size(), sizeof(T)), 0,
                {pass::elementwise(pass_phase::forward, n, 2), pass::elementwise(pass_phase::backward, n, 2)},
                detail::bytes_of(s.size(), sizeof(T))};
    }
    const activation<P>& forward(const activation<P>& x, state& st, const context& ctx) {
        st.stream = ctx.mode == mode::train ? ctx.dropout : kernels::dropout_stream{};
        if (!drops(st)) return x;
        const tensor::shape s = tensor::shape_of(x);
        detail::ensure_shape(st.output, s);
        kernels::dropout_forward(x.data(), s.n, s.per_sample(), m_p, st.stream, st.output.data(), ws(ctx), ctx.parallel(),
                                 ctx.forward_rounding());
        return st.output;
    }
    const activation<P>& backward(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        if (want_dx && !drops(st)) return dy;
        if (want_dx) {
            const tensor::shape s = tensor::shape_of(dy);
            detail::ensure_shape(st.grad_input, s);
            kernels::dropout_forward(dy.data(), s.n, s.per_sample(), m_p, st.stream, st.grad_input.data(), ws(ctx),
                                     ctx.parallel(), ctx.backward_rounding());
        }
        return st.grad_input;
    }

private:
    [[nodiscard]] bool drops(const state& st) const noexcept { return st.stream.active && m_p > 0; }
    double m_p;
    [[nodiscard]] kernels::workspace<C>& ws(const context& ctx) noexcept { return detail::workspace_of(ctx, m_ws); }
    kernels::workspace<C> m_ws;  // when the context gives no shared scratch
};

}  // namespace tessera::nn
