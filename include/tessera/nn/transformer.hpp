#pragma once
// Transformer networks as units a session can cut into stages: an embedding, L blocks, a head
// tied to the embedding (GPT-2 and BERT, Hugging Face's unit names).
#include <cstddef>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/config/error.hpp"
#include "tessera/detail/function_ref.hpp"
#include "tessera/nn/dropout.hpp"
#include "tessera/nn/first_positions.hpp"
#include "tessera/nn/layer_norm.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/nn/token_embedding.hpp"
#include "tessera/nn/token_linear.hpp"
#include "tessera/nn/transformer_block.hpp"

namespace tessera::nn {

/// The sizes and names of a transformer network (gpt2_spec and bert_spec give the released ones).
struct transformer_spec {
    std::string family = "gpt2";      ///< for messages
    std::size_t vocab = 50257, width = 768, layers = 12, heads = 12, positions = 1024, types = 0, mlp_width = 0;
    double dropout = 0.1, eps = 1e-5;
    double attention_dropout = 0.1;   ///< on the attention probabilities (attn_pdrop, attention_probs_dropout_prob)
    kernels::gelu_form gelu = kernels::gelu_form::tanh;
    bool causal = true;
    bool tied = true;                 ///< the head's decoder shares the token table (one parameter, two uses)
    bool embedding_norm = false;      ///< a layer norm after the embedding (BERT)
    /// The head's vocabulary projection priced as this many products of vocab / N outputs each
    /// (PopTorch's serializedMatMul, Graphcore's embedding_serialization_factor; token_linear::
    /// set_serialization). It must divide vocab.
    std::size_t decoder_serialization = 1;
    /// BERT: the masked-LM head predicts only each sequence's first N positions, where the data puts
    /// its masked tokens (Graphcore's mask_tokens: 20 of 128, 76 of 512); 0: every position.
    std::size_t predicted_positions = 0;
    std::string embedding_unit = "wte", block_prefix = "h.", head_unit = "lm_head";
    /// What the embedding's and the head's parameter names start with: nothing in GPT-2 ("wte.weight",
    /// "ln_f.weight"), their unit in BERT ("embeddings.word_embeddings.weight", "cls.predictions...").
    std::string embedding_prefix, head_prefix;
    embedding_spec embedding_names{};  ///< table names (its sizes are taken from the fields above)
    block_names block{};
    [[nodiscard]] block_spec block_sizes() const {
        return {width, heads, mlp_width, causal, dropout, attention_dropout, eps, gelu, block};
    }
};

/// GPT-2 of Radford et al. 2019 as Hugging Face releases it: "small" (124M), "medium", "large", "xl";
/// "tiny" is not released: 4 blocks of width 128 over bytes (vocabulary 256, 256 positions), for
/// training on the emulator in minutes. config::config_error for another name.
[[nodiscard]] inline transformer_spec gpt2_spec(std::string_view size) {
    transformer_spec s;
    const auto set = [&](std::size_t layers, std::size_t width, std::size_t heads) {
        s.layers = layers, s.width = width, s.heads = heads;
    };
    if (size == "small") set(12, 768, 12);
    else if (size == "medium") set(24, 1024, 16);
    else if (size == "large") set(36, 1280, 20);
    else if (size == "xl") set(48, 1600, 25);
    else if (size == "tiny") set(4, 128, 4), s.vocab = 256, s.positions = 256;
    else
        throw config::config_error("tessera::nn::gpt2_spec: no GPT-2 of size '" + std::string(size) +
                                   "' (sizes are tiny, small, medium, large, xl)");
    s.family = "gpt2-" + std::string(size);
    return s;
}

/// BERT of Devlin et al. 2019 (bert-base-uncased, bert-large-uncased): post-LN blocks, the erf GELU,
/// eps 1e-12, two token types, a masked-LM head whose decoder is tied to the word embeddings;
/// "tiny": 2 blocks of width 128 over bytes (256 positions). config::config_error for another name.
[[nodiscard]] inline transformer_spec bert_spec(std::string_view size) {
    transformer_spec s;
    if (size == "base") s.layers = 12, s.width = 768, s.heads = 12;
    else if (size == "large") s.layers = 24, s.width = 1024, s.heads = 16;
    else if (size == "tiny") s.layers = 2, s.width = 128, s.heads = 2, s.vocab = 256, s.positions = 256;
    else
        throw config::config_error("tessera::nn::bert_spec: no BERT of size '" + std::string(size) +
                                   "' (sizes are tiny, base, large)");
    if (size != "tiny") s.vocab = 30522, s.positions = 512;
    s.family = "bert-" + std::string(size);
    s.types = 2, s.eps = 1e-12, s.gelu = kernels::gelu_form::erf, s.causal = false, s.embedding_norm = true;
    s.embedding_unit = s.embedding_prefix = "embeddings", s.block_prefix = "encoder.layer.";
    s.head_unit = s.head_prefix = "cls";
    s.embedding_names = {.token_name = "word_embeddings", .position_name = "position_embeddings",
                         .type_name = "token_type_embeddings"};
    s.block = block_names::bert();
    return s;
}

/// The first unit of a transformer: token embedding (with positions and types), a layer norm where
/// the spec asks (BERT's), dropout.
template <Numeric P>
class embedding_unit {
public:
    using precision = P;
    struct state {
        typename token_embedding<P>::state embed;
        typename layer_norm<P>::state norm;
        typename dropout<P>::state drop;
    };
    embedding_unit(const transformer_spec& s, bool shapes)
        : m_embed(make(s), shapes_only), m_drop(s.dropout) {
        if (!shapes) m_embed = token_embedding<P>(make(s));
        if (s.embedding_norm) m_norm = shapes ? layer_norm<P>(s.width, s.eps, shapes_only) : layer_norm<P>(s.width, s.eps);
    }
    [[nodiscard]] token_embedding<P>& embedding() noexcept { return m_embed; }
    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const { return m_embed.output_shape(s); }
    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {
        const tensor::shape out = output_shape(s);
        const double bytes = detail::bytes_of(out.size(), sizeof(typename P::data_type));
        nn::cost c = m_embed.cost(s);
        if (m_norm) c = c.then(m_norm->cost(out), bytes);
        return c.then(m_drop.cost(out), bytes);
    }
    const activation<P>& forward(const activation<P>& x, state& st, const context& ctx) {
        const activation<P>* cur = &m_embed.forward(x, st.embed, ctx.child(0));
        if (m_norm) cur = &m_norm->forward(*cur, st.norm, ctx.child(1));
        return m_drop.forward(*cur, st.drop, ctx.child(2));
    }
    const activation<P>& backward(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        const activation<P>* cur = &m_drop.backward(dy, st.drop, ctx.child(2), true);
        if (m_norm) cur = &m_norm->backward(*cur, st.norm, ctx.child(1), true);
        return m_embed.backward(*cur, st.embed, ctx.child(0), want_dx);
    }
    template <class F>
    void visit_parameters(F&& f, std::string_view prefix = {}) {
        m_embed.visit_parameters(f, prefix);
        if (m_norm) m_norm->visit_parameters(f, detail::join(prefix, "LayerNorm"));
    }
    template <class F>
    void visit_buffers(F&&, std::string_view = {}) {}
    void initialize(std::mt19937_64& rng) {
        m_embed.initialize(rng);
        if (m_norm) m_norm->initialize(rng);
    }

private:
    static embedding_spec make(const transformer_spec& s) {
        embedding_spec e = s.embedding_names;
        e.vocab = s.vocab, e.width = s.width, e.positions = s.positions, e.types = s.types;
        return e;
    }
    token_embedding<P> m_embed;
    std::optional<layer_norm<P>> m_norm;
    dropout<P> m_drop;
};

/// GPT-2's head: the final layer norm (`ln_f`) and the LM head (`lm_head`, vocab × width, no bias).
template <Numeric P>
using gpt_head = sequential<layer_norm<P>, token_linear<P>>;
/// BERT's masked-LM head (`cls.predictions`): the positions it predicts (transformer_spec::
/// predicted_positions), a dense layer, GELU and a layer norm, then the decoder (vocab × width,
/// with a bias).
template <Numeric P>
using mlm_head = sequential<first_positions<P>, token_linear<P>, gelu<P>, layer_norm<P>, token_linear<P>>;

/// Units: 0 is the embedding ("wte" or "embeddings"), 1..layers the blocks ("h.<i>" or
/// "encoder.layer.<i>"), the last the head ("lm_head" or "cls"): forward_units / backward_units
/// run any contiguous range, so a strategy cuts it into stages where Graphcore's configs do. With
/// `tied`, the head's decoder starts as a copy of the token table and tie_gradients() adds the two
/// uses' gradients, once, in one order (the embedding's, then the head's), and gives both the sum, so
/// the two copies take the same update and stay equal; parameters() counts the table once, as the
/// released checkpoints do.
/// @code
///   auto gpt = nn::make_gpt2<config::fp32>(nn::gpt2_spec("tiny"));
///   auto dry = nn::make_gpt2<config::fp32>(nn::gpt2_spec("xl"), nn::shapes_only);  // 1,557,611,200 parameters, none allocated
/// @endcode
template <Numeric P, NormPlacement Placement, class Head>
class transformer {
public:
    using precision = P;
    using head_type = Head;
    using block_type = transformer_block<P, Placement>;
    struct state {
        typename embedding_unit<P>::state embed;
        std::vector<typename block_type::state> blocks;
        typename Head::state head;
    };

    transformer(transformer_spec spec, Head head, bool shapes)
        : m_spec(std::move(spec)), m_embed(m_spec, shapes), m_head(std::move(head)) {
        if (m_spec.layers == 0) throw config::config_error("tessera::nn::transformer: " + m_spec.family + " needs a block");
        m_blocks.reserve(m_spec.layers);
        for (std::size_t i = 0; i < m_spec.layers; ++i)
            m_blocks.push_back(shapes ? block_type(m_spec.block_sizes(), shapes_only) : block_type(m_spec.block_sizes()));
        if (!shapes) {
            std::mt19937_64 rng(0x6E7A11u);
            initialize(rng);
        }
    }

    [[nodiscard]] const transformer_spec& spec() const noexcept { return m_spec; }
    /// Whether the head's decoder shares the token table (tie_gradients).
    [[nodiscard]] bool tied() const noexcept { return m_spec.tied; }
    [[nodiscard]] std::size_t units() const noexcept { return m_blocks.size() + 2; }
    [[nodiscard]] std::string unit_name(std::size_t u) const {
        check_unit(u);
        if (u == 0) return m_spec.embedding_unit;
        if (u == units() - 1) return m_spec.head_unit;
        return m_spec.block_prefix + std::to_string(u - 1);
    }
    /// The unit called `name` ("h.6", "encoder.layer.11", ...); config::config_error if none is.
    [[nodiscard]] std::size_t unit_index(std::string_view name) const {
        for (std::size_t u = 0; u < units(); ++u)
            if (unit_name(u) == name) return u;
        throw config::config_error("tessera::nn::transformer: " + m_spec.family + " has no unit named '" +
                                   std::string(name) + "' (units are " + unit_name(0) + ", " + unit_name(1) + " ... " +
                                   unit_name(units() - 2) + ", " + unit_name(units() - 1) + ")");
    }
    [[nodiscard]] tensor::shape unit_input_shape(std::size_t u, const tensor::shape& s) const {
        check_unit(u);
        return detail::shape_after_units(*this, u, s);
    }
    [[nodiscard]] tensor::shape unit_output_shape(std::size_t u, const tensor::shape& in) const {
        check_unit(u);
        if (u == 0) return m_embed.output_shape(in);
        if (u == units() - 1) return m_head.output_shape(in);
        return m_blocks[u - 1].output_shape(in);
    }
    [[nodiscard]] nn::cost unit_cost(std::size_t u, const tensor::shape& in) const {
        check_unit(u);
        if (u == 0) return m_embed.cost(in);
        if (u == units() - 1) return m_head.cost(in);
        return m_blocks[u - 1].cost(in);
    }
    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const {
        return unit_output_shape(units() - 1, unit_input_shape(units() - 1, s));
    }
    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {
        nn::cost total;
        tensor::shape cur = s;
        for (std::size_t u = 0; u < units(); ++u) {
            total += unit_cost(u, cur);
            cur = unit_output_shape(u, cur);
        }
        return total;
    }
    /// Trainable parameters, the tied table counted once (GPT-2 small: 124,439,808).
    [[nodiscard]] std::size_t parameters() const {
        const tensor::shape one{1, 1, 1, 1};
        std::size_t n = 0;
        tensor::shape cur = one;
        for (std::size_t u = 0; u < units(); ++u) {
            n += unit_cost(u, cur).parameters;
            cur = unit_output_shape(u, cur);
        }
        return m_spec.tied ? n - m_spec.vocab * m_spec.width : n;
    }

    const activation<P>& forward_units(std::size_t first, std::size_t last, const activation<P>& x, state& st,
                                       const context& ctx) {
        check_range(first, last);
        if (st.blocks.size() != m_blocks.size()) st.blocks.resize(m_blocks.size());
        const activation<P>* cur = &x;
        for (std::size_t u = first; u < last; ++u) {
            if (u == 0)
                cur = &m_embed.forward(*cur, st.embed, ctx.child(u));
            else if (u == units() - 1)
                cur = &m_head.forward(*cur, st.head, ctx.child(u));
            else
                cur = &m_blocks[u - 1].forward(*cur, st.blocks[u - 1], ctx.child(u));
        }
        return *cur;
    }
    const activation<P>& backward_units(std::size_t first, std::size_t last, const activation<P>& dy, state& st,
                                        const context& ctx, bool want_dx) {
        return backward_units_pass<false>(first, last, dy, st, ctx, want_dx);
    }
    /// The input-gradient half of backward_units (the projections keep their weight gradients for
    /// backward_units_weights).
    const activation<P>& backward_units_input(std::size_t first, std::size_t last, const activation<P>& dy, state& st,
                                              const context& ctx, bool want_dx) {
        return backward_units_pass<true>(first, last, dy, st, ctx, want_dx);
    }
    void backward_units_weights(std::size_t first, std::size_t last, state& st, const context& ctx) {
        check_range(first, last);
        for (std::size_t u = last; u-- > first;) {
            if (u == units() - 1)
                nn::backward_weights(m_head, st.head, ctx.child(u));
            else if (u > 0)
                nn::backward_weights(m_blocks[u - 1], st.blocks[u - 1], ctx.child(u));
        }
    }
    const activation<P>& forward(const activation<P>& x, state& st, const context& ctx) {
        return forward_units(0, units(), x, st, ctx);
    }
    const activation<P>& backward(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        return backward_units(0, units(), dy, st, ctx, want_dx);
    }
    const activation<P>& backward_input(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        return backward_units_input(0, units(), dy, st, ctx, want_dx);
    }
    void backward_weights(state& st, const context& ctx) { backward_units_weights(0, units(), st, ctx); }

    /// Parameters of units [first, last), Hugging Face's names ("wte.weight", "h.3.attn.c_attn.bias",
    /// "lm_head.weight"; "embeddings.word_embeddings.weight", "cls.predictions.decoder.weight").
    template <class F>
    void visit_unit_parameters(std::size_t first, std::size_t last, F&& f, std::string_view prefix = {}) {
        walk_parameters(first, last, parameter_visitor(f), prefix);
    }
    template <class F>
    void visit_unit_buffers(std::size_t, std::size_t, F&&, std::string_view = {}) {}
    template <class F>
    void visit_parameters(F&& f, std::string_view prefix = {}) {
        visit_unit_parameters(0, units(), f, prefix);
    }
    template <class F>
    void visit_buffers(F&&, std::string_view = {}) {}
    /// Draws every weight from `rng` in unit order, then, tied, copies the token table into the decoder.
    void initialize(std::mt19937_64& rng) {
        m_embed.initialize(rng);
        for (auto& b : m_blocks) b.initialize(rng);
        m_head.initialize(rng);
        if (m_spec.tied) {
            const auto [table, table_grad] = tied_parts(0);
            const auto [decoder, decoder_grad] = tied_parts(units() - 1);
            std::copy(table.begin(), table.end(), decoder.begin());
        }
    }
    /// The tied table's two gradients summed, the embedding's first, and written to both (each use's
    /// own sum, kept apart until now): call once per step, after the backward passes, before the
    /// update. Nothing when untied.
    void tie_gradients() {
        if (!m_spec.tied) return;
        const auto [table, table_grad] = tied_parts(0);
        const auto [decoder, decoder_grad] = tied_parts(units() - 1);
        for (std::size_t i = 0; i < table_grad.size(); ++i) {
            const auto sum = table_grad[i] + decoder_grad[i];
            table_grad[i] = sum, decoder_grad[i] = sum;
        }
    }

    /// The decoder's copy of the tied table made the table's again, after an update: the two copies
    /// take the same update from the same sums, and differ only where 16-bit weights round
    /// stochastically, whose streams are named by the parameter (optim::weight_rounding). Nothing when untied.
    void tie_weights() {
        if (!m_spec.tied) return;
        const auto [table, table_grad] = tied_parts(0);
        const auto [decoder, decoder_grad] = tied_parts(units() - 1);
        std::copy(table.begin(), table.end(), decoder.begin());
    }

    /// Elements of the tied table (vocab × width; 0 when untied), shapes-only networks too.
    [[nodiscard]] std::size_t tied_table_elements() const noexcept { return m_spec.tied ? m_spec.vocab * m_spec.width : 0; }

    /// The gradient of the tied table's second copy (the head's decoder), nullptr when untied: one
    /// parameter, which the global gradient norm counts once.
    [[nodiscard]] const void* tied_copy() {
        return m_spec.tied ? static_cast<const void*>(tied_parts(units() - 1).second.data()) : nullptr;
    }

private:
    using W = typename P::weight_type;
    using C = typename P::accumulate_type;
    using parameter_visitor = tessera::detail::function_ref<void(std::string_view, std::span<W>, std::span<C>)>;

    // The token table of the embedding (u == 0) or the decoder's weight (the last unit), with its gradient.
    [[nodiscard]] std::pair<std::span<W>, std::span<C>> tied_parts(std::size_t u) {
        std::pair<std::span<W>, std::span<C>> found{};
        bool first = true;
        const auto take = [&](std::string_view, std::span<W> v, std::span<C> g) {
            if (first) found = {v, g};
            first = false;
        };
        if (u == 0)
            m_embed.embedding().visit_parameters(take);
        else
            m_head.template get<Head::size - 1>().visit_parameters(take);
        if (found.first.size() != m_spec.vocab * m_spec.width)
            throw config::config_error("tessera::nn::transformer: the tied decoder of " + m_spec.family + " holds " +
                                       std::to_string(found.first.size()) + " values for a table of " +
                                       std::to_string(m_spec.vocab * m_spec.width));
        return found;
    }
    void walk_parameters(std::size_t first, std::size_t last, parameter_visitor f, std::string_view prefix) {
        check_range(first, last);
        for (std::size_t u = first; u < last; ++u) {
            if (u == 0)
                m_embed.visit_parameters(f, join(prefix, m_spec.embedding_prefix));
            else if (u == units() - 1)
                m_head.visit_parameters(f, join(prefix, m_spec.head_prefix));
            else
                m_blocks[u - 1].visit_parameters(f, detail::join(prefix, unit_name(u)));
        }
    }
    [[nodiscard]] static std::string join(std::string_view prefix, std::string_view name) {
        return name.empty() ? std::string(prefix) : detail::join(prefix, name);
    }
    void check_unit(std::size_t u) const {
        if (u >= units())
            throw config::config_error("tessera::nn::transformer: unit " + std::to_string(u) + " does not exist (" +
                                       m_spec.family + " has " + std::to_string(units()) + " units)");
    }
    void check_range(std::size_t first, std::size_t last) const {
        if (first >= last || last > units())
            throw config::config_error("tessera::nn::transformer: unit range [" + std::to_string(first) + ", " +
                                       std::to_string(last) + ") is empty or past the " + std::to_string(units()) + " units");
    }
    template <bool InputOnly>
    const activation<P>& backward_units_pass(std::size_t first, std::size_t last, const activation<P>& dy, state& st,
                                             const context& ctx, bool want_dx) {
        check_range(first, last);
        const activation<P>* cur = &dy;
        for (std::size_t u = last; u-- > first;) {
            const bool dx = u > first || want_dx;
            if (u == 0)
                cur = &m_embed.backward(*cur, st.embed, ctx.child(u), dx);
            else if (u == units() - 1)
                cur = &nn::backward_part<InputOnly>(m_head, *cur, st.head, ctx.child(u), dx);
            else
                cur = &nn::backward_part<InputOnly>(m_blocks[u - 1], *cur, st.blocks[u - 1], ctx.child(u), dx);
            // A whole backward frees the input-gradient buffers of each block and of the head once the
            // unit before has read them: one unit's gradients are held at a time, not every block's (the
            // allocator hands the same memory to the next block). Not in the split backward, whose
            // weight half reads them.
            if constexpr (!InputOnly) {
                const auto release = [&](std::size_t unit, const activation<P>* keep) {
                    const auto free = [keep](activation<P>& b) {
                        if (&b != keep) b = activation<P>{};
                    };
                    if (unit == units() - 1)
                        detail::for_each_gradient_buffer(st.head, free);
                    else if (unit > 0)
                        detail::for_each_gradient_buffer(st.blocks[unit - 1], free);
                };
                if (u + 1 < last) release(u + 1, nullptr);  // read by unit u
                release(u, cur);                             // but what unit u returns
            }
        }
        return *cur;
    }

    transformer_spec m_spec;
    embedding_unit<P> m_embed;
    std::vector<block_type> m_blocks;
    Head m_head;
};

template <Numeric P>
using gpt = transformer<P, pre_norm, gpt_head<P>>;
template <Numeric P>
using bert = transformer<P, post_norm, mlm_head<P>>;

namespace detail {
template <Numeric P>
[[nodiscard]] token_linear<P> decoder(const transformer_spec& s, bool bias, bool shapes) {
    token_linear<P> d = shapes ? token_linear<P>(s.width, s.vocab, bias, shapes_only) : token_linear<P>(s.width, s.vocab, bias);
    d.set_serialization(s.decoder_serialization);
    return d;
}
}  // namespace detail

/// A GPT (pre-LN blocks, `ln_f`, an LM head without bias); shapes_only: no weights.
template <Numeric P>
[[nodiscard]] gpt<P> make_gpt2(const transformer_spec& s) {
    gpt_head<P> head(layer_norm<P>(s.width, s.eps), detail::decoder<P>(s, false, false));
    head.named({"ln_f", "lm_head"});
    return gpt<P>(s, std::move(head), false);
}
template <Numeric P>
[[nodiscard]] gpt<P> make_gpt2(const transformer_spec& s, shapes_only_t) {
    gpt_head<P> head(layer_norm<P>(s.width, s.eps, shapes_only), detail::decoder<P>(s, false, true));
    head.named({"ln_f", "lm_head"});
    return gpt<P>(s, std::move(head), true);
}

/// A BERT with its masked-LM head (post-LN blocks); shapes_only: no weights.
template <Numeric P>
[[nodiscard]] bert<P> make_bert(const transformer_spec& s) {
    mlm_head<P> head(first_positions<P>(s.predicted_positions), token_linear<P>(s.width, s.width), gelu<P>(s.gelu),
                     layer_norm<P>(s.width, s.eps), detail::decoder<P>(s, true, false));
    head.named({"predictions.positions", "predictions.transform.dense", "predictions.transform.act", "predictions.transform.LayerNorm",
                "predictions.decoder"});
    return bert<P>(s, std::move(head), false);
}
template <Numeric P>
[[nodiscard]] bert<P> make_bert(const transformer_spec& s, shapes_only_t) {
    mlm_head<P> head(first_positions<P>(s.predicted_positions), token_linear<P>(s.width, s.width, true, shapes_only),
                     gelu<P>(s.gelu), layer_norm<P>(s.width, s.eps, shapes_only), detail::decoder<P>(s, true, true));
    head.named({"predictions.positions", "predictions.transform.dense", "predictions.transform.act", "predictions.transform.LayerNorm",
                "predictions.decoder"});
    return bert<P>(s, std::move(head), true);
}

}  // namespace tessera::nn
