#pragma once
// The first K positions of each sequence: BERT's masked-LM head reads only the masked tokens.
#include <algorithm>
#include <cstddef>
#include <string>

#include "tessera/kernels/gemm.hpp"
#include "tessera/nn/layer.hpp"

namespace tessera::nn {

/// Keeps the first `positions` positions (0: all, passed through as they are) of each sequence of
/// an n × 1 × length × width activation,
/// as Graphcore's BERT slices `sequence_output[:, :mask_tokens]` before its masked-LM head (its
/// data pipeline puts a sequence's masked tokens first): the head then projects 20 positions of a
/// 128-token sequence onto the vocabulary, not 128. The backward puts the gradient back in those
/// positions, zeros in the others. On the IPU the slice is a view: its forward costs nothing, its
/// backward writes the input gradient once.
template <Numeric P>
class first_positions : public parameter_free {
public:
    using precision = P;
    using T = typename P::data_type;
    struct state {
        activation<P> output, grad_input;
        std::size_t length = 0;  ///< the input's positions, for the backward
    };

    explicit first_positions(std::size_t positions = 0) noexcept : m_positions(positions) {}
    [[nodiscard]] std::size_t positions() const noexcept { return m_positions; }

    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const {
        if (m_positions == 0) return s;
        if (s.h != 1 || s.w < m_positions)
            throw tensor::shape_error("tessera::nn::first_positions: input " + s.str() + " has no " +
                                      std::to_string(m_positions) + " positions to keep (n × 1 × length × width)");
        return {s.n, 1, m_positions, s.c};
    }
    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {
        if (m_positions == 0) return {};  // the identity: nothing runs, nothing is kept
        const tensor::shape out = output_shape(s);
        const double in = static_cast<double>(s.size());
        return {0, 0, detail::bytes_of(2 * out.size(), sizeof(T)), detail::bytes_of(s.size() + out.size(), sizeof(T)), 0,
                {pass::elementwise(pass_phase::backward, in, 1)},  // the input gradient: the slice's, zeros elsewhere
                detail::bytes_of(out.size(), sizeof(T))};         // its output, the head's input
    }
    const activation<P>& forward(const activation<P>& x, state& st, const context&) {
        if (m_positions == 0) return x;
        const tensor::shape s = tensor::shape_of(x);
        detail::ensure_shape(st.output, output_shape(s));
        st.length = s.w;
        const std::size_t kept = m_positions * s.c, row = s.w * s.c;
        for (std::size_t b = 0; b < s.n; ++b)
            std::copy_n(x.data() + b * row, kept, st.output.data() + b * kept);
        return st.output;
    }
    const activation<P>& backward(const activation<P>& dy, state& st, const context&, bool want_dx) {
        if (m_positions == 0 || !want_dx) return m_positions == 0 ? dy : st.grad_input;
        const tensor::shape s = tensor::shape_of(dy);
        detail::ensure_shape(st.grad_input, {s.n, 1, st.length, s.c});
        const std::size_t kept = m_positions * s.c, row = st.length * s.c;
        for (std::size_t b = 0; b < s.n; ++b) {
            T* out = st.grad_input.data() + b * row;
            std::copy_n(dy.data() + b * kept, kept, out);
            std::fill(out + kept, out + row, kernels::detail::store_as<T>(0.0f));
        }
        return st.grad_input;
    }

private:
    std::size_t m_positions;
};

}  // namespace tessera::nn
