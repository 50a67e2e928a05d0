#pragma once
// Token embedding with learned positions and token types: a gather forward, a scatter-add backward in row order.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/storage.hpp"

namespace tessera::kernels {

/// Throws std::out_of_range naming the first token not below `vocab`, and where it is.
inline void check_tokens(const std::uint32_t* tokens, std::size_t samples, std::size_t length, std::size_t vocab) {
    for (std::size_t r = 0; r < samples * length; ++r)
        if (tokens[r] >= vocab)
            throw std::out_of_range("tessera::kernels::embedding: token " + std::to_string(tokens[r]) + " at position " +
                                    std::to_string(r % length) + " of sample " + std::to_string(r / length) +
                                    " is not below the vocabulary of " + std::to_string(vocab));
}

/// The tables of an embedding: tokens (vocab rows), and, each optional (null), learned positions
/// (a row per position) and token types (BERT's segment A/B: a row per type, `types` giving each
/// position's, or type 0 for all when null). Rows of `width` values.
template <class W>
struct embedding_tables {
    const W* tokens = nullptr;
    std::size_t vocab = 0;
    const W* positions = nullptr;
    const W* type_table = nullptr;
    std::size_t type_count = 0;
    const std::uint16_t* types = nullptr;  ///< samples × length, or null (type 0)
};

/// y[s, t, :] = tokens[ids[s·length + t], :] + positions[t, :] + type_table[type, :] (the sum in C,
/// stored once), for `samples` sequences of `length` tokens; ids must be below `vocab`
/// (check_tokens) and types below type_count. Rows split between threads.
template <Compute C, Storage W, Storage Y>
void embedding_forward(const std::uint32_t* ids, std::size_t samples, std::size_t length, const embedding_tables<W>& t,
                       std::size_t width, Y* y, workspace<C>& ws, parallelism par = {},
                       const tensor::rounding& rounding = {}) {
    check_tokens(ids, samples, length, t.vocab);
    if (t.type_table != nullptr && t.types != nullptr)
        for (std::size_t r = 0; r < samples * length; ++r)
            if (t.types[r] >= t.type_count)
                throw std::out_of_range("tessera::kernels::embedding: token type " + std::to_string(t.types[r]) +
                                        " at position " + std::to_string(r % length) + " of sample " +
                                        std::to_string(r / length) + " is not below " + std::to_string(t.type_count));
    const std::size_t rows = samples * length;
    store_compute<C, Y> dst(y, rows * width, ws.c, par, rounding);
    C* out = dst.target();
    detail::parallel_ranges(par, rows, 16, [&](std::size_t b, std::size_t e, std::size_t) {
        for (std::size_t r = b; r < e; ++r) {
            const W* row = t.tokens + static_cast<std::size_t>(ids[r]) * width;
            C* o = out + r * width;
            for (std::size_t i = 0; i < width; ++i) o[i] = detail::load_as<C>(row[i]);
            if (t.positions != nullptr) {
                const W* pos = t.positions + (r % length) * width;
                for (std::size_t i = 0; i < width; ++i) o[i] += detail::load_as<C>(pos[i]);
            }
            if (t.type_table != nullptr) {
                const W* ty = t.type_table + (t.types == nullptr ? 0 : std::size_t{t.types[r]}) * width;
                for (std::size_t i = 0; i < width; ++i) o[i] += detail::load_as<C>(ty[i]);
            }
        }
    });
    dst.commit();
}

/// dtokens[ids[r], :] += dy[r, :], dpositions[r mod length, :] += dy[r, :] and dtypes[type of r, :]
/// += dy[r, :] (each of the last two may be null), r in row order: a token met twice adds its
/// gradients in the order of its positions. Columns split between threads, so the order, and the
/// bits, are the same on any thread count.
template <Compute C, Storage D>
void embedding_backward(const std::uint32_t* ids, std::size_t samples, std::size_t length, const D* dy,
                        std::size_t width, C* dtokens, C* dpositions, C* dtypes, const std::uint16_t* types,
                        workspace<C>& ws, parallelism par = {}) {
    const std::size_t rows = samples * length;
    const C* g = load_compute<C>(dy, rows * width, ws.b, par);
    detail::parallel_ranges(par, width, 8, [&](std::size_t b, std::size_t e, std::size_t) {
        for (std::size_t r = 0; r < rows; ++r) {
            const C* gr = g + r * width;
            C* t = dtokens + static_cast<std::size_t>(ids[r]) * width;
            for (std::size_t i = b; i < e; ++i) t[i] += gr[i];
            if (dpositions != nullptr) {
                C* p = dpositions + (r % length) * width;
                for (std::size_t i = b; i < e; ++i) p[i] += gr[i];
            }
            if (dtypes != nullptr) {
                C* ty = dtypes + (types == nullptr ? 0 : std::size_t{types[r]}) * width;
                for (std::size_t i = b; i < e; ++i) ty[i] += gr[i];
            }
        }
    });
}

}  // namespace tessera::kernels
