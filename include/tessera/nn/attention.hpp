#pragma once
// Multi-head scaled dot-product attention on a fused QKV activation (no weights of its own).
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "tessera/kernels/attention.hpp"
#include "tessera/nn/layer.hpp"

namespace tessera::nn {

/// N × 1 × T × 3d (the queries, keys and values of every head, as a fused QKV projection writes
/// them: kernels::attention_shape) to N × 1 × T × d: softmax(Q·Kᵀ / √(d/heads)) · V per head, the
/// heads side by side. Causal (GPT) or not (BERT); the context's segments
/// (nn::context::segments) mask padding and keep packed sequences apart. Dropout on the probabilities
/// (GPT-2's attn_pdrop) draws from the context's dropout stream in training. Keeps the probabilities
/// (N × heads × T × T, before dropout) for the backward.
template <Numeric P>
class attention : public parameter_free {
public:
    using precision = P;
    using T = typename P::data_type;
    using C = typename P::accumulate_type;
    struct state {
        const activation<P>* input = nullptr;
        const std::uint16_t* segments = nullptr;
        kernels::dropout_stream stream{};  ///< the forward's, for the backward
        activation<P> probabilities, output, grad_input;
    };

    /// Throws for no head, or a dropout probability outside [0, 1).
    attention(std::size_t heads, bool causal, double dropout = 0.0) : m_heads(heads), m_causal(causal), m_dropout(dropout) {
        if (heads == 0) throw tensor::shape_error("tessera::nn::attention: needs at least one head");
        (void)kernels::dropout_threshold(dropout);
    }
    [[nodiscard]] std::size_t heads() const noexcept { return m_heads; }
    [[nodiscard]] bool causal() const noexcept { return m_causal; }
    [[nodiscard]] double dropout() const noexcept { return m_dropout; }

    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const {
        if (s.h != 1 || s.c % (3 * m_heads) != 0)
            throw tensor::shape_error("tessera::nn::attention: input " + s.str() + " is not n × 1 × length × 3·d with d a "
                                      "multiple of the " + std::to_string(m_heads) + " heads");
        return {s.n, 1, s.w, s.c / 3};
    }
    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {
        const tensor::shape out = output_shape(s);
        const kernels::attention_shape a = shape_of(s);
        const double L = static_cast<double>(a.length), dh = static_cast<double>(a.head_width);
        const double pairs = static_cast<double>(a.samples * a.heads), probs = static_cast<double>(a.probabilities());
        const double macs = 2 * pairs * L * L * dh;  // Q·Kᵀ and P·V
        using enum pass_phase;
        const double drop = m_dropout > 0 ? 1 : 0;  // the mask's multiply, forward and backward
        return {2 * macs + (5 + drop) * probs, 4 * macs + (4 + drop) * probs,
                detail::bytes_of(s.size() + out.size() + a.probabilities(), sizeof(T)),
                detail::bytes_of(2 * (s.size() + out.size()) + a.probabilities(), sizeof(T)), 0,
                // The products of two activations are batched over the (sample, head) pairs; the
                // softmax is popnn's: the rows' maxima, exp(x − max), their sums, the scale by 1/sum
                // (lib/popnn/NonLinearity.cpp, softmaxImpl); its gradient y·g, the rows' sums, y·(g − sum).
                {pass::batched(forward, pairs, L, L, dh), pass::reduction(forward, probs, 1, pairs * L),
                 pass::elementwise(forward, probs, 2 + drop), pass::reduction(forward, probs, 1, pairs * L),
                 pass::elementwise(forward, probs, 2), pass::batched(forward, pairs, L, dh, L),
                 pass::batched(backward, pairs, L, dh, L), pass::batched(backward, pairs, L, L, dh),
                 pass::elementwise(backward, probs, 3 + drop), pass::reduction(backward, probs, 1, pairs * L),
                 pass::elementwise(backward, probs, 3), pass::batched(backward, pairs, L, dh, L),
                 pass::batched(backward, pairs, L, dh, L)},
                detail::bytes_of(out.size() + a.probabilities(), sizeof(T))};
    }
    const activation<P>& forward(const activation<P>& x, state& st, const context& ctx) {
        const tensor::shape s = tensor::shape_of(x);
        const kernels::attention_shape a = shape_of(s);
        detail::ensure_shape(st.output, output_shape(s));
        detail::ensure_shape(st.probabilities, {a.samples, a.heads, a.length, a.length});
        st.segments = ctx.segments;
        st.stream = ctx.mode == mode::train ? ctx.dropout : kernels::dropout_stream{};
        kernels::attention_forward(x.data(), a, {m_causal, ctx.segments}, st.probabilities.data(), st.output.data(),
                                   ws(ctx), ctx.parallel(), ctx.forward_rounding().child(1), ctx.forward_rounding(),
                                   {m_dropout, st.stream});
        st.input = &x;
        return st.output;
    }
    const activation<P>& backward(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        if (want_dx) {
            const tensor::shape s = tensor::shape_of(*st.input);
            detail::ensure_shape(st.grad_input, s);
            kernels::attention_backward(st.input->data(), st.probabilities.data(), dy.data(), shape_of(s),
                                        {m_causal, st.segments}, st.grad_input.data(), ws(ctx), ctx.parallel(), ctx.backward_rounding(),
                                        {m_dropout, st.stream});
        }
        return st.grad_input;
    }

private:
    [[nodiscard]] kernels::attention_shape shape_of(const tensor::shape& s) const {
        (void)output_shape(s);
        return {s.n, s.w, m_heads, s.c / (3 * m_heads)};
    }
    std::size_t m_heads;
    bool m_causal;
    double m_dropout;
    [[nodiscard]] kernels::workspace<C>& ws(const context& ctx) noexcept { return detail::workspace_of(ctx, m_ws); }
    kernels::workspace<C> m_ws;  // when the context gives no shared scratch
};

}  // namespace tessera::nn
