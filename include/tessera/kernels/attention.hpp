#pragma once
// Multi-head scaled dot-product attention over a fused QKV tensor: softmax(Q·Kᵀ/√d_head, masked)·V.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "tessera/kernels/dropout.hpp"
#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/row_reductions.hpp"
#include "tessera/kernels/simd.hpp"
#include "tessera/kernels/storage.hpp"

namespace tessera::kernels {

/// The shape of one attention call: `samples` sequences of `length` positions, `heads` heads of
/// `head_width` features (the model width is heads × head_width). The fused QKV tensor has a row of
/// 3 × width per position: the queries of every head, then the keys, then the values, head h at
/// columns h·head_width of each third (GPT-2's c_attn split). The context (the output) has a row
/// of `width` per position, head h at columns h·head_width.
struct attention_shape {
    std::size_t samples = 1, length = 1, heads = 1, head_width = 1;
    [[nodiscard]] constexpr std::size_t width() const noexcept { return heads * head_width; }
    [[nodiscard]] constexpr std::size_t rows() const noexcept { return samples * length; }
    /// Values of the attention probabilities: samples × heads × length × length.
    [[nodiscard]] constexpr std::size_t probabilities() const noexcept { return samples * heads * length * length; }
};

/// Which keys a query sees. causal: only those at or before it (GPT). segments (null: every position
/// is in segment 1): per sample, a segment number for each position; a query sees only the keys of
/// its own segment, and a position of segment 0 is padding, which sees nothing and is seen by nothing
/// (BERT's attention mask; MLPerf BERT's packed sequences number their segments 1, 2, 3).
struct attention_mask {
    bool causal = false;
    const std::uint16_t* segments = nullptr;  ///< samples × length, or null
};

/// Dropout on the attention probabilities (GPT-2's attn_pdrop, BERT's attention_probs_dropout_prob):
/// probability p of dropping each, from `stream` (inactive: none dropped). Probability (i, j) of head h
/// of sample s is element (first_sample + s) · heads · L² + (h · L + i) · L + j of the stream.
struct attention_dropout {
    double p = 0;
    dropout_stream stream{};
    [[nodiscard]] bool drops() const { return stream.active && dropout_threshold(p) > 0; }
};

namespace detail {

/// kept[e] = p[e] / (1 − p) where the stream keeps probability e of the pair, else 0, for the L²
/// probabilities of (sample s, head h) (or their gradients; `p` may be `kept`). Under a causal mask
/// only the keys at or before each query are read (the rest are 0).
template <class C, class Y>
void kept_probabilities(const Y* p, std::size_t s, std::size_t h, std::size_t heads, std::size_t L,
                        const attention_dropout& drop, bool causal, C* kept) {
    const std::uint64_t threshold = dropout_threshold(drop.p), base = drop.stream.base();
    const std::uint64_t first = (drop.stream.first_sample + s) * heads * L * L + h * L * L;
    const C scale = static_cast<C>(1.0 / (1.0 - drop.p));
    for (std::size_t i = 0; i < L; ++i) {
        const std::size_t seen = causal ? i + 1 : L;
        for (std::size_t j = 0; j < seen; ++j) {
            const std::size_t e = i * L + j;
            kept[e] = dropout_keeps(base, first + e, threshold) ? load_as<C>(p[e]) * scale : C(0);
        }
        std::fill(kept + i * L + seen, kept + (i + 1) * L, C(0));
    }
}

/// row[0..n) = softmax(row[0..n)), n ≥ 1: the largest subtracted, exp in lanes (xsimd's; every
/// element in a whole batch, the same bits wherever it falls), then the elements `unseen(j)` names set
/// to 0 (a masked key, −∞ before: whatever exp(−∞) gives), the sum in simd::sum's order.
template <class C, class Unseen>
void softmax_row(C* row, std::size_t n, Unseen&& unseen) noexcept {
    const kernels::simd::batch<C> top(kernels::simd::max(row, n));
    kernels::simd::map_batches<C>(row, row, n, [&top](const kernels::simd::batch<C>& v) { return xsimd::exp(v - top); });
    for (std::size_t j = 0; j < n; ++j)
        if (unseen(j)) row[j] = C(0);
    const kernels::simd::batch<C> inv(C(1) / kernels::simd::sum<C>(row, n));
    kernels::simd::map_batches<C>(row, row, n, [&inv](const kernels::simd::batch<C>& v) { return v * inv; });
}

/// The rows (queries) of each block of a causal attention: block b holds queries [b·B, (b + 1)·B)
/// and needs keys [0, (b + 1)·B) only, so the products skip the keys after the block (at L = 256,
/// 56 % of the full products' work). A fixed size: the sums' order does not depend on the machine.
inline constexpr std::size_t causal_block = 32;

/// Whether query i of a sample (segments `seg`, or null) sees key j.
[[nodiscard]] inline bool attends(const attention_mask& mask, const std::uint16_t* seg, std::size_t i,
                                  std::size_t j) noexcept {
    if (mask.causal && j > i) return false;
    return seg == nullptr || (seg[i] != 0 && seg[j] == seg[i]);
}

/// Runs body(pair, t) for every (sample, head) pair, the pairs split between threads (t: the
/// thread's index, for its own buffers), after sizing one `per_thread` buffer and one GEMM's panels
/// a thread.
template <Compute C, class F>
void over_head_pairs(std::size_t pairs, std::size_t per_thread, workspace<C>& ws, parallelism par, F&& body) {
    const std::size_t threads = std::max<std::size_t>(1, std::min(par.threads, pairs));
    if (ws.cols.size() < threads) ws.cols.resize(threads);
    if (ws.packs.size() < threads) ws.packs.resize(threads);
    for (std::size_t t = 0; t < threads; ++t)
        if (ws.cols[t].size() < per_thread) ws.cols[t].resize(per_thread);
    const std::size_t per = (pairs + threads - 1) / threads;
    run_parallel(parallelism{threads, par.pool}, [&](std::size_t t) {
        for (std::size_t p = t * per; p < std::min(pairs, (t + 1) * per); ++p) body(p, t);
    });
}

}  // namespace detail

/// Forward: stores the probabilities (samples × heads × length × length, for the backward; a query
/// that sees no key gets a row of zeros) and the context. Each (sample, head) pair is computed whole
/// by one thread, its sums in one fixed order: the same bits on any thread count. The context is
/// computed from the probabilities as stored (rounded once where they are 16-bit), as the backward
/// reads them, after `drop` (the stored probabilities are those before it; the mask is drawn again
/// in the backward).
template <Compute C, Storage T, Storage Y>
void attention_forward(const T* qkv, const attention_shape& a, const attention_mask& mask, Y* probs, Y* context,
                       workspace<C>& ws, parallelism par = {}, const tensor::rounding& probs_rounding = {},
                       const tensor::rounding& context_rounding = {}, const attention_dropout& drop = {}) {
    const std::size_t L = a.length, dh = a.head_width, d = a.width(), ld = 3 * d;
    const C scale = C(1) / std::sqrt(static_cast<C>(dh));
    store_compute<C, Y> p_dst(probs, a.probabilities(), ws.c, {}, probs_rounding, nullptr, staging::parts);
    store_compute<C, Y> ctx_dst(context, a.rows() * d, ws.partial, par, context_rounding);
    C* out = ctx_dst.target();
    const bool drops = drop.drops();
    detail::over_head_pairs(a.samples * a.heads, (drops ? 2 : 1) * L * L, ws, par, [&](std::size_t pair, std::size_t t) {
        const std::size_t s = pair / a.heads, h = pair % a.heads;
        const T* q = qkv + s * L * ld + h * dh;
        const T* k = q + d;
        const T* v = q + 2 * d;
        const std::size_t p0 = pair * L * L;
        C* scores = std::is_same_v<C, Y> ? reinterpret_cast<C*>(probs + p0) : ws.cols[t].data();
        const gemm_options one{1, &ws.packs[t], nullptr};
        const std::uint16_t* seg = mask.segments == nullptr ? nullptr : mask.segments + s * L;
        const bool prefix = mask.causal && seg == nullptr;  // each query sees the keys up to itself
        const std::size_t B = prefix ? detail::causal_block : L;
        // Key block [j0, j1) is seen by the queries from j0 on: the block is the operand packed (once
        // in all), the queries are read in place.
        for (std::size_t j0 = 0; j0 < L; j0 += B) {
            const std::size_t j1 = std::min(L, j0 + B), from = prefix ? j0 : 0;
            gemm(trans::no, trans::yes, L - from, j1 - j0, dh, scale, q + from * ld, ld, k + j0 * ld, ld, C(0),
                 scores + from * L + j0, L, one);
        }
        constexpr C minus_infinity = -std::numeric_limits<C>::infinity();
        for (std::size_t i = 0; i < L; ++i) {
            C* row = scores + i * L;
            if (prefix) {
                detail::softmax_row(row, i + 1, [](std::size_t) { return false; });
                std::fill(row + i + 1, row + L, C(0));
                continue;
            }
            bool any = false;
            for (std::size_t j = 0; j < L; ++j) {
                if (detail::attends(mask, seg, i, j))
                    any = true;
                else
                    row[j] = minus_infinity;
            }
            if (!any) {  // a query that sees no key (padding): a row of zeros
                std::fill(row, row + L, C(0));
                continue;
            }
            detail::softmax_row(row, L, [&](std::size_t j) { return !detail::attends(mask, seg, i, j); });
        }
        if constexpr (!std::is_same_v<C, Y>) p_dst.commit_part(scores, p0, p0 + L * L);
        const C* kept = nullptr;
        if (drops) {
            C* buffer = ws.cols[t].data() + L * L;
            detail::kept_probabilities(probs + p0, s, h, a.heads, L, drop, prefix, buffer);
            kept = buffer;
        }
        // The context, key block by key block: the first sets every row, the rest add to the rows
        // that see them.
        for (std::size_t j0 = 0; j0 < L; j0 += B) {
            const std::size_t j1 = std::min(L, j0 + B), from = prefix ? j0 : 0;
            C* ctx = out + (s * L + from) * d + h * dh;
            const C beta = j0 == 0 ? C(0) : C(1);
            if (kept != nullptr)
                gemm(trans::no, trans::no, L - from, dh, j1 - j0, C(1), kept + from * L + j0, L, v + j0 * ld, ld, beta, ctx,
                     d, one);
            else
                gemm(trans::no, trans::no, L - from, dh, j1 - j0, C(1), probs + p0 + from * L + j0, L, v + j0 * ld, ld,
                     beta, ctx, d, one);
        }
    });
    ctx_dst.commit();
}

/// Backward: dqkv (overwritten) from the context's gradient, the forward's fused QKV, mask and stored
/// probabilities. With P the probabilities, M the forward's dropout (kept / (1 − p), else 0; 1
/// without dropout) and dO a head's context gradient: dV = (M ⊙ P)ᵀ·dO, dP = M ⊙ (dO·Vᵀ),
/// dS = P ⊙ (dP − rowsum(P ⊙ dP)) / √d_head, dQ = dS·K, dK = dSᵀ·Q. Under a causal mask without
/// segments the products skip what the forward's did (P is 0 after each query).
template <Compute C, Storage T, Storage Y, Storage D, Storage X>
void attention_backward(const T* qkv, const Y* probs, const D* dcontext, const attention_shape& a,
                        const attention_mask& mask, X* dqkv, workspace<C>& ws, parallelism par = {},
                        const tensor::rounding& rounding = {}, const attention_dropout& drop = {}) {
    const std::size_t L = a.length, dh = a.head_width, d = a.width(), ld = 3 * d;
    const C scale = C(1) / std::sqrt(static_cast<C>(dh));
    store_compute<C, X> dst(dqkv, a.rows() * ld, ws.partial, par, rounding);
    C* out = dst.target();
    const bool drops = drop.drops();
    detail::over_head_pairs(a.samples * a.heads, (drops ? 2 : 1) * L * L, ws, par, [&](std::size_t pair, std::size_t t) {
        const std::size_t s = pair / a.heads, h = pair % a.heads;
        const T* q = qkv + s * L * ld + h * dh;
        const T* k = q + d;
        const T* v = q + 2 * d;
        const Y* p = probs + pair * L * L;
        const D* dout = dcontext + s * L * d + h * dh;
        C* dq = out + s * L * ld + h * dh;
        C* dk = dq + d;
        C* dv = dq + 2 * d;
        C* dp = ws.cols[t].data();
        const gemm_options one{1, &ws.packs[t], nullptr};
        const bool prefix = mask.causal && mask.segments == nullptr;
        const std::size_t B = prefix ? detail::causal_block : L;
        C* kept = nullptr;
        if (drops) {
            kept = dp + L * L;
            detail::kept_probabilities(p, s, h, a.heads, L, drop, prefix, kept);
        }
        // Each product packs one block of B rows (once in all) and reads the rest in place: dV and dK
        // add query block by query block, the last first (it sets every row); dP and dQ go key
        // block by key block (key block [j0, j1) is seen by the queries from j0 on).
        const std::size_t blocks = (L + B - 1) / B;
        for (std::size_t b = blocks; b-- > 0;) {
            const std::size_t i0 = b * B, i1 = std::min(L, i0 + B), keys = prefix ? i1 : L;
            const C beta = b + 1 == blocks ? C(0) : C(1);
            if (kept != nullptr)
                gemm(trans::yes, trans::no, keys, dh, i1 - i0, C(1), kept + i0 * L, L, dout + i0 * d, d, beta, dv, ld, one);
            else
                gemm(trans::yes, trans::no, keys, dh, i1 - i0, C(1), p + i0 * L, L, dout + i0 * d, d, beta, dv, ld, one);
        }
        for (std::size_t j0 = 0; j0 < L; j0 += B) {
            const std::size_t j1 = std::min(L, j0 + B), from = prefix ? j0 : 0;
            gemm(trans::no, trans::yes, L - from, j1 - j0, dh, C(1), dout + from * d, d, v + j0 * ld, ld, C(0),
                 dp + from * L + j0, L, one);
        }
        if (drops) detail::kept_probabilities(dp, s, h, a.heads, L, drop, prefix, dp);  // M ⊙ (dO·Vᵀ), in place
        const simd::batch<C> by(scale);
        for (std::size_t i = 0; i < L; ++i) {
            const Y* pr = p + i * L;
            C* row = dp + i * L;
            const std::size_t seen = prefix ? i + 1 : L;
            const C dot = simd::dot<C>(pr, row, seen);
            constexpr std::size_t w = simd::batch<C>::size;
            const simd::batch<C> dots(dot);
            std::size_t j = 0;
            for (; j + w <= seen; j += w)
                (simd::load_widened<C>(pr + j) * (simd::batch<C>::load_unaligned(row + j) - dots) * by).store_unaligned(row + j);
            for (; j < seen; ++j) row[j] = detail::load_as<C>(pr[j]) * (row[j] - dot) * scale;
            // zeros to the end of the query's block: the products below read them
            if (prefix) std::fill(row + seen, row + std::min(L, (i / B + 1) * B), C(0));
        }
        for (std::size_t j0 = 0; j0 < L; j0 += B) {
            const std::size_t j1 = std::min(L, j0 + B), from = prefix ? j0 : 0;
            gemm(trans::no, trans::no, L - from, dh, j1 - j0, C(1), dp + from * L + j0, L, k + j0 * ld, ld,
                 j0 == 0 ? C(0) : C(1), dq + from * ld, ld, one);
        }
        for (std::size_t b = blocks; b-- > 0;) {
            const std::size_t i0 = b * B, i1 = std::min(L, i0 + B), keys = prefix ? i1 : L;
            gemm(trans::yes, trans::no, keys, dh, i1 - i0, C(1), dp + i0 * L, L, q + i0 * ld, ld, b + 1 == blocks ? C(0) : C(1),
                 dk, ld, one);
        }
    });
    dst.commit();
}

}  // namespace tessera::kernels
