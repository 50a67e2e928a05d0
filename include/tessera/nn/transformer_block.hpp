#pragma once
// A transformer block: self-attention and an MLP, each with a residual connection and a layer norm
// before it (pre-LN, GPT-2) or after the residual add (post-LN, BERT).
#include <concepts>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "tessera/nn/attention.hpp"
#include "tessera/nn/dropout.hpp"
#include "tessera/nn/gradient_buffers.hpp"
#include "tessera/nn/gelu.hpp"
#include "tessera/nn/layer_norm.hpp"
#include "tessera/nn/residual.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/nn/token_linear.hpp"

namespace tessera::nn {

/// Layer norm before each branch, the residual stream left unnormalised: x + f(LN(x)) (GPT-2).
struct pre_norm {};
/// Layer norm after each residual add: LN(x + f(x)) (BERT, the original transformer).
struct post_norm {};

template <class N>
concept NormPlacement = std::same_as<N, pre_norm> || std::same_as<N, post_norm>;

/// Names of a block's parts, as Hugging Face's modules name them (parameter names read
/// `<block>.<part>.<layer>.weight`); an empty name adds no level.
struct block_names {
    std::string ln_1 = "ln_1", attn = "attn", qkv = "c_attn", attn_proj = "c_proj", ln_2 = "ln_2", mlp = "mlp",
                mlp_in = "c_fc", mlp_out = "c_proj";
    /// GPT-2's (transformer.h.<i>).
    [[nodiscard]] static block_names gpt2() { return {}; }
    /// BERT's (bert.encoder.layer.<i>), with its three projections fused into one `qkv`.
    [[nodiscard]] static block_names bert() {
        return {"attention.output.LayerNorm", "attention", "self.qkv", "output.dense", "output.LayerNorm", "",
                "intermediate.dense", "output.dense"};
    }
};

/// The sizes of a block.
struct block_spec {
    std::size_t width = 0;        ///< d_model
    std::size_t heads = 1;
    std::size_t mlp_width = 0;    ///< 0: 4 × width
    bool causal = true;
    double dropout = 0.1;         ///< after the attention's projection and after the MLP (hidden_dropout)
    double attention_dropout = 0.0;  ///< on the attention probabilities (attn_pdrop; 0.1 in GPT-2 and BERT)
    double eps = 1e-5;            ///< the layer norms'
    kernels::gelu_form gelu = kernels::gelu_form::tanh;
    block_names names{};
};

/// Self-attention (a fused QKV projection d → 3d, nn::attention, a projection d → d) and an MLP
/// (d → mlp_width, GELU, → d), each followed by dropout and a residual add, the layer norms placed
/// by `Placement`. Input and output N × 1 × T × d. Splits its backward (nn::SplitBackwardLayer): the
/// input gradient first, its four projections' weight gradients after.
template <Numeric P, NormPlacement Placement>
class transformer_block {
public:
    using precision = P;
    using T = typename P::data_type;
    using C = typename P::accumulate_type;
    using attention_part = sequential<token_linear<P>, attention<P>, token_linear<P>>;
    using mlp_part = sequential<token_linear<P>, gelu<P>, token_linear<P>>;
    static constexpr bool pre_ln = std::same_as<Placement, pre_norm>;
    struct state {
        typename layer_norm<P>::state ln_1, ln_2;
        typename attention_part::state attn;
        typename mlp_part::state mlp;
        typename dropout<P>::state drop_1, drop_2;
        activation<P> hidden, output;  // pre-LN: the residual stream after the attention, and the block's output
        activation<P> sum_1, sum_2;    // post-LN: the residual sums the layer norms read
        activation<P> grad_hidden, grad_input;
        /// Every input-gradient buffer of the block and its parts (nn::gradient_buffers.hpp).
        template <class F>
        void for_each_gradient_buffer(F&& f) {
            detail::for_each_gradient_buffer(drop_2, f), detail::for_each_gradient_buffer(mlp, f);
            detail::for_each_gradient_buffer(ln_2, f), f(grad_hidden), detail::for_each_gradient_buffer(drop_1, f);
            detail::for_each_gradient_buffer(attn, f), detail::for_each_gradient_buffer(ln_1, f), f(grad_input);
        }
    };

    explicit transformer_block(const block_spec& spec)
        : transformer_block(spec, make_attention(spec, false), make_mlp(spec, false), layer_norm<P>(spec.width, spec.eps),
                            layer_norm<P>(spec.width, spec.eps)) {}
    /// From its shapes alone: no weights (nn::shapes_only_t).
    transformer_block(const block_spec& spec, shapes_only_t)
        : transformer_block(spec, make_attention(spec, true), make_mlp(spec, true),
                            layer_norm<P>(spec.width, spec.eps, shapes_only), layer_norm<P>(spec.width, spec.eps, shapes_only)) {}

    [[nodiscard]] const block_spec& spec() const noexcept { return m_spec; }
    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const {
        if (s.h != 1 || s.c != m_spec.width)
            throw tensor::shape_error("tessera::nn::transformer_block: input " + s.str() + " is not n × 1 × length × " +
                                      std::to_string(m_spec.width));
        return s;
    }
    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {
        const double bytes = detail::bytes_of(output_shape(s).size(), sizeof(T));
        nn::cost c = m_ln_1.cost(s);
        for (const nn::cost& part : {m_attn.cost(s), m_drop_1.cost(s), add_cost(s), m_ln_2.cost(s), m_mlp.cost(s),
                                     m_drop_2.cost(s), add_cost(s)})
            c = c.then(part, bytes);
        return c;
    }

    const activation<P>& forward(const activation<P>& x, state& st, const context& ctx) {
        (void)output_shape(tensor::shape_of(x));
        const context c_ln1 = ctx.child(0), c_attn = ctx.child(1), c_d1 = ctx.child(2), c_add1 = ctx.child(3);
        const context c_ln2 = ctx.child(4), c_mlp = ctx.child(5), c_d2 = ctx.child(6), c_add2 = ctx.child(7);
        if constexpr (pre_ln) {
            const auto& a = m_attn.forward(m_ln_1.forward(x, st.ln_1, c_ln1), st.attn, c_attn);
            add(x, m_drop_1.forward(a, st.drop_1, c_d1), st.hidden, c_add1);
            const auto& m = m_mlp.forward(m_ln_2.forward(st.hidden, st.ln_2, c_ln2), st.mlp, c_mlp);
            add(st.hidden, m_drop_2.forward(m, st.drop_2, c_d2), st.output, c_add2);
        } else {
            add(x, m_drop_1.forward(m_attn.forward(x, st.attn, c_attn), st.drop_1, c_d1), st.sum_1, c_add1);
            const auto& h = m_ln_1.forward(st.sum_1, st.ln_1, c_ln1);
            add(h, m_drop_2.forward(m_mlp.forward(h, st.mlp, c_mlp), st.drop_2, c_d2), st.sum_2, c_add2);
            return m_ln_2.forward(st.sum_2, st.ln_2, c_ln2);
        }
        return st.output;
    }
    const activation<P>& backward(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        return backward_pass<false>(dy, st, ctx, want_dx);
    }
    /// The input gradient alone (SplitBackwardLayer); `dy` must stay alive until backward_weights.
    const activation<P>& backward_input(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        return backward_pass<true>(dy, st, ctx, want_dx);
    }
    /// The projections' weight gradients of the micro-batch backward_input saw (accumulated).
    void backward_weights(state& st, const context& ctx) {
        m_mlp.backward_weights(st.mlp, ctx.child(5));
        m_attn.backward_weights(st.attn, ctx.child(1));
    }

    template <class F>
    void visit_parameters(F&& f, std::string_view prefix = {}) {
        const block_names& n = m_spec.names;
        const auto visit = [&](auto& part, std::string_view name) { part.visit_parameters(f, join(prefix, name)); };
        if constexpr (pre_ln) {
            visit(m_ln_1, n.ln_1), visit(m_attn, n.attn), visit(m_ln_2, n.ln_2), visit(m_mlp, n.mlp);
        } else {
            visit(m_attn, n.attn), visit(m_ln_1, n.ln_1), visit(m_mlp, n.mlp), visit(m_ln_2, n.ln_2);
        }
    }
    template <class F>
    void visit_buffers(F&&, std::string_view = {}) {}
    void initialize(std::mt19937_64& rng) {
        m_ln_1.initialize(rng), m_attn.initialize(rng), m_ln_2.initialize(rng), m_mlp.initialize(rng);
    }

private:
    transformer_block(const block_spec& spec, attention_part attn, mlp_part mlp, layer_norm<P> ln_1, layer_norm<P> ln_2)
        : m_spec(spec), m_ln_1(std::move(ln_1)), m_ln_2(std::move(ln_2)), m_attn(std::move(attn)), m_mlp(std::move(mlp)),
          m_drop_1(spec.dropout), m_drop_2(spec.dropout) {
        if (spec.width == 0 || spec.heads == 0 || spec.width % spec.heads != 0)
            throw tensor::shape_error("tessera::nn::transformer_block: width " + std::to_string(spec.width) +
                                      " is not a positive multiple of the " + std::to_string(spec.heads) + " heads");
    }
    [[nodiscard]] static std::size_t mlp_width(const block_spec& s) noexcept { return s.mlp_width ? s.mlp_width : 4 * s.width; }
    [[nodiscard]] static attention_part make_attention(const block_spec& s, bool shapes) {
        auto lin = [&](std::size_t in, std::size_t out) {
            return shapes ? token_linear<P>(in, out, true, shapes_only) : token_linear<P>(in, out);
        };
        attention_part a(lin(s.width, 3 * s.width), attention<P>(s.heads, s.causal, s.attention_dropout), lin(s.width, s.width));
        a.named({s.names.qkv, "core", s.names.attn_proj});
        return a;
    }
    [[nodiscard]] static mlp_part make_mlp(const block_spec& s, bool shapes) {
        auto lin = [&](std::size_t in, std::size_t out) {
            return shapes ? token_linear<P>(in, out, true, shapes_only) : token_linear<P>(in, out);
        };
        mlp_part m(lin(s.width, mlp_width(s)), gelu<P>(s.gelu), lin(mlp_width(s), s.width));
        m.named({s.names.mlp_in, "act", s.names.mlp_out});
        return m;
    }
    [[nodiscard]] static std::string join(std::string_view prefix, std::string_view name) {
        return name.empty() ? std::string(prefix) : detail::join(prefix, name);
    }
    [[nodiscard]] static nn::cost add_cost(const tensor::shape& s) {
        const double n = static_cast<double>(s.size());
        return {n, 0, detail::bytes_of(3 * s.size(), sizeof(T)), detail::bytes_of(3 * s.size(), sizeof(T)), 0,
                {pass::elementwise(pass_phase::forward, n, 3), pass::elementwise(pass_phase::backward, n, 3)},
                detail::bytes_of(s.size(), sizeof(T))};
    }
    // out = a + b in C, rounded once as the context says.
    static void add(const activation<P>& a, const activation<P>& b, activation<P>& out, const context& ctx) {
        detail::ensure_shape(out, tensor::shape_of(a));
        detail::add<C>(a.data(), b.data(), out.data(), a.size(), ctx.parallel(), ctx.forward_rounding());
    }
    static void add_gradient(const activation<P>& a, const activation<P>& b, activation<P>& out, const context& ctx) {
        detail::ensure_shape(out, tensor::shape_of(a));
        detail::add<C>(a.data(), b.data(), out.data(), a.size(), ctx.parallel(), ctx.backward_rounding());
    }

    template <bool InputOnly>
    const activation<P>& backward_pass(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        const context c_ln1 = ctx.child(0), c_attn = ctx.child(1), c_d1 = ctx.child(2), c_add1 = ctx.child(3);
        const context c_ln2 = ctx.child(4), c_mlp = ctx.child(5), c_d2 = ctx.child(6), c_add2 = ctx.child(7);
        if constexpr (pre_ln) {
            // y = h + drop(mlp(ln_2(h))), h = x + drop(attn(ln_1(x)))
            const auto& dm = m_drop_2.backward(dy, st.drop_2, c_d2, true);
            const auto& dn = backward_part<InputOnly>(m_mlp, dm, st.mlp, c_mlp, true);
            add_gradient(dy, m_ln_2.backward(dn, st.ln_2, c_ln2, true), st.grad_hidden, c_add2);
            const auto& da = m_drop_1.backward(st.grad_hidden, st.drop_1, c_d1, true);
            const auto& dl = backward_part<InputOnly>(m_attn, da, st.attn, c_attn, true);
            const auto& dx = m_ln_1.backward(dl, st.ln_1, c_ln1, want_dx);
            if (want_dx) add_gradient(st.grad_hidden, dx, st.grad_input, c_add1);
        } else {
            // y = ln_2(h + drop(mlp(h))), h = ln_1(x + drop(attn(x)))
            const auto& ds2 = m_ln_2.backward(dy, st.ln_2, c_ln2, true);
            const auto& dm = m_drop_2.backward(ds2, st.drop_2, c_d2, true);
            add_gradient(ds2, backward_part<InputOnly>(m_mlp, dm, st.mlp, c_mlp, true), st.grad_hidden, c_add2);
            const auto& ds1 = m_ln_1.backward(st.grad_hidden, st.ln_1, c_ln1, true);
            const auto& da = m_drop_1.backward(ds1, st.drop_1, c_d1, true);
            const auto& dx = backward_part<InputOnly>(m_attn, da, st.attn, c_attn, want_dx);
            if (want_dx) add_gradient(ds1, dx, st.grad_input, c_add1);
        }
        return st.grad_input;
    }

    block_spec m_spec;
    layer_norm<P> m_ln_1, m_ln_2;
    attention_part m_attn;
    mlp_part m_mlp;
    dropout<P> m_drop_1, m_drop_2;
};

}  // namespace tessera::nn
