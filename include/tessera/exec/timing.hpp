#pragma once
// The modelled cost of each instruction, and a dry run of a schedule on modelled clocks.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/emulator/device_spec.hpp"
#include "tessera/emulator/modelled_clock.hpp"
#include "tessera/emulator/pass_model.hpp"
#include "tessera/exec/cost.hpp"
#include "tessera/exec/run_result.hpp"
#include "tessera/exec/schedule.hpp"

namespace tessera::exec {

namespace detail {

[[nodiscard]] inline std::string label(const instruction& in) { return to_string(in); }

/// Modelled seconds of a stage's compute: its passes through the IPU model, or its FLOPs at the
/// peak rate when it lists no passes.
[[nodiscard]] inline double compute_seconds(const std::vector<nn::pass>& passes, double flops, const cost_model& costs,
                                            const emulator::device_spec& spec, double available_memory_proportion) {
    return passes.empty() ? spec.compute_seconds(flops, costs.bits)
                          : emulator::seconds_of(passes, spec, costs.bits, costs.partials, available_memory_proportion);
}

/// The passes of `passes` that compute weight gradients (weights true) or the others.
[[nodiscard]] inline std::vector<nn::pass> weight_passes(const std::vector<nn::pass>& passes, bool weights) {
    std::vector<nn::pass> out;
    for (const auto& p : passes)
        if (p.weight_gradient == weights) out.push_back(p);
    return out;
}

/// The modelled seconds of each stage's compute on one device, each worked out the first time an
/// instruction asks for it: a schedule runs every stage's passes once per micro-batch, and the pass
/// model plans each contraction over the tiles, the same plan every time.
class stage_seconds {
public:
    stage_seconds(const cost_model& costs, const emulator::device_spec& spec)
        : m_costs(costs), m_spec(spec), m_stages(costs.stages.size()) {}
    /// The stage's forward pass.
    [[nodiscard]] double forward(std::size_t stage) {
        const auto& c = m_costs.stages[stage];
        return memo(m_stages[stage].forward,
                    [&] { return compute_seconds(c.forward_passes, c.forward_flops, m_costs, m_spec, amp(stage)); });
    }
    /// The stage's backward pass: all of it, or (`inputs_only`) but its weight gradients.
    [[nodiscard]] double backward(std::size_t stage, bool inputs_only) {
        const auto& c = m_costs.stages[stage];
        if (!inputs_only)
            return memo(m_stages[stage].backward,
                        [&] { return compute_seconds(c.backward_passes, c.backward_flops, m_costs, m_spec, amp(stage)); });
        return memo(m_stages[stage].backward_inputs, [&] {
            return compute_seconds(weight_passes(c.backward_passes, false), c.backward_flops, m_costs, m_spec, amp(stage));
        });
    }
    /// The stage's weight gradients (its backward passes that compute them).
    [[nodiscard]] double weight_gradients(std::size_t stage) {
        const auto& c = m_costs.stages[stage];
        return memo(m_stages[stage].weights,
                    [&] { return seconds_of(weight_passes(c.backward_passes, true), amp(stage)); });
    }
    /// What the IPU runs on each input it receives.
    [[nodiscard]] double infeed() {
        return memo(m_infeed, [&] { return seconds_of(m_costs.infeed_passes, amp(0)); });
    }

private:
    static constexpr double unknown = -1;  // seconds are never negative
    struct per_stage {
        double forward = unknown, backward = unknown, backward_inputs = unknown, weights = unknown;
    };
    template <class F>
    static double memo(double& slot, F&& f) {
        if (slot == unknown) slot = f();
        return slot;
    }
    [[nodiscard]] double seconds_of(const std::vector<nn::pass>& passes, double available_memory_proportion) const {
        return emulator::seconds_of(passes, m_spec, m_costs.bits, m_costs.partials, available_memory_proportion);
    }
    [[nodiscard]] double amp(std::size_t stage) const { return m_costs.available_memory_proportion_of(stage); }
    const cost_model& m_costs;
    const emulator::device_spec& m_spec;
    std::vector<per_stage> m_stages;
    double m_infeed = unknown;
};

/// Bytes IPU `ipu` sends to exchange a tied table's gradients at the vote: a table tied between
/// stage 0 and the last (a transformer's embedding and head) on two IPUs has each send its copy's
/// gradients (the float sums the vote adds) to the other over an IPU-Link, both at once; 0 when the
/// copies share an IPU (Graphcore's BERT and GPT-2 place the head beside the embedding), for the
/// other IPUs, and when nothing is tied.
[[nodiscard]] inline double tied_exchange_bytes(const schedule& sched, const cost_model& costs, std::size_t ipu) noexcept {
    if (!sched.request.training || !sched.request.tied_table || sched.stages < 2 ||
        sched.request.ipu_of_stage.size() != sched.stages)
        return 0;
    const std::size_t first = sched.request.ipu_of_stage.front(), last = sched.request.ipu_of_stage.back();
    if (first == last || (ipu != first && ipu != last)) return 0;
    const std::size_t elements = std::max(costs.stages.front().tied_parameters, costs.stages.back().tied_parameters);
    return double(elements) * double(sizeof(float));
}

/// Advances `clock` by the cost of `in` (receives: only the wait, done by the caller with the
/// message's arrival time; all_reduce: the transfer after the caller synchronised the replicas;
/// outfeed: nothing — the output mode decides what is sent, see charge_outfeed; a vote: the tied
/// table's exchange, tied_exchange_bytes); the stages' compute
/// comes from `seconds`, on the spec of `clock`.
inline void charge(emulator::modelled_clock& clock, const instruction& in, const schedule& sched,
                   const cost_model& costs, stage_seconds& seconds, std::size_t ipu) {
    using emulator::activity;
    using emulator::link;
    const auto& c = costs.stages[in.stage];
    const auto& spec = clock.spec();
    const bool training = sched.request.training;
    const bool named = clock.recording();  // labels cost an allocation: only when they are kept
    std::string name = named ? label(in) : std::string();
    const auto also = [&](const char* what) { return named ? std::string(what) + " " + label(in) : std::string(); };
    // Phased schedules move weights, accumulators and optimiser state with stream_in/stream_out.
    const auto& where = costs.locations;
    const bool weights_off = !sched.weights_streamed && where.weights == location::streaming_memory;
    const bool accumulators_off = !sched.weights_streamed && where.gradient_accumulators == location::streaming_memory;
    const bool optimiser_off = !sched.weights_streamed && where.optimiser_state == location::streaming_memory;
    const bool stash_off = sched.activations_off_chip || where.activations == location::streaming_memory;
    // A collective over the replicas: `passes` × (R - 1) / R of `bytes` around the ring of IPU-Links;
    // with processes reducing through their hosts, to the host (the whole, or its 1/P shard), a ring
    // of `passes` × (P - 1) / P over the network, and back (the whole, or its shard).
    const auto collective = [&](double bytes, double passes, bool shard_to_host, bool shard_from_host) {
        const double r = double(sched.request.replicas);
        clock.transfer(passes * (r - 1.0) / r * bytes, link::ipu_link, activity::all_reduce, std::move(name));
        if (costs.processes > 1 && costs.host_network_bandwidth > 0) {
            const double p = double(costs.processes);
            clock.transfer(shard_to_host ? bytes / p : bytes, link::host_link, activity::all_reduce, also("to host"));
            clock.advance(passes * (p - 1.0) / p * bytes / costs.host_network_bandwidth, activity::all_reduce,
                          also("across hosts"));
            clock.transfer(shard_from_host ? bytes / p : bytes, link::host_link, activity::all_reduce, also("from host"));
        }
    };
    // Sharded optimiser state: a replica keeps, moves and steps 1/R of it.
    const double state_share = sched.optimizer_sharded() ? 1.0 / double(sched.request.replicas) : 1.0;
    switch (in.op) {
        case opcode::load:  // with I/O tiles the transfer overlaps compute (overlapped_io)
            if (costs.io_tiles == 0)
                clock.transfer(double(costs.host_input_bytes()), link::host_link, activity::host_io, std::move(name));
            if (!costs.infeed_passes.empty())  // 8-bit I/O: the IPU normalises what it received
                clock.advance(seconds.infeed(), activity::forward, also("normalise"));
            break;
        case opcode::load_label:
            if (costs.io_tiles == 0)
                clock.transfer(double(costs.label_bytes), link::host_link, activity::host_io, std::move(name));
            break;
        case opcode::recv_act:
        case opcode::recv_grad:
        case opcode::outfeed:
        case opcode::sync: break;  // only waits (for the sender, or every IPU of the replica); outfeed: see above
        case opcode::vote:  // its wait is the vote block's (simulate, the executor); then, after it:
            if (const double bytes = tied_exchange_bytes(sched, costs, ipu); bytes > 0)
                clock.transfer(bytes, link::ipu_link, activity::transfer, named ? "tied table gradients" : std::string());
            break;
        case opcode::fwd:
            if (weights_off) clock.transfer(double(c.weight_bytes), link::streaming_memory, activity::streaming,
                                            named ? "weights in s" + std::to_string(in.stage) : std::string());
            clock.advance(seconds.forward(in.stage), activity::forward, std::move(name));
            if (stash_off && training)
                clock.transfer(double(costs.stashed_bytes(in.stage)), link::streaming_memory, activity::streaming,
                               (named ? "stash out s" + std::to_string(in.stage) : std::string()));
            break;
        case opcode::send_act: clock.transfer(double(c.output_bytes), link::ipu_link, activity::transfer, std::move(name)); break;
        case opcode::bwd:
            if (weights_off) clock.transfer(double(c.weight_bytes), link::streaming_memory, activity::streaming,
                                            named ? "weights in s" + std::to_string(in.stage) : std::string());
            if (accumulators_off)  // read and write back the stage's gradient accumulators
                clock.transfer(2.0 * double(c.accumulator_bytes()), link::streaming_memory, activity::streaming,
                               named ? "accumulators s" + std::to_string(in.stage) : std::string());
            if (stash_off)
                clock.transfer(double(costs.stashed_bytes(in.stage)), link::streaming_memory, activity::streaming,
                               (named ? "stash in s" + std::to_string(in.stage) : std::string()));
            if (c.recompute)
                clock.advance(seconds.forward(in.stage), activity::recompute, also("recompute"));
            // split: the input gradient alone, the passes but the weight gradients'
            clock.advance(seconds.backward(in.stage, sched.backward_split()), activity::backward, std::move(name));
            break;
        case opcode::bwd_weights:
            // The weight gradients (a stage that lists no passes charged its whole backward at bwd).
            if (std::any_of(c.backward_passes.begin(), c.backward_passes.end(),
                            [](const nn::pass& p) { return p.weight_gradient; }))
                clock.advance(seconds.weight_gradients(in.stage), activity::weight_gradient, std::move(name));
            break;
        case opcode::send_grad: clock.transfer(double(c.input_bytes), link::ipu_link, activity::transfer, std::move(name)); break;
        case opcode::stream_in:
        case opcode::stream_out:
            clock.transfer(double(c.weight_bytes) +
                               (training ? double(c.accumulator_bytes()) + double(c.optimiser_bytes) * state_share : 0.0),
                           link::streaming_memory, activity::streaming, std::move(name));
            break;
        case opcode::all_reduce:
            // A ring all-reduce: each replica sends and receives 2 (R - 1) / R of the gradients, one
            // direction of its IPU-Links, while its neighbour does the same.
            collective(double(c.accumulator_bytes()), 2.0, false, false);
            break;
        case opcode::reduce_scatter:
            // A ring reduce-scatter: each replica sends and receives (R - 1) / R of the gradients and
            // ends with the sum of its shard; across hosts, each host's shard of the sums comes back.
            collective(double(c.accumulator_bytes()), 1.0, false, true);
            break;
        case opcode::all_gather:
            // A ring all-gather of the updated weights, in their storage type: (R - 1) / R of them in;
            // across hosts, each host sends its shard and receives them all.
            collective(double(c.weight_bytes), 1.0, true, false);
            break;
        case opcode::update: {
            // Sharded optimiser state: a replica steps 1/R of the weights with 1/R of the state, and
            // zeroes the rest of its gradients.
            const double share = state_share;
            if (optimiser_off)  // read and write back the optimiser state
                clock.transfer(2.0 * double(c.optimiser_bytes) * share, link::streaming_memory, activity::streaming,
                               named ? "optimiser state s" + std::to_string(in.stage) : std::string());
            if (c.update_bytes > 0) {  // memory-bound: the bytes the step moves, as a 32-bit vector pass
                const double bytes = double(c.update_bytes) * share + double(c.accumulator_bytes()) * (1.0 - share);
                clock.advance(emulator::seconds_of(std::vector<nn::pass>{nn::pass::elementwise(
                                                                                 nn::pass_phase::backward, bytes / 4.0, 1)
                                                                                 .kept_in_place()},
                                                   spec, 32),
                              activity::update, std::move(name));
            } else {
                clock.compute(c.update_flops * share, 32, activity::update, std::move(name));
            }
            break;
        }
    }
}

/// A lock-step pipeline cycle's end on `clock`: it waits until `latest` (the slowest IPU's end of
/// the cycle), then synchronises with all the program's IPUs (device_spec::global_sync_seconds).
inline void end_cycle(emulator::modelled_clock& clock, double latest, const schedule& sched) {
    const bool named = clock.recording();
    clock.wait_until(latest, named ? "wait sync" : std::string());
    clock.advance(clock.spec().global_sync_seconds(sched.ipus * sched.request.replicas), emulator::activity::sync,
                  named ? "sync" : std::string());
}

/// Host transfers on I/O tiles (cost_model::io_tiles), per IPU and call: each input streams in as
/// soon as the one before it is in and taken (one buffer), so it arrives while the IPU computes on
/// the one before; the IPU waits only for what has not arrived. Outputs stream out behind the IPU's
/// back, one after another; the call ends when the last is out.
class overlapped_io {
public:
    /// The call starts (after its host synchronisation) at `now`.
    void start(double now) noexcept { m_in = m_taken = m_out = now; }
    /// An input of `seconds` on the host link: waits on `clock` until it is in, and takes it.
    void receive(emulator::modelled_clock& clock, double seconds, const instruction& in) {
        m_in = std::max(m_in, m_taken) + seconds;
        if (clock.recording())
            clock.wait_until(m_in, "wait " + label(in));
        else
            clock.wait_until(m_in);
        m_taken = clock.now();
    }
    /// An output of `seconds` handed to the I/O tiles at clock.now(); returns when it is out.
    double send(const emulator::modelled_clock& clock, double seconds) noexcept {
        return m_out = std::max(m_out, clock.now()) + seconds;
    }
    /// The end of the call: waits until the last output is out.
    void drain(emulator::modelled_clock& clock) const {
        if (clock.recording())
            clock.wait_until(m_out, "wait outfeed");
        else
            clock.wait_until(m_out);
    }

private:
    double m_in = 0, m_taken = 0, m_out = 0;
};

/// Seconds the host link takes to bring instruction `in`'s input (load, load_label).
[[nodiscard]] inline double host_input_seconds(const instruction& in, const cost_model& costs,
                                               const emulator::device_spec& spec) noexcept {
    const double bytes = double(in.op == opcode::load ? costs.host_input_bytes() : costs.label_bytes);
    return spec.transfer_seconds(bytes, emulator::link::host_link);
}

/// Charges an outfeed the output mode sends: a micro-batch's loss and score (training) or output;
/// on I/O tiles (`io` given), handed to them without stopping the IPU. Returns when it reaches the host.
inline double charge_outfeed(emulator::modelled_clock& clock, const instruction& in, const schedule& sched,
                             const cost_model& costs, overlapped_io* io = nullptr) {
    const double bytes = double(sched.request.training ? costs.output_bytes_to_host : costs.stages[in.stage].output_bytes);
    if (io) return io->send(clock, clock.spec().transfer_seconds(bytes, emulator::link::host_link));
    return clock.transfer(bytes, emulator::link::host_link, emulator::activity::host_io,
                          clock.recording() ? label(in) : std::string());
}

/// Every instruction's modelled cost, worked out once per schedule: the intervals detail::charge
/// would add, in order. A static schedule has static costs, so the executor's hot loop only adds
/// numbers (and copies a label when the clock records).
class charge_table {
public:
    charge_table() = default;
    charge_table(const schedule& sched, const cost_model& costs, const emulator::device_spec& spec) {
        const emulator::device_spec compute = spec.compute_tiles(costs.io_tiles);  // the passes run on these
        stage_seconds seconds(costs, compute);
        m_first.resize(sched.programs.size());
        for (std::size_t i = 0; i < sched.programs.size(); ++i) {
            m_first[i].reserve(sched.programs[i].size() + 1);
            for (const auto& in : sched.programs[i]) {
                m_first[i].push_back(static_cast<std::uint32_t>(m_pieces.size()));
                emulator::modelled_clock probe(compute, /*record=*/true);
                charge(probe, in, sched, costs, seconds, i);
                m_pieces.insert(m_pieces.end(), probe.trace().begin(), probe.trace().end());
            }
            m_first[i].push_back(static_cast<std::uint32_t>(m_pieces.size()));
        }
        for (const auto& e : m_pieces) m_seconds.push_back(e.end - e.start);
    }
    /// Advances `clock` by instruction `pc` of IPU `ipu`'s program, as charge() would.
    [[gnu::always_inline]] void apply(emulator::modelled_clock& clock, std::size_t ipu, std::size_t pc) const {
        const auto& first = m_first[ipu];
        const std::uint32_t begin = first[pc], end = first[pc + 1];
        if (!clock.recording()) {  // the executor's hot path: the same additions, no labels
            for (std::uint32_t k = begin; k < end; ++k) clock.advance_unrecorded(m_seconds[k]);
            return;
        }
        for (std::uint32_t k = begin; k < end; ++k) {
            const auto& e = m_pieces[k];
            clock.advance(e.end - e.start, e.kind, e.label);
        }
    }

private:
    std::vector<std::vector<std::uint32_t>> m_first;  // per IPU: first piece of each instruction, then the end
    std::vector<emulator::trace_event> m_pieces;
    std::vector<double> m_seconds;  // each piece's duration
};

}  // namespace detail

/// The modelled clocks of one replica's IPUs for one call of `iterations` runs of the schedule
/// (training: D weight updates), without threads: a host synchronisation, the instructions replayed
/// in the global order (a receive waits for its send's arrival), the outputs `outputs` sends, a host
/// synchronisation. The threaded executor produces the same clocks. `first_output`, when given, gets
/// when the call's first output reaches the host (0: none is sent).
[[nodiscard]] inline std::vector<emulator::modelled_clock> simulate(const schedule& sched, const cost_model& costs,
                                                                    const emulator::device_spec& spec = {},
                                                                    std::size_t iterations = 1,
                                                                    output_selection outputs = {}, bool record = true,
                                                                    double* first_output = nullptr) {
    costs.check(sched.stages);
    const detail::charge_table charges(sched, costs, spec);
    std::vector<emulator::modelled_clock> clocks(sched.ipus, emulator::modelled_clock(spec, record));
    for (auto& c : clocks) c.host_sync();
    std::vector<detail::overlapped_io> io(sched.ipus);
    const bool overlapped = costs.io_tiles > 0;
    for (std::size_t i = 0; i < sched.ipus; ++i) io[i].start(clocks[i].now());
    const auto all = sched.in_global_order();  // (IPU, position in its program)
    const auto at = [&](const std::pair<std::size_t, std::size_t>& e) -> const instruction& {
        return sched.programs[e.first][e.second];
    };
    const std::size_t M = sched.request.micro_batches, count = iterations * M;
    // Arrival times of the values in flight on each link, (sender, receiver, gradient?), in FIFO order.
    struct fifo {
        std::vector<double> arrivals;
        std::size_t head = 0;
    };
    std::vector<fifo> in_flight(sched.ipus * sched.ipus * 2);
    const auto link_of = [&](std::size_t from, std::size_t to, bool gradient) -> fifo& {
        return in_flight[(from * sched.ipus + to) * 2 + (gradient ? 1 : 0)];
    };
    for (std::size_t it = 0; it < iterations; ++it) {
        for (std::size_t k = 0; k < all.size(); ++k) {
            const auto [ipu, pc] = all[k];
            const instruction& in = at(all[k]);
            auto& clock = clocks[ipu];
            const double began = clock.now();
            if (in.op == opcode::vote || in.op == opcode::sync) {
                // A block of the global order where every IPU meets: the votes of a step (all wait for
                // the latest), or the end of a lock-step pipeline cycle (all wait for the slowest,
                // then synchronise).
                const opcode block = in.op;
                std::size_t end = k;
                double latest = 0;
                for (; end < all.size() && at(all[end]).op == block; ++end)
                    latest = std::max(latest, clocks[all[end].first].now());
                for (; k < end; ++k) {
                    auto& meeting = clocks[all[k].first];
                    const double met = meeting.now();
                    if (block == opcode::vote) {  // the wait, then the vote's own charge, as the executor
                        meeting.wait_until(latest, record ? "wait vote" : std::string());
                        charges.apply(meeting, all[k].first, all[k].second);
                    } else {
                        detail::end_cycle(meeting, latest, sched);
                    }
                    meeting.record_span(static_cast<std::uint32_t>(all[k].second), static_cast<std::uint32_t>(it), met);
                }
                --k;
                continue;
            }
            switch (in.op) {
                case opcode::recv_act:
                case opcode::recv_grad: {
                    auto& q = link_of(in.peer, ipu, in.op == opcode::recv_grad);
                    if (q.head == q.arrivals.size())
                        throw std::logic_error("tessera::exec::simulate: receive before its send: " + to_string(in));
                    clock.wait_until(q.arrivals[q.head++], record ? "wait " + to_string(in) : std::string());
                    break;
                }
                case opcode::outfeed:
                    if (outputs.sends(it * M + in.micro_batch, count)) {
                        const double out = detail::charge_outfeed(clock, in, sched, costs, overlapped ? &io[ipu] : nullptr);
                        if (first_output && (*first_output == 0 || out < *first_output)) *first_output = out;
                    }
                    break;
                case opcode::load:
                case opcode::load_label:
                    if (overlapped) io[ipu].receive(clock, detail::host_input_seconds(in, costs, spec), in);
                    charges.apply(clock, ipu, pc);
                    break;
                default: charges.apply(clock, ipu, pc); break;
            }
            if (in.op == opcode::send_act || in.op == opcode::send_grad)
                link_of(ipu, in.peer, in.op == opcode::send_grad).arrivals.push_back(clock.now());
            clock.record_span(static_cast<std::uint32_t>(pc), static_cast<std::uint32_t>(it), began);
        }
    }
    for (std::size_t i = 0; i < sched.ipus; ++i) {
        if (overlapped) io[i].drain(clocks[i]);
        clocks[i].host_sync();
    }
    return clocks;
}

/// Makespan and busy fractions of a set of modelled clocks.
struct utilisation_summary {
    double makespan = 0;                 ///< the latest clock
    std::vector<double> busy;            ///< per IPU: seconds not idle
    double mean_utilisation = 0;         ///< mean over IPUs of busy / makespan
};

[[nodiscard]] inline utilisation_summary utilisation(const std::vector<emulator::modelled_clock>& clocks) {
    utilisation_summary u;
    for (const auto& c : clocks) u.makespan = std::max(u.makespan, c.now());
    for (const auto& c : clocks) {
        double busy = 0;
        for (const auto& e : c.trace())
            if (e.kind != emulator::activity::idle) busy += e.end - e.start;
        u.busy.push_back(busy);
        if (u.makespan > 0) u.mean_utilisation += busy / u.makespan;
    }
    if (!clocks.empty()) u.mean_utilisation /= double(clocks.size());
    return u;
}

}  // namespace tessera::exec
