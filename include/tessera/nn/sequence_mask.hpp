#pragma once
// What a micro-batch of sequences carries beside its values: each position's segment (the attention
// mask) and token type (BERT's sentence A or B).
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessera/nn/layer.hpp"
#include "tessera/tensor/dense.hpp"

namespace tessera::nn {

/// Per sample and position of a micro-batch of `samples` sequences of `length` positions: a segment
/// number (attention sees only keys of a query's own segment; 0 is padding, which sees nothing and
/// is seen by nothing; MLPerf BERT's packed sequences number theirs 1, 2, 3) and a token type. An
/// empty table means the default: every position in segment 1, every type 0. A staged network
/// carries it with the activations to every stage (exec::staged_activation), where use() points
/// the stage's context at it.
/// @code
///   auto mask = std::make_shared<nn::sequence_mask>(2, 4);
///   mask->segments = {1, 1, 1, 0,  1, 1, 2, 2};   // sample 0: 3 tokens and padding; sample 1: two packed
///   mask->use(ctx);                                // ctx.segments, ctx.token_types
/// @endcode
struct sequence_mask {
    std::size_t samples = 0, length = 0;
    std::vector<std::uint16_t> segments;     ///< samples × length, or empty
    std::vector<std::uint16_t> token_types;  ///< samples × length, or empty

    sequence_mask() = default;
    sequence_mask(std::size_t n, std::size_t t) : samples(n), length(t) {}

    /// Throws tensor::shape_error unless each table is empty or holds samples × length values.
    void check() const {
        for (const auto* table : {&segments, &token_types})
            if (!table->empty() && table->size() != samples * length)
                throw tensor::shape_error("tessera::nn::sequence_mask: a " + std::string(table == &segments ? "segment" : "token type") +
                                          " table of " + std::to_string(table->size()) + " values for " +
                                          std::to_string(samples) + " samples of " + std::to_string(length) + " positions");
    }
    /// Bytes that cross a link with it.
    [[nodiscard]] std::size_t bytes() const noexcept { return (segments.size() + token_types.size()) * sizeof(std::uint16_t); }
    /// Points `ctx` at the tables (null where empty).
    void use(context& ctx) const noexcept {
        ctx.segments = segments.empty() ? nullptr : segments.data();
        ctx.token_types = token_types.empty() ? nullptr : token_types.data();
    }
};

}  // namespace tessera::nn
