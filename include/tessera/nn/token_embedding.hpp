#pragma once
// Token embedding with learned positions (and, for BERT, token types): ids in, vectors out.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tessera/kernels/embedding.hpp"
#include "tessera/kernels/initial_values.hpp"
#include "tessera/nn/layer.hpp"
#include "tessera/nn/tokens.hpp"

namespace tessera::nn {

/// The sizes of a token embedding and the names of its tables (Hugging Face's: GPT-2 `wte`, `wpe`;
/// BERT `word_embeddings`, `position_embeddings`, `token_type_embeddings`).
struct embedding_spec {
    std::size_t vocab = 0;      ///< token ids below it
    std::size_t width = 0;      ///< features per position
    std::size_t positions = 0;  ///< learned positions (the longest sequence); 0: none
    std::size_t types = 0;      ///< token types (BERT: 2); 0: none
    std::string token_name = "wte", position_name = "wpe", type_name = "token_type_embeddings";
};

/// Reads an N × 1 × T × 1 activation of token ids (nn::token_element's bits; nn::token_activation)
/// and writes N × 1 × T × width: the token's row, plus position t's, plus the position's token type's
/// (nn::context::token_types, type 0 when none is given). Tables start normal(0, 0.02), as GPT-2's
/// and BERT's. Backward adds each position's gradient to its token's row, in row order (a token met
/// twice sums in the order of its positions), and returns no input gradient (ids have none).
template <Numeric P>
class token_embedding {
public:
    using precision = P;
    using T = typename P::data_type;
    using W = typename P::weight_type;
    using C = typename P::accumulate_type;
    struct state {
        std::vector<std::uint32_t> ids;
        const std::uint16_t* types = nullptr;
        activation<P> output, grad_input;
    };

    explicit token_embedding(embedding_spec spec) : token_embedding(std::move(spec), shapes_only) {
        const auto make = [](std::size_t n) { return tensor::dense<W, 1>::from_shape({n}); };
        const auto zeros = [](std::size_t n) {
            auto g = tensor::dense<C, 1>::from_shape({n});
            g.fill(C(0));
            return g;
        };
        m_tokens = make(m_spec.vocab * m_spec.width), m_dtokens = zeros(m_tokens.size());
        m_positions = make(m_spec.positions * m_spec.width), m_dpositions = zeros(m_positions.size());
        m_types = make(m_spec.types * m_spec.width), m_dtypes = zeros(m_types.size());
        std::mt19937_64 rng(detail::default_seed(0xE3BEDu, m_spec.vocab, m_spec.width, m_spec.positions));
        initialize(rng);
    }
    /// From its shapes alone: no tables (nn::shapes_only_t).
    token_embedding(embedding_spec spec, shapes_only_t) : m_spec(std::move(spec)) {
        if (m_spec.vocab == 0 || m_spec.width == 0)
            throw tensor::shape_error("tessera::nn::token_embedding: vocab and width must be positive (vocab=" +
                                      std::to_string(m_spec.vocab) + ", width=" + std::to_string(m_spec.width) + ")");
        if (m_spec.vocab > token_capacity<T>)
            throw std::invalid_argument("tessera::nn::token_embedding: a vocabulary of " + std::to_string(m_spec.vocab) +
                                        " does not fit the " + std::to_string(8 * sizeof(T)) +
                                        "-bit elements token ids travel in (at most " +
                                        std::to_string(token_capacity<T>) + ")");
    }

    [[nodiscard]] const embedding_spec& spec() const noexcept { return m_spec; }
    [[nodiscard]] std::size_t parameters() const noexcept {
        return (m_spec.vocab + m_spec.positions + m_spec.types) * m_spec.width;
    }
    /// The token table (vocab × width), which a tied LM head reads.
    [[nodiscard]] std::span<const W> token_table() const noexcept { return {m_tokens.data(), m_tokens.size()}; }

    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const {
        if (s.h != 1 || s.c != 1)
            throw tensor::shape_error("tessera::nn::token_embedding: input " + s.str() +
                                      " is not a batch of token sequences (n × 1 × length × 1)");
        if (m_spec.positions > 0 && s.w > m_spec.positions)
            throw tensor::shape_error("tessera::nn::token_embedding: sequences of " + std::to_string(s.w) +
                                      " tokens, the layer has " + std::to_string(m_spec.positions) + " positions");
        return {s.n, 1, s.w, m_spec.width};
    }
    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {
        const tensor::shape out = output_shape(s);
        const double n = static_cast<double>(out.size());
        const double tables = 1.0 + (m_spec.positions > 0) + (m_spec.types > 0);
        using enum pass_phase;
        // Each table's lookups (and their sum), and in the backward each table's scatter-add.
        const double lookups = static_cast<double>(s.size()), width = static_cast<double>(m_spec.width);
        std::vector<pass> passes;
        for (const std::size_t entries : {m_spec.vocab, m_spec.positions, m_spec.types})
            if (entries > 0) {
                passes.push_back(pass::gather(forward, lookups, width, static_cast<double>(entries)));
                passes.push_back(pass::gather(backward, lookups, width, static_cast<double>(entries)).of_weights());
            }
        if (tables > 1) passes.push_back(pass::elementwise(forward, n, 1 + tables));
        return {tables * n, tables * n, detail::bytes_of(out.size(), sizeof(T) + static_cast<std::size_t>(tables) * sizeof(W)),
                detail::bytes_of(out.size(), sizeof(T) + static_cast<std::size_t>(tables) * sizeof(C)), parameters(),
                std::move(passes), detail::bytes_of(out.size(), sizeof(T)) + detail::bytes_of(s.size(), sizeof(std::uint32_t))};
    }
    const activation<P>& forward(const activation<P>& x, state& st, const context& ctx) {
        if (m_tokens.size() == 0)
            throw std::logic_error("tessera::nn::token_embedding: built from shapes alone (nn::shapes_only), it cannot run");
        const tensor::shape s = tensor::shape_of(x);
        detail::ensure_shape(st.output, output_shape(s));
        st.ids.resize(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) st.ids[i] = token_id(x.data()[i]);
        st.types = ctx.token_types;
        kernels::embedding_forward(st.ids.data(), s.n, s.w, tables(st.types), m_spec.width, st.output.data(), ws(ctx),
                                   ctx.parallel(), ctx.forward_rounding());
        return st.output;
    }
    /// Accumulates the tables' gradients; the input gradient is left empty (ids have none).
    const activation<P>& backward(const activation<P>& dy, state& st, const context& ctx, bool) {
        const tensor::shape s = tensor::shape_of(dy);
        kernels::embedding_backward(st.ids.data(), s.n, s.w, dy.data(), m_spec.width, m_dtokens.data(),
                                    m_spec.positions > 0 ? m_dpositions.data() : nullptr,
                                    m_spec.types > 0 ? m_dtypes.data() : nullptr, st.types, ws(ctx), ctx.parallel());
        return st.grad_input;
    }
    template <class F>
    void visit_parameters(F&& f, std::string_view prefix = {}) {
        if (m_tokens.size() == 0) return;  // shapes only
        f(detail::join(prefix, m_spec.token_name + ".weight"), std::span<W>(m_tokens.data(), m_tokens.size()),
          detail::flat(m_dtokens));
        if (m_spec.positions > 0)
            f(detail::join(prefix, m_spec.position_name + ".weight"), std::span<W>(m_positions.data(), m_positions.size()),
              detail::flat(m_dpositions));
        if (m_spec.types > 0)
            f(detail::join(prefix, m_spec.type_name + ".weight"), std::span<W>(m_types.data(), m_types.size()),
              detail::flat(m_dtypes));
    }
    template <class F>
    void visit_buffers(F&&, std::string_view = {}) {}
    void initialize(std::mt19937_64& rng) {
        for (auto* t : {&m_tokens, &m_positions, &m_types})
            kernels::fill_normal(std::span<W>(t->data(), t->size()), 0.02, rng);
    }

private:
    [[nodiscard]] kernels::embedding_tables<W> tables(const std::uint16_t* types) const noexcept {
        return {m_tokens.data(), m_spec.vocab, m_spec.positions > 0 ? m_positions.data() : nullptr,
                m_spec.types > 0 ? m_types.data() : nullptr, m_spec.types, types};
    }
    embedding_spec m_spec;
    tensor::dense<W, 1> m_tokens, m_positions, m_types;
    tensor::dense<C, 1> m_dtokens, m_dpositions, m_dtypes;
    [[nodiscard]] kernels::workspace<C>& ws(const context& ctx) noexcept { return detail::workspace_of(ctx, m_ws); }
    kernels::workspace<C> m_ws;  // when the context gives no shared scratch
};

}  // namespace tessera::nn
