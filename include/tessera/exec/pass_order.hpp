#pragma once
// The order of a pipeline's forward and backward passes: each stage's own sequence (GPipe, 1F1B), each
// IPU's over its model chunks (interleaved 1F1B), and the global order in rounds the schedule's
// instruction lists are cut from (exec::make_schedule).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

namespace tessera::exec {

/// Order of the forward and backward passes within a pipeline (interleaved: 1F1B over model chunks,
/// schedule_request::virtual_stages of them per IPU; zero-bubble: 1F1B with each backward split into
/// its input gradient B and its weight gradient W, the W passes run later to fill the bubbles).
enum class pipeline_order { gpipe, one_f_one_b, interleaved, zero_bubble_h1, zero_bubble_h2, looped_bfs };

/// Whether the order runs model chunks, several stages per IPU (interleaved, looped BFS).
[[nodiscard]] constexpr bool runs_chunks(pipeline_order order) noexcept {
    return order == pipeline_order::interleaved || order == pipeline_order::looped_bfs;
}

/// Whether the order splits each backward pass into B and W (the zero-bubble ones).
[[nodiscard]] constexpr bool splits_backward(pipeline_order order) noexcept {
    return order == pipeline_order::zero_bubble_h1 || order == pipeline_order::zero_bubble_h2;
}

namespace detail {

struct pass {
    bool backward;
    std::uint32_t stage, micro_batch;
    bool weights = false;  ///< with backward: the weight-gradient half W of a split backward pass
    std::uint32_t round = 0;  ///< pipelines: the round of interleave() it runs in (a lock-step pipeline cycle)
};

/// Stage s's sequence in a zero-bubble pipeline (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR
/// 2024): 1F1B's order of F and B with `warmup` forwards first, and each W run `lag` B passes after its
/// own B (the rest at the end). ZB-H1: 1F1B's warm-up (S - 1 - s) and a lag of s, so every stage holds
/// at most S micro-batches between F and W, as 1F1B's first stage does; with T_W <= T_F its bubble is
/// (S - 1)(T_F + T_B - T_W) where 1F1B's is (S - 1)(T_F + T_B + T_W). ZB-H2: 2 (S - 1 - s) warm-up
/// forwards and a lag of 2s, up to 2S - 1 micro-batches on every stage, and only the start's (S - 1) T_F
/// left of the bubble within a step. W passes run in micro-batch order on each stage, so every weight
/// gradient adds its micro-batches in the order the sequential run adds them.
inline std::vector<pass> zero_bubble_sequence(std::size_t s, std::size_t M, std::size_t warmup, std::size_t lag) {
    std::vector<pass> q;
    const auto st = static_cast<std::uint32_t>(s);
    const auto u32 = [](std::size_t v) { return static_cast<std::uint32_t>(v); };
    std::size_t f = 0, b = 0, w = 0;
    const auto backward = [&] {
        q.push_back({true, st, u32(b++)});
        for (; b - w > lag; ++w) q.push_back({true, st, u32(w), true});
    };
    for (; f < std::min(warmup, M); ++f) q.push_back({false, st, u32(f)});
    while (f < M) {
        q.push_back({false, st, u32(f++)});
        backward();
    }
    while (b < M) backward();
    for (; w < M; ++w) q.push_back({true, st, u32(w), true});
    return q;
}

/// Each stage's own sequence of passes (pipelined): GPipe = all forwards then all backwards;
/// 1F1B = (S - 1 - s) warm-up forwards, then one forward and one backward alternately; zero-bubble:
/// zero_bubble_sequence.
inline std::vector<std::vector<pass>> stage_sequences(pipeline_order order, std::size_t S, std::size_t M, bool training) {
    std::vector<std::vector<pass>> seq(S);
    for (std::size_t s = 0; s < S; ++s) {
        auto& q = seq[s];
        const auto st = static_cast<std::uint32_t>(s);
        if (training && splits_backward(order)) {
            const bool h2 = order == pipeline_order::zero_bubble_h2;
            q = zero_bubble_sequence(s, M, (h2 ? 2 : 1) * (S - 1 - s), (h2 ? 2 : 1) * s);
            continue;
        }
        if (!training || order == pipeline_order::gpipe) {
            for (std::size_t m = 0; m < M; ++m) q.push_back({false, st, static_cast<std::uint32_t>(m)});
            if (training)
                for (std::size_t m = 0; m < M; ++m) q.push_back({true, st, static_cast<std::uint32_t>(m)});
            continue;
        }
        const std::size_t warmup = std::min(S - 1 - s, M);
        std::size_t f = 0, b = 0;
        for (; f < warmup; ++f) q.push_back({false, st, static_cast<std::uint32_t>(f)});
        while (f < M) {
            q.push_back({false, st, static_cast<std::uint32_t>(f++)});
            q.push_back({true, st, static_cast<std::uint32_t>(b++)});
        }
        while (b < M) q.push_back({true, st, static_cast<std::uint32_t>(b++)});
    }
    return seq;
}

/// The pipeline cycles in which Poplar runs a 1F1B training pipeline of S stages (PopART's
/// pipelining transform, popart docs/notes/transforms/pipelining.md): the S forward and S - 1
/// backward pipeline stages each run once in every cycle of the main phase, in parallel over the
/// IPUs, an IPU's own stages one after the other (its forwards, then its backwards). The forward of
/// stage s on micro-batch m runs in cycle m + s, its backward in cycle m + 2(S - 1) - s (the last
/// stage's forward and backward in one cycle): M + 2(S - 1) cycles, and stage s holds 2(S - 1 - s) + 1
/// micro-batches ("a stash size of 2*(IPUs to end) + 1", popart willow/src/transforms/pipeline.cpp).
inline std::vector<pass> pipeline_cycles(std::size_t S, std::size_t M) {
    std::vector<pass> order;
    const auto u32 = [](std::size_t v) { return static_cast<std::uint32_t>(v); };
    for (std::size_t c = 0; c < M + 2 * S - 2; ++c) {  // S, M >= 1
        for (std::size_t s = 0; s < S; ++s)
            if (c >= s && c - s < M) order.push_back({false, u32(s), u32(c - s), false, u32(c)});
        for (std::size_t s = S; s-- > 0;)
            if (const std::size_t lag = 2 * (S - 1) - s; c >= lag && c - lag < M)
                order.push_back({true, u32(s), u32(c - lag), false, u32(c)});
    }
    return order;
}

/// Interleaves the sequences of lanes that run in parallel (a stage each, or an IPU each when
/// interleaved) into one global order by rounds: in each round every lane whose next pass has its
/// inputs (from earlier rounds) performs it.
inline std::vector<pass> interleave(const std::vector<std::vector<pass>>& seq, std::size_t S, std::size_t M) {
    std::vector<std::vector<char>> fwd(S, std::vector<char>(M, 0)), bwd(S, std::vector<char>(M, 0));
    std::vector<std::size_t> next(seq.size(), 0);
    std::vector<pass> order;
    std::size_t remaining = 0;
    for (const auto& q : seq) remaining += q.size();
    for (std::uint32_t round_index = 0; remaining > 0; ++round_index) {
        std::vector<std::pair<std::size_t, pass>> round;
        for (std::size_t lane = 0; lane < seq.size(); ++lane) {
            if (next[lane] == seq[lane].size()) continue;
            const pass p = seq[lane][next[lane]];
            const std::size_t s = p.stage;
            const bool ready = p.weights    ? bwd[s][p.micro_batch] != 0  // W after its own B
                               : p.backward ? fwd[s][p.micro_batch] && (s + 1 == S || bwd[s + 1][p.micro_batch])
                                            : (s == 0 || fwd[s - 1][p.micro_batch]);
            if (ready) round.emplace_back(lane, p);
        }
        if (round.empty())
            throw std::logic_error("tessera::exec::make_schedule: the pipeline's sequences cannot make progress");
        for (auto [lane, p] : round) {
            if (!p.weights) (p.backward ? bwd : fwd)[p.stage][p.micro_batch] = 1;
            ++next[lane];
            p.round = round_index;
            order.push_back(p);
            --remaining;
        }
    }
    return order;
}

/// Each IPU's sequence of an interleaved pipeline (Megatron-LM's interleaved 1F1B): forwards go
/// through the micro-batches in groups of I (the IPU count), chunk by chunk within a group, backwards
/// the same with the chunks reversed; IPU d warms up with 2 (I - d - 1) + (V - 1) I forwards (all of
/// them when G = I), then alternates one forward and one backward. Chunk c of IPU d is stage c·I + d.
inline std::vector<std::vector<pass>> ipu_sequences(std::size_t I, std::size_t V, std::size_t M, bool training) {
    const std::size_t total = M * V;
    const auto u32 = [](std::size_t v) { return static_cast<std::uint32_t>(v); };
    std::vector<std::vector<pass>> seq(I);
    for (std::size_t d = 0; d < I; ++d) {
        const auto at = [&](std::size_t k, bool backward) {
            const std::size_t j = k % (I * V), chunk = j / I;
            const std::size_t c = backward ? V - 1 - chunk : chunk;
            return pass{backward, u32(c * I + d), u32(k / (I * V) * I + j % I)};
        };
        auto& q = seq[d];
        const std::size_t warmup = !training || M == I ? total : std::min(total, 2 * (I - d - 1) + (V - 1) * I);
        std::size_t f = 0, b = 0;
        for (; f < warmup; ++f) q.push_back(at(f, false));
        if (!training) continue;
        while (f < total) {
            q.push_back(at(f++, false));
            q.push_back(at(b++, true));
        }
        while (b < total) q.push_back(at(b++, true));
    }
    return seq;
}

/// Each IPU's sequence of a looped BFS pipeline: the forwards of every micro-batch through chunk 0,
/// then chunk 1, ..., then the backwards chunk by chunk in reverse, each in micro-batch order. Chunk
/// c of IPU d is stage c·I + d.
inline std::vector<std::vector<pass>> looped_sequences(std::size_t I, std::size_t V, std::size_t M, bool training) {
    const auto u32 = [](std::size_t v) { return static_cast<std::uint32_t>(v); };
    std::vector<std::vector<pass>> seq(I);
    for (std::size_t d = 0; d < I; ++d) {
        for (std::size_t c = 0; c < V; ++c)
            for (std::size_t m = 0; m < M; ++m) seq[d].push_back({false, u32(c * I + d), u32(m)});
        if (training)
            for (std::size_t c = V; c-- > 0;)
                for (std::size_t m = 0; m < M; ++m) seq[d].push_back({true, u32(c * I + d), u32(m)});
    }
    return seq;
}

}  // namespace detail

}  // namespace tessera::exec
