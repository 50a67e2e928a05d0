#pragma once
// Static schedules as data: one instruction list per IPU, generated once for each strategy.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/config/error.hpp"
#include "tessera/config/description.hpp"
#include "tessera/config/strategy.hpp"
#include "tessera/exec/pass_order.hpp"

namespace tessera::exec {

/// What one instruction does. Communication is explicit: a value crossing IPUs is a send on one
/// list and the matching receive on the other.
enum class opcode : std::uint8_t {
    load,        ///< receive micro-batch `micro_batch`'s input from the host (infeed)
    load_label,  ///< receive its label from the host (on the IPU that computes the loss)
    recv_act,    ///< receive the input activation of `stage` from IPU `peer`
    fwd,         ///< forward pass of `stage` (the last stage also computes the loss and its gradient)
    send_act,    ///< send the output activation of `stage` to IPU `peer`
    outfeed,     ///< send the micro-batch's loss (training) or output (inference) to the host
    recv_grad,   ///< receive the gradient of `stage`'s output from IPU `peer`
    bwd,         ///< backward pass of `stage`: accumulates its weight gradients (split: the input gradient only)
    send_grad,   ///< send the gradient of `stage`'s input to IPU `peer`
    stream_in,   ///< bring `stage`'s weights in from Streaming Memory (phased)
    stream_out,  ///< write them back
    all_reduce,  ///< sum `stage`'s gradients over the replicas, in replica order
    update,      ///< optimizer step of `stage`
    vote,        ///< every IPU of the replica agrees whether any gradient overflowed (dynamic loss scaling)
    reduce_scatter,  ///< sharded optimiser state: sum `stage`'s gradients over the replicas, each keeping its shard
    all_gather,      ///< sharded optimiser state: every replica receives the others' updated shards of `stage`
    bwd_weights,     ///< split backward (zero-bubble): the weight gradients of `stage` for the micro-batch
    sync,            ///< lock-step pipelines: every IPU of the replica ends the pipeline cycle together
};

[[nodiscard]] constexpr std::string_view to_string(opcode op) noexcept {
    switch (op) {
        case opcode::load: return "load";
        case opcode::load_label: return "load_label";
        case opcode::recv_act: return "recv_act";
        case opcode::fwd: return "fwd";
        case opcode::send_act: return "send_act";
        case opcode::outfeed: return "outfeed";
        case opcode::recv_grad: return "recv_grad";
        case opcode::bwd: return "bwd";
        case opcode::send_grad: return "send_grad";
        case opcode::stream_in: return "stream_in";
        case opcode::stream_out: return "stream_out";
        case opcode::all_reduce: return "all_reduce";
        case opcode::update: return "update";
        case opcode::vote: return "vote";
        case opcode::reduce_scatter: return "reduce_scatter";
        case opcode::all_gather: return "all_gather";
        case opcode::bwd_weights: return "bwd_weights";
        case opcode::sync: return "sync";
    }
    return "?";
}

inline constexpr std::uint32_t no_peer = 0xFFFFFFFFu;
inline constexpr std::uint32_t no_micro_batch = 0xFFFFFFFFu;

/// One step of an IPU's program.
struct instruction {
    opcode op;
    std::uint32_t stage = 0;
    std::uint32_t micro_batch = no_micro_batch;
    std::uint32_t peer = no_peer;  ///< the other IPU of a send or receive
    std::uint32_t seq = 0;         ///< position in the schedule's global order (a valid sequential execution)

    friend bool operator==(const instruction&, const instruction&) = default;
};

/// "fwd s1 mb3", "send_act s0 mb2 -> IPU 1", "update s0".
[[nodiscard]] inline std::string to_string(const instruction& in) {
    std::string s(to_string(in.op));
    if (in.op == opcode::vote || in.op == opcode::sync) return s;  // of the whole IPU, not of a stage
    s += " s" + std::to_string(in.stage);
    if (in.micro_batch != no_micro_batch) s += " mb" + std::to_string(in.micro_batch);
    if (in.peer != no_peer) {
        const bool sends = in.op == opcode::send_act || in.op == opcode::send_grad;
        s += (sends ? " -> IPU " : " <- IPU ") + std::to_string(in.peer);
    }
    return s;
}

/// What a schedule is generated from (run-time values; make_schedule<Strategy> fills it from a policy).
struct schedule_request {
    config::strategy_kind strategy = config::strategy_kind::single;
    pipeline_order order = pipeline_order::gpipe;  ///< pipelined only
    std::vector<std::size_t> ipu_of_stage{0};       ///< one entry per stage
    std::size_t micro_batches = 1;                  ///< per program: G when training, D when inferring
    bool training = true;
    std::size_t replicas = 1;                       ///< > 1 adds all_reduce before each update
    /// With replicas > 1: each replica keeps the optimiser state of 1/replicas of each stage's weights
    /// and updates those (PopTorch's replicated tensor sharding of the optimiser state, ZeRO stage 1):
    /// reduce_scatter replaces all_reduce, and all_gather follows each update.
    bool optimizer_sharding = false;
    /// Dynamic loss scaling: the updates of a step wait until every IPU of the replica has finished
    /// its backward passes and voted whether a gradient overflowed, so every stage skips together.
    bool check_overflow = false;
    /// Clipping by the global gradient norm (max_grad_norm): the same vote carries each IPU's part of
    /// the squared norm, and every update waits for the total.
    bool gradient_norm = false;
    /// A table tied between stage 0 and the last (GPT-2's head): the vote first adds the two copies'
    /// gradients (after the all-reduce), and every update waits for the sum.
    bool tied_table = false;
    std::size_t virtual_stages = 1;  ///< interleaved, looped BFS: model chunks per IPU (stage s on IPU s mod stages / V)
    /// Pipelines: run in lock-step pipeline cycles, as Poplar does. Each cycle every IPU runs the
    /// passes whose inputs earlier cycles produced, then all IPUs synchronise (opcode::sync) and
    /// exchange what crosses IPUs; the gradients are reduced and the weights updated after the last
    /// cycle. 1F1B training runs Poplar's own cycles (detail::pipeline_cycles: every stage's forward
    /// and backward in each); the other orders one pass per stage a cycle. false: asynchronous
    /// dataflow, each pass as soon as its inputs arrive.
    bool lock_step = false;
};

/// The static program of one replica: instruction lists per IPU, with what they imply.
struct schedule {
    schedule_request request;
    std::size_t stages = 1, ipus = 1;
    std::vector<std::vector<instruction>> programs;  ///< programs[ipu]
    std::vector<std::size_t> stash;                   ///< per stage: activations stashed at most
    std::vector<std::size_t> held_gradients;          ///< per stage: output gradients kept from bwd to bwd_weights
    std::size_t channel_capacity = 1;                 ///< messages a channel must hold so the lists cannot deadlock
    bool weights_streamed = false;                    ///< phased: one stage's weights on chip at a time
    bool activations_off_chip = false;                ///< phased: stashed activations kept in Streaming Memory

    /// Each backward pass runs as two instructions, bwd (input gradient) and bwd_weights (training
    /// with a zero-bubble pipeline).
    [[nodiscard]] bool backward_split() const noexcept {
        return request.training && request.strategy == config::strategy_kind::pipelined &&
               splits_backward(request.order);
    }
    /// A pipeline that runs in lock-step cycles (schedule_request::lock_step).
    [[nodiscard]] bool lock_step_cycles() const noexcept {
        return request.lock_step && request.strategy == config::strategy_kind::pipelined;
    }
    /// Replicas keep and update shards of the optimiser state (training, replicas > 1, asked for).
    [[nodiscard]] bool optimizer_sharded() const noexcept {
        return request.training && request.optimizer_sharding && request.replicas > 1;
    }
    [[nodiscard]] std::size_t instructions() const noexcept {
        std::size_t n = 0;
        for (const auto& p : programs) n += p.size();
        return n;
    }
    /// Every instruction as (IPU, position in its program), in the global order: the `seq` numbers
    /// 0, 1, ... make_schedule gives them. Throws std::logic_error when they are not that.
    [[nodiscard]] std::vector<std::pair<std::size_t, std::size_t>> in_global_order() const {
        constexpr std::size_t unset = ~std::size_t{0};
        std::vector<std::pair<std::size_t, std::size_t>> out(instructions(), {unset, unset});
        for (std::size_t i = 0; i < programs.size(); ++i)
            for (std::size_t pc = 0; pc < programs[i].size(); ++pc) {
                const std::size_t seq = programs[i][pc].seq;
                if (seq >= out.size() || out[seq].first != unset)
                    throw std::logic_error("tessera::exec::schedule: instruction positions are not 0 to " +
                                           std::to_string(out.size()) + " once each (" + to_string(programs[i][pc]) +
                                           " at " + std::to_string(seq) + ")");
                out[seq] = {i, pc};
            }
        return out;
    }
    /// "pipelined<gpipe>, 2 stages on 2 IPUs, 4 micro-batches, training".
    [[nodiscard]] std::string description() const {
        std::string s;
        switch (request.strategy) {
            case config::strategy_kind::single: s = "single"; break;
            case config::strategy_kind::sharded: s = "sharded"; break;
            case config::strategy_kind::phased: s = "phased"; break;
            case config::strategy_kind::pipelined:
                s = request.order == pipeline_order::gpipe            ? "pipelined<gpipe>"
                    : request.order == pipeline_order::one_f_one_b    ? "pipelined<1f1b>"
                    : request.order == pipeline_order::zero_bubble_h1 ? "pipelined<zero_bubble_h1>"
                    : request.order == pipeline_order::zero_bubble_h2 ? "pipelined<zero_bubble_h2>"
                    : request.order == pipeline_order::looped_bfs
                        ? "pipelined<looped_bfs<" + std::to_string(request.virtual_stages) + ">>"
                        : "pipelined<interleaved<" + std::to_string(request.virtual_stages) + ">>";
                break;
        }
        s += ", " + std::to_string(stages) + (stages == 1 ? " stage" : " stages") + " on " + std::to_string(ipus) +
             (ipus == 1 ? " IPU, " : " IPUs, ") + std::to_string(request.micro_batches) + " micro-batches, " +
             (request.training ? "training" : "inference");
        if (request.replicas > 1) s += ", " + std::to_string(request.replicas) + " replicas";
        if (optimizer_sharded()) s += ", optimiser state sharded";
        if (request.training && (request.check_overflow || request.gradient_norm || request.tied_table)) {
            std::string votes;
            for (const auto& [on, what] : {std::pair{request.tied_table, "the tied table's gradients"},
                                           std::pair{request.check_overflow, "overflow"},
                                           std::pair{request.gradient_norm, "the gradient norm"}})
                if (on) votes += (votes.empty() ? "" : ", ") + std::string(what);
            s += ", updates after a vote (" + votes + ")";
        }
        if (lock_step_cycles()) s += ", lock-step pipeline cycles";
        return s;
    }
};

/// Generates the schedule: a global order of forward/backward passes chosen by the strategy,
/// projected onto each IPU with sends and receives where a value crosses IPUs. Because every list
/// is a projection of one valid sequential order and channels hold `channel_capacity` messages,
/// the lists cannot deadlock.
/// Throws config::pipeline_depth_error when a pipeline has too few micro-batches
/// (training: G >= 2S - 1; inference: D >= S), config::config_error for other bad requests.
[[nodiscard]] schedule make_schedule(const schedule_request& request);

namespace detail {
/// The pass order of a pipeline: over `virtual_stages` > 1 chunks looped BFS (GPipe) or interleaved
/// (1F1B); else GPipe, zero-bubble or 1F1B.
[[nodiscard]] constexpr pipeline_order order_of(bool gpipe, std::size_t virtual_stages,
                                                config::zero_bubble_kind zero_bubble) noexcept {
    if (virtual_stages > 1) return gpipe ? pipeline_order::looped_bfs : pipeline_order::interleaved;
    if (gpipe) return pipeline_order::gpipe;
    if (zero_bubble == config::zero_bubble_kind::h1) return pipeline_order::zero_bubble_h1;
    if (zero_bubble == config::zero_bubble_kind::h2) return pipeline_order::zero_bubble_h2;
    return pipeline_order::one_f_one_b;
}
}  // namespace detail

/// The request for strategy policy `S` (config::sharded<2>, config::pipelined<config::gpipe, 4>, ...).
/// `ipu_of_stage`: the IPU of each stage; empty: S's own map (a dynamic stage count needs it given).
template <config::Strategy S>
[[nodiscard]] schedule_request request_for(std::size_t micro_batches, bool training = true, std::size_t replicas = 1,
                                           std::span<const std::size_t> ipu_of_stage = {}) {
    schedule_request r;
    r.strategy = S::kind;
    if constexpr (S::kind == config::strategy_kind::pipelined) {
        r.order = detail::order_of(config::detail::breadth_first<typename S::schedule>, S::virtual_stages,
                                   config::detail::zero_bubble_of<S>());
        r.virtual_stages = S::virtual_stages;
    }
    if (!ipu_of_stage.empty()) {
        r.ipu_of_stage.assign(ipu_of_stage.begin(), ipu_of_stage.end());
    } else if constexpr (S::stages == config::dynamic) {
        throw config::config_error("tessera::exec::request_for: the strategy's stage count is dynamic; give the IPU "
                                   "of each stage (config::batching::ipu_of_stage)");
    } else {
        r.ipu_of_stage.clear();
        for (std::size_t s = 0; s < S::stages; ++s) r.ipu_of_stage.push_back(S::ipu_of_stage(s));
    }
    r.micro_batches = micro_batches;
    r.training = training;
    r.replicas = replicas;
    return r;
}

/// The request of the strategy configuration `c` describes, its stages on `ipu_of_stage` (one IPU each).
[[nodiscard]] inline schedule_request request_for(const config::description& c, std::size_t micro_batches,
                                                  std::size_t replicas, std::span<const std::size_t> ipu_of_stage) {
    schedule_request r;
    r.strategy = c.strategy;
    if (c.strategy == config::strategy_kind::pipelined) {
        r.order = detail::order_of(c.schedule_is_gpipe, c.virtual_stages, c.zero_bubble);
        r.virtual_stages = c.virtual_stages;
    }
    r.ipu_of_stage.assign(ipu_of_stage.begin(), ipu_of_stage.end());
    r.micro_batches = micro_batches;
    r.training = c.training;
    r.replicas = replicas;
    return r;
}

template <config::Strategy S>
[[nodiscard]] schedule make_schedule(std::size_t micro_batches, bool training = true, std::size_t replicas = 1) {
    return make_schedule(request_for<S>(micro_batches, training, replicas));
}

// ---------------------------------------------------------------------------------------------
// implementation

namespace detail {

inline std::vector<pass> global_order(const schedule_request& r, std::size_t S) {
    const std::size_t M = r.micro_batches;
    std::vector<pass> order;
    const auto u32 = [](std::size_t v) { return static_cast<std::uint32_t>(v); };
    switch (r.strategy) {
        case config::strategy_kind::single:
        case config::strategy_kind::sharded:
            for (std::size_t m = 0; m < M; ++m) {
                for (std::size_t s = 0; s < S; ++s) order.push_back({false, u32(s), u32(m)});
                if (r.training)
                    for (std::size_t s = S; s-- > 0;) order.push_back({true, u32(s), u32(m)});
            }
            break;
        case config::strategy_kind::phased:
            for (std::size_t s = 0; s < S; ++s)
                for (std::size_t m = 0; m < M; ++m) order.push_back({false, u32(s), u32(m)});
            if (r.training)
                for (std::size_t s = S; s-- > 0;)
                    for (std::size_t m = 0; m < M; ++m) order.push_back({true, u32(s), u32(m)});
            break;
        case config::strategy_kind::pipelined:
            if (r.order == pipeline_order::interleaved)
                order = interleave(ipu_sequences(S / r.virtual_stages, r.virtual_stages, M, r.training), S, M);
            else if (r.order == pipeline_order::looped_bfs)
                order = interleave(looped_sequences(S / r.virtual_stages, r.virtual_stages, M, r.training), S, M);
            else if (r.training && r.lock_step && r.order == pipeline_order::one_f_one_b)
                order = pipeline_cycles(S, M);  // Poplar's cycles: every stage's forward and backward in each
            else
                order = interleave(stage_sequences(r.order, S, M, r.training), S, M);
            break;
    }
    return order;
}

}  // namespace detail

inline schedule make_schedule(const schedule_request& r) {
    const std::size_t S = r.ipu_of_stage.size();
    if (S == 0) throw config::config_error("tessera::exec::make_schedule: the strategy has no stages");
    if (r.micro_batches == 0)
        throw config::config_error("tessera::exec::make_schedule: at least one micro-batch per program is needed");
    if (r.replicas == 0) throw config::config_error("tessera::exec::make_schedule: replicas must be at least 1");
    if (r.strategy == config::strategy_kind::pipelined && runs_chunks(r.order)) {  // the rules of interleaved<V>
        const std::size_t V = r.virtual_stages, I = V > 0 && S % V == 0 ? S / V : 0, M = r.micro_batches;
        if (V < 2 || I == 0)
            throw config::config_error("tessera::exec::make_schedule: an interleaved pipeline needs 2 or more model "
                                       "chunks per IPU dividing its " + std::to_string(S) + " stages, got " +
                                       std::to_string(V));
        if (const std::size_t s = config::first_stage_off_round_robin(r.ipu_of_stage, V); s < S)
            throw config::config_error("tessera::exec::make_schedule: an interleaved pipeline puts stage " +
                                       std::to_string(s) + " on IPU " + std::to_string(s % I) + ", not " +
                                       std::to_string(r.ipu_of_stage[s]));
        if (!config::interleaved_count_fits(M, I, r.training))
            throw config::pipeline_depth_error(
                "tessera::exec::make_schedule: an interleaved pipeline on " + std::to_string(I) + " IPUs runs its " +
                "micro-batches in groups of " + std::to_string(I) + ": it needs a multiple of " + std::to_string(I) +
                (r.training ? " and at least " + std::to_string(2 * I - 1) : std::string()) + ", got " +
                std::to_string(M));
    } else if (r.strategy == config::strategy_kind::pipelined) {
        if (r.training && r.micro_batches < 2 * S - 1)
            throw config::pipeline_depth_error(
                "tessera::exec::make_schedule: pipelined training with " + std::to_string(S) +
                " stages needs gradient accumulation G >= 2*S - 1 = " + std::to_string(2 * S - 1) + ", got G = " +
                std::to_string(r.micro_batches) + " (the last forward and the first backward stage are merged)");
        if (!r.training && r.micro_batches < S)
            throw config::pipeline_depth_error("tessera::exec::make_schedule: pipelined inference with " +
                                               std::to_string(S) + " stages needs device iterations D >= " +
                                               std::to_string(S) + ", got D = " + std::to_string(r.micro_batches));
    }
    std::size_t ipus = 0;
    for (auto i : r.ipu_of_stage) ipus = std::max(ipus, i + 1);

    schedule out;
    out.request = r;
    out.stages = S;
    out.ipus = ipus;
    out.programs.assign(ipus, {});
    out.weights_streamed = r.strategy == config::strategy_kind::phased;
    out.activations_off_chip = r.strategy == config::strategy_kind::phased && r.training;

    const auto order = detail::global_order(r, S);
    const auto& where = r.ipu_of_stage;
    std::uint32_t seq = 0;
    std::vector<std::size_t> backward_done(S, 0);
    std::vector<long> resident(ipus, -1);  // phased: the stage whose weights are on chip
    auto emit = [&](std::size_t ipu, opcode op, std::size_t stage, std::uint32_t mb = no_micro_batch,
                    std::uint32_t peer = no_peer) {
        out.programs[ipu].push_back({op, static_cast<std::uint32_t>(stage), mb, peer, seq++});
    };
    auto make_resident = [&](std::size_t ipu, std::size_t stage) {
        if (!out.weights_streamed || resident[ipu] == static_cast<long>(stage)) return;
        if (resident[ipu] >= 0) emit(ipu, opcode::stream_out, static_cast<std::size_t>(resident[ipu]));
        emit(ipu, opcode::stream_in, stage);
        resident[ipu] = static_cast<long>(stage);
    };
    const auto u32 = [](std::size_t v) { return static_cast<std::uint32_t>(v); };
    const bool overflow_vote = r.training && (r.check_overflow || r.gradient_norm || r.tied_table);
    const bool split = out.backward_split();
    const bool shard_state = out.optimizer_sharded();
    std::vector<std::size_t> deferred_updates;
    // Lock-step: a cycle's sends wait for its sync; reductions and updates for the last cycle.
    const bool lock_step = out.lock_step_cycles();
    struct pending_send {
        std::size_t ipu;
        opcode op;
        std::size_t stage;
        std::uint32_t micro_batch, peer;
    };
    std::vector<pending_send> cycle_sends;
    std::vector<std::size_t> finished;
    std::uint32_t cycle = order.empty() ? 0 : order.front().round;
    const auto send = [&](std::size_t ipu, opcode op, std::size_t stage, std::uint32_t mb, std::uint32_t peer) {
        if (lock_step)
            cycle_sends.push_back({ipu, op, stage, mb, peer});
        else
            emit(ipu, op, stage, mb, peer);
    };
    const auto end_cycle = [&] {
        for (std::size_t i = 0; i < ipus; ++i) emit(i, opcode::sync, 0);
        for (const auto& p : cycle_sends) emit(p.ipu, p.op, p.stage, p.micro_batch, p.peer);
        cycle_sends.clear();
    };
    const auto reduce_and_update = [&](std::size_t s) {
        const std::size_t i = where[s];
        if (r.replicas > 1) emit(i, shard_state ? opcode::reduce_scatter : opcode::all_reduce, s);
        if (overflow_vote) {
            deferred_updates.push_back(s);
        } else {
            emit(i, opcode::update, s);
            if (shard_state) emit(i, opcode::all_gather, s);
        }
    };

    for (const auto& p : order) {
        if (lock_step && p.round != cycle) end_cycle(), cycle = p.round;
        const std::size_t s = p.stage, i = where[s];
        const std::uint32_t m = p.micro_batch;
        if (!p.backward) {
            make_resident(i, s);
            if (s == 0)
                emit(i, opcode::load, s, m);
            else if (where[s - 1] != i)
                emit(i, opcode::recv_act, s, m, u32(where[s - 1]));
            if (r.training && s + 1 == S) emit(i, opcode::load_label, s, m);
            emit(i, opcode::fwd, s, m);
            if (s + 1 < S && where[s + 1] != i) send(i, opcode::send_act, s, m, u32(where[s + 1]));
            if (s + 1 == S) emit(i, opcode::outfeed, s, m);
        } else {
            make_resident(i, s);
            if (p.weights) {
                emit(i, opcode::bwd_weights, s, m);
            } else {
                if (s + 1 < S && where[s + 1] != i) emit(i, opcode::recv_grad, s, m, u32(where[s + 1]));
                emit(i, opcode::bwd, s, m);
                if (s > 0 && where[s - 1] != i) send(i, opcode::send_grad, s, m, u32(where[s - 1]));
            }
            // A stage's gradients are complete after its last backward pass (split: its last W).
            if (p.weights == split && ++backward_done[s] == r.micro_batches) {
                if (lock_step)
                    finished.push_back(s);
                else
                    reduce_and_update(s);
            }
        }
    }
    if (lock_step && !order.empty()) end_cycle();
    for (const std::size_t s : finished) reduce_and_update(s);
    // One block of votes (an IPU votes after its last backward pass), then the deferred updates.
    if (overflow_vote) {
        for (std::size_t i = 0; i < ipus; ++i) emit(i, opcode::vote, 0);
        for (const std::size_t s : deferred_updates) {
            make_resident(where[s], s);
            emit(where[s], opcode::update, s);
            if (shard_state) emit(where[s], opcode::all_gather, s);
        }
    }
    for (std::size_t i = 0; i < ipus; ++i)
        if (resident[i] >= 0) emit(i, opcode::stream_out, static_cast<std::size_t>(resident[i]));

    // Stash per stage: forwards done and backwards not yet done (split: weight-gradient passes not yet
    // done), along the stage's IPU list; and, split, the output gradients kept from B to W.
    out.stash.assign(S, 0);
    out.held_gradients.assign(S, 0);
    if (r.training) {
        const opcode frees = split ? opcode::bwd_weights : opcode::bwd;
        for (const auto& program : out.programs) {
            std::vector<std::size_t> live(S, 0), held(S, 0);
            for (const auto& in : program) {
                if (in.op == opcode::fwd) out.stash[in.stage] = std::max(out.stash[in.stage], ++live[in.stage]);
                if (in.op == frees) --live[in.stage];
                if (split && in.op == opcode::bwd)
                    out.held_gradients[in.stage] = std::max(out.held_gradients[in.stage], ++held[in.stage]);
                if (split && in.op == opcode::bwd_weights) --held[in.stage];
            }
        }
    }
    // Channel capacity: the largest occupancy of any channel along the global order.
    // Messages in flight per channel (sender, receiver, activation or gradient), flat.
    std::vector<std::size_t> occupancy(ipus * ipus * 2, 0);
    const auto channel = [ipus](std::size_t from, std::size_t to, bool grad) { return (from * ipus + to) * 2 + grad; };
    // Walk in global order; the owner of each instruction is found by the stage's IPU.
    for (const auto& [ipu, pc] : out.in_global_order()) {
        const instruction* in = &out.programs[ipu][pc];
        const std::size_t owner = where[in->stage];
        switch (in->op) {
            case opcode::send_act:
            case opcode::send_grad:
                out.channel_capacity = std::max(
                    out.channel_capacity, ++occupancy[channel(owner, in->peer, in->op == opcode::send_grad)]);
                break;
            case opcode::recv_act:
            case opcode::recv_grad: --occupancy[channel(in->peer, owner, in->op == opcode::recv_grad)]; break;
            default: break;
        }
    }
    return out;
}

}  // namespace tessera::exec
