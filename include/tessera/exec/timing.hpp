#pragma once
// The modelled cost of each instruction, and a dry run of a schedule on modelled clocks.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "tessera/emulator/device_spec.hpp"
#include "tessera/emulator/modelled_clock.hpp"
#include "tessera/exec/cost.hpp"
#include "tessera/exec/schedule.hpp"

namespace tessera::exec {

namespace detail {

[[nodiscard]] inline std::string label(const instruction& in) { return to_string(in); }

/// Advances `clock` by the cost of `in` (receives: only the wait, done by the caller with the
/// message's arrival time; all_reduce: the transfer after the caller synchronised the replicas).
inline void charge(emulator::modelled_clock& clock, const instruction& in, const schedule& sched,
                   const cost_model& costs) {
    using emulator::activity;
    using emulator::link;
    const auto& c = costs.stages[in.stage];
    const bool training = sched.request.training;
    const bool named = clock.recording();  // labels cost an allocation: only when they are kept
    std::string name = named ? label(in) : std::string();
    // Phased schedules move weights, accumulators and optimiser state with stream_in/stream_out.
    const auto& where = costs.locations;
    const bool weights_off = !sched.weights_streamed && where.weights == location::streaming_memory;
    const bool accumulators_off = !sched.weights_streamed && where.gradient_accumulators == location::streaming_memory;
    const bool optimiser_off = !sched.weights_streamed && where.optimiser_state == location::streaming_memory;
    const bool stash_off = sched.activations_off_chip || where.activations == location::streaming_memory;
    switch (in.op) {
        case opcode::load: clock.transfer(double(c.input_bytes), link::host_link, activity::host_io, std::move(name)); break;
        case opcode::load_label:
            clock.transfer(double(costs.label_bytes), link::host_link, activity::host_io, std::move(name));
            break;
        case opcode::recv_act:
        case opcode::recv_grad:
        case opcode::vote: break;  // only waits: for the sender, or for every IPU of the replica
        case opcode::fwd:
            if (weights_off) clock.transfer(double(c.weight_bytes), link::streaming_memory, activity::streaming,
                                            named ? "weights in s" + std::to_string(in.stage) : std::string());
            clock.compute(c.forward_flops, costs.bits, activity::forward, std::move(name));
            if (stash_off && training)
                clock.transfer(double(costs.stashed_bytes(in.stage)), link::streaming_memory, activity::streaming,
                               (named ? "stash out s" + std::to_string(in.stage) : std::string()));
            break;
        case opcode::send_act: clock.transfer(double(c.output_bytes), link::ipu_link, activity::transfer, std::move(name)); break;
        case opcode::outfeed:
            clock.transfer(double(training ? costs.output_bytes_to_host : c.output_bytes), link::host_link,
                           activity::host_io, std::move(name));
            break;
        case opcode::bwd:
            if (weights_off) clock.transfer(double(c.weight_bytes), link::streaming_memory, activity::streaming,
                                            named ? "weights in s" + std::to_string(in.stage) : std::string());
            if (accumulators_off)  // read and write back the stage's gradient accumulators
                clock.transfer(2.0 * double(c.weight_bytes), link::streaming_memory, activity::streaming,
                               named ? "accumulators s" + std::to_string(in.stage) : std::string());
            if (stash_off)
                clock.transfer(double(costs.stashed_bytes(in.stage)), link::streaming_memory, activity::streaming,
                               (named ? "stash in s" + std::to_string(in.stage) : std::string()));
            if (c.recompute) clock.compute(c.forward_flops, costs.bits, activity::recompute, named ? "recompute " + name : std::string());
            clock.compute(c.backward_flops, costs.bits, activity::backward, std::move(name));
            break;
        case opcode::send_grad: clock.transfer(double(c.input_bytes), link::ipu_link, activity::transfer, std::move(name)); break;
        case opcode::stream_in:
        case opcode::stream_out:
            clock.transfer(double(c.weight_bytes + (training ? c.weight_bytes + c.optimiser_bytes : 0)),
                           link::streaming_memory, activity::streaming, std::move(name));
            break;
        case opcode::all_reduce: {
            const double r = double(sched.request.replicas);
            // A ring all-reduce moves 2 (R - 1) / R of the gradients over the IPU-Links.
            clock.transfer(2.0 * (r - 1.0) / r * double(c.weight_bytes), link::ipu_link, activity::all_reduce, std::move(name));
            break;
        }
        case opcode::update:
            if (optimiser_off)  // read and write back the optimiser state
                clock.transfer(2.0 * double(c.optimiser_bytes), link::streaming_memory, activity::streaming,
                               named ? "optimiser state s" + std::to_string(in.stage) : std::string());
            clock.compute(c.update_flops, 32, activity::update, std::move(name));
            break;
    }
}

/// Every instruction's modelled cost, worked out once per schedule: the intervals detail::charge
/// would add, in order. A static schedule has static costs, so the executor's hot loop only adds
/// numbers (and copies a label when the clock records).
class charge_table {
public:
    charge_table() = default;
    charge_table(const schedule& sched, const cost_model& costs, const emulator::device_spec& spec) {
        m_first.resize(sched.programs.size());
        for (std::size_t i = 0; i < sched.programs.size(); ++i) {
            m_first[i].reserve(sched.programs[i].size() + 1);
            for (const auto& in : sched.programs[i]) {
                m_first[i].push_back(static_cast<std::uint32_t>(m_pieces.size()));
                emulator::modelled_clock probe(spec, /*record=*/true);
                charge(probe, in, sched, costs);
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

/// The modelled clocks of one replica's IPUs after `iterations` runs of the schedule, without
/// threads: instructions are replayed in the global order, a receive waits for its send's
/// arrival. The threaded executor produces the same clocks.
[[nodiscard]] inline std::vector<emulator::modelled_clock> simulate(const schedule& sched, const cost_model& costs,
                                                                    const emulator::device_spec& spec = {},
                                                                    std::size_t iterations = 1) {
    costs.check(sched.stages);
    std::vector<emulator::modelled_clock> clocks(sched.ipus, emulator::modelled_clock(spec));
    std::vector<std::pair<std::size_t, const instruction*>> all;
    for (std::size_t i = 0; i < sched.ipus; ++i)
        for (const auto& in : sched.programs[i]) all.emplace_back(i, &in);
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.second->seq < b.second->seq; });
    std::map<std::tuple<std::size_t, std::size_t, bool>, std::deque<double>> in_flight;
    for (std::size_t it = 0; it < iterations; ++it) {
        for (std::size_t k = 0; k < all.size(); ++k) {
            const auto& [ipu, in] = all[k];
            auto& clock = clocks[ipu];
            if (in->op == opcode::vote) {
                // The votes of a step form one block of the global order: all IPUs wait for the latest.
                std::size_t end = k;
                double latest = 0;
                for (; end < all.size() && all[end].second->op == opcode::vote; ++end)
                    latest = std::max(latest, clocks[all[end].first].now());
                for (; k < end; ++k) clocks[all[k].first].wait_until(latest, "wait vote");
                --k;
                continue;
            }
            switch (in->op) {
                case opcode::recv_act:
                case opcode::recv_grad: {
                    auto& q = in_flight[{in->peer, ipu, in->op == opcode::recv_grad}];
                    if (q.empty()) throw std::logic_error("tessera::exec::simulate: receive before its send: " + to_string(*in));
                    clock.wait_until(q.front(), "wait " + to_string(*in));
                    q.pop_front();
                    break;
                }
                default: detail::charge(clock, *in, sched, costs); break;
            }
            if (in->op == opcode::send_act || in->op == opcode::send_grad)
                in_flight[{ipu, in->peer, in->op == opcode::send_grad}].push_back(clock.now());
        }
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
