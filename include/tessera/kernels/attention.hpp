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
/// probabilities of (sample s, head h) (or their gradients; `p` may be `kept`).
template <class C, class Y>
void kept_probabilities(const Y* p, std::size_t s, std::size_t h, std::size_t heads, std::size_t L,
                        const attention_dropout& drop, C* kept) {
    const std::uint64_t threshold = dropout_threshold(drop.p), base = drop.stream.base();
    const std::uint64_t first = (drop.stream.first_sample + s) * heads * L * L + h * L * L;
    const C scale = static_cast<C>(1.0 / (1.0 - drop.p));
    for (std::size_t e = 0; e < L * L; ++e)
        kept[e] = dropout_keeps(base, first + e, threshold) ? load_as<C>(p[e]) * scale : C(0);
}

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
        gemm(trans::no, trans::yes, L, L, dh, scale, q, ld, k, ld, C(0), scores, L, one);
        const std::uint16_t* seg = mask.segments == nullptr ? nullptr : mask.segments + s * L;
        constexpr C minus_infinity = -std::numeric_limits<C>::infinity();
        for (std::size_t i = 0; i < L; ++i) {
            C* row = scores + i * L;
            C top = minus_infinity;
            for (std::size_t j = 0; j < L; ++j) {
                if (detail::attends(mask, seg, i, j))
                    top = std::max(top, row[j]);
                else
                    row[j] = minus_infinity;
            }
            if (top == minus_infinity) {  // a query that sees no key (padding): a row of zeros
                std::fill(row, row + L, C(0));
                continue;
            }
            // exp in lanes (xsimd's), every element in a whole batch: the same bits wherever it falls
            simd::map_batches<C>(row, row, L, [top](const simd::batch<C>& lanes) { return xsimd::exp(lanes - simd::batch<C>(top)); });
            C sum = 0;
            for (std::size_t j = 0; j < L; ++j) {
                if (row[j] != row[j] || !detail::attends(mask, seg, i, j)) row[j] = C(0);  // exp(-inf) is 0 exactly
                sum += row[j];
            }
            const C inv = C(1) / sum;
            for (std::size_t j = 0; j < L; ++j) row[j] *= inv;
        }
        if constexpr (!std::is_same_v<C, Y>) p_dst.commit_part(scores, p0, p0 + L * L);
        if (drops) {
            C* kept = ws.cols[t].data() + L * L;
            detail::kept_probabilities(probs + p0, s, h, a.heads, L, drop, kept);
            gemm(trans::no, trans::no, L, dh, L, C(1), kept, L, v, ld, C(0), out + s * L * d + h * dh, d, one);
        } else {
            gemm(trans::no, trans::no, L, dh, L, C(1), probs + p0, L, v, ld, C(0), out + s * L * d + h * dh, d, one);
        }
    });
    ctx_dst.commit();
}

/// Backward: dqkv (overwritten) from the context's gradient, the forward's fused QKV and stored
/// probabilities. With P the probabilities, M the forward's dropout (kept / (1 − p), else 0; 1
/// without dropout) and dO a head's context gradient: dV = (M ⊙ P)ᵀ·dO, dP = M ⊙ (dO·Vᵀ),
/// dS = P ⊙ (dP − rowsum(P ⊙ dP)) / √d_head, dQ = dS·K, dK = dSᵀ·Q.
template <Compute C, Storage T, Storage Y, Storage D, Storage X>
void attention_backward(const T* qkv, const Y* probs, const D* dcontext, const attention_shape& a, X* dqkv,
                        workspace<C>& ws, parallelism par = {}, const tensor::rounding& rounding = {},
                        const attention_dropout& drop = {}) {
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
        if (drops) {
            C* kept = dp + L * L;
            detail::kept_probabilities(p, s, h, a.heads, L, drop, kept);
            gemm(trans::yes, trans::no, L, dh, L, C(1), kept, L, dout, d, C(0), dv, ld, one);
            gemm(trans::no, trans::yes, L, L, dh, C(1), dout, d, v, ld, C(0), dp, L, one);
            detail::kept_probabilities(dp, s, h, a.heads, L, drop, dp);  // M ⊙ (dO·Vᵀ), in place
        } else {
            gemm(trans::yes, trans::no, L, dh, L, C(1), p, L, dout, d, C(0), dv, ld, one);
            gemm(trans::no, trans::yes, L, L, dh, C(1), dout, d, v, ld, C(0), dp, L, one);
        }
        for (std::size_t i = 0; i < L; ++i) {
            const Y* pr = p + i * L;
            C* row = dp + i * L;
            C dot = 0;
            for (std::size_t j = 0; j < L; ++j) dot = std::fma(detail::load_as<C>(pr[j]), row[j], dot);
            for (std::size_t j = 0; j < L; ++j) row[j] = detail::load_as<C>(pr[j]) * (row[j] - dot) * scale;
        }
        gemm(trans::no, trans::no, L, dh, L, C(1), dp, L, k, ld, C(0), dq, ld, one);
        gemm(trans::yes, trans::no, L, dh, L, C(1), dp, L, q, ld, C(0), dk, ld, one);
    });
    dst.commit();
}

}  // namespace tessera::kernels
