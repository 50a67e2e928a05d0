#pragma once
// Host calls as a Trace Event Format timeline: the modelled IPU clocks with their host, flows and
// memory counters, and the emulator's measured threads.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/emulator/host_clock.hpp"
#include "tessera/emulator/modelled_clock.hpp"
#include "tessera/exec/cost.hpp"
#include "tessera/exec/memory_plan.hpp"
#include "tessera/exec/schedule.hpp"
#include "tessera/report/trace_writer.hpp"

namespace tessera::exec {

/// The processes and tracks of a trace. Modelled: the host process (pid 0: the training loop on
/// track 0, each loader worker on track 1 + w) and replica r (pid 1 + r: IPU i on track 1 + i, with
/// a memory counter per IPU). Measured, on the wall clock: the host (pid 1000: each call) and
/// replica r (pid 1001 + r: IPU i's thread on track 1 + i). Replicas are numbered over every host
/// process of a run; process k > 0's hosts are pids 2000 + k and 3000 + k.
struct trace_ids {
    static constexpr int host = 0, measured_host = 1000;
    [[nodiscard]] static constexpr int host_of(std::size_t rank) noexcept { return rank == 0 ? host : 2000 + int(rank); }
    [[nodiscard]] static constexpr int measured_host_of(std::size_t rank) noexcept {
        return rank == 0 ? measured_host : 3000 + int(rank);
    }
    [[nodiscard]] static constexpr int replica(std::size_t r) noexcept { return 1 + int(r); }
    [[nodiscard]] static constexpr int measured_replica(std::size_t r) noexcept { return 1001 + int(r); }
    [[nodiscard]] static constexpr int ipu(std::size_t i) noexcept { return 1 + int(i); }
};

/// Writes host calls of one compiled program into a trace_writer, call by call (nothing is kept
/// between calls but the clocks' origins, the tracks' ends and the next flow id): on the modelled
/// clock each IPU's intervals as slices (category: their activity), a flow from each send to the
/// slice its receive starts, each IPU's on-chip memory as a counter that rises with each stashed
/// micro-batch and falls when it is freed, and the host's waits, feeding and loader work (and
/// counters it is given, such as the loss scale); on the wall clock, each instruction of each IPU
/// thread as the emulator ran it (exec::executor::measure_wall_spans). Every IPU and host track
/// starts at time 0 (the IPUs wait for the host before each call; a thread waits between calls),
/// and a slice ends where the next starts, so viewers need not nest them.
/// @code
///   report::trace_writer out(file);
///   exec::call_tracer trace(out, session.program(), session.costs(), session.plan(), 1, false);
///   auto result = session(feed);
///   trace.modelled(0, result.clocks, result.host);
/// @endcode
class call_tracer {
public:
    /// `replicas`: how many of each call's replicas to trace (the first ones); `measured`: name the
    /// wall-clock processes too; `rank`: the host process's rank in a run of several (its replicas
    /// are the run's from `first_replica`).
    call_tracer(report::trace_writer& out, const schedule& sched, const cost_model& costs, const memory_plan& memory,
                std::size_t replicas, bool measured, std::size_t rank = 0, std::size_t first_replica = 0)
        : m_out(out), m_sched(sched), m_costs(costs), m_replicas(replicas), m_first(first_replica),
          m_host(trace_ids::host_of(rank)), m_measured_host(trace_ids::measured_host_of(rank)),
          m_base(sched.ipus, 0.0), m_next_flow((std::uint64_t(rank) << 40) + 1) {  // flow ids unique over the ranks
        if (memory.ipus.size() != sched.ipus)
            throw std::invalid_argument("tessera::exec::call_tracer: a memory plan of " +
                                        std::to_string(memory.ipus.size()) + " IPUs for a schedule of " +
                                        std::to_string(sched.ipus));
        // Each IPU's memory without the micro-batches the counter adds and removes: the plan counts
        // its stash and held gradients at their most.
        const bool on_chip = stash_on_chip(sched, costs);
        for (std::size_t i = 0; i < sched.ipus; ++i) {
            double dynamic = 0;
            for (std::size_t s = 0; s < sched.stages; ++s) {
                if (sched.request.ipu_of_stage[s] != i || !sched.request.training) continue;
                if (on_chip) dynamic += double(sched.stash[s]) * double(stash_bytes(s));
                if (!sched.held_gradients.empty()) dynamic += double(sched.held_gradients[s]) * double(held_bytes(s));
            }
            m_base[i] = double(memory.ipus[i].on_chip()) - dynamic;
        }
        const std::string of_rank = rank == 0 ? std::string() : " of rank " + std::to_string(rank);
        m_out.process_name(m_host, "host" + of_rank + " (modelled)", m_host);
        m_out.thread_name(m_host, 0, "training loop", 0);
        for (std::size_t r = first_replica; r < first_replica + replicas; ++r) {
            m_out.process_name(trace_ids::replica(r), "replica " + std::to_string(r) + " (modelled)", trace_ids::replica(r));
            for (std::size_t i = 0; i < sched.ipus; ++i)
                m_out.thread_name(trace_ids::replica(r), trace_ids::ipu(i), "IPU " + std::to_string(i), int(i));
        }
        if (measured) {
            m_out.process_name(m_measured_host, "host" + of_rank + " (measured)", m_measured_host);
            m_out.thread_name(m_measured_host, 0, "calls", 0);
            for (std::size_t r = first_replica; r < first_replica + replicas; ++r) {
                m_out.process_name(trace_ids::measured_replica(r), "replica " + std::to_string(r) + " (measured)",
                                   trace_ids::measured_replica(r));
                for (std::size_t i = 0; i < sched.ipus; ++i)
                    m_out.thread_name(trace_ids::measured_replica(r), trace_ids::ipu(i),
                                      "IPU " + std::to_string(i) + " thread", int(i));
            }
        }
    }

    /// Call `call` (from 0) on the modelled clock: `clocks` are its IPUs' (replica-major, recorded),
    /// placed where `timing` puts it on the host's clock; `stands_for`: how many calls of the epoch
    /// it stands for (a dry run traces some of them). The first call traced starts the trace's time.
    void modelled(std::size_t call, std::span<const emulator::modelled_clock> clocks,
                  const emulator::call_timing& timing, double stands_for = 1) {
        const std::size_t I = m_sched.ipus;
        if (clocks.size() < m_replicas * I)
            throw std::invalid_argument("tessera::exec::call_tracer::modelled: " + std::to_string(clocks.size()) +
                                        " clocks for " + std::to_string(m_replicas) + " replicas of " +
                                        std::to_string(I) + " IPUs");
        // The trace's time 0: where the first call traced starts on the host (the end of the call
        // before it), so that the times written keep their digits.
        if (!m_origin) m_origin = timing.device_start - timing.host_wait;
        emulator::call_timing at = timing;
        for (double* t : {&at.prepare_start, &at.ready, &at.device_start, &at.end}) *t -= *m_origin;
        const double t0 = at.device_start, before = t0 - timing.host_wait;  // the previous call's end
        m_last_end = at.end;
        host(call, at, stands_for);
        double makespan = 0;
        for (std::size_t d = 0; d < m_replicas * I; ++d) makespan = std::max(makespan, clocks[d].now());
        for (std::size_t r = 0; r < m_replicas; ++r) {
            const int pid = trace_ids::replica(m_first + r);
            const auto replica = clocks.subspan(r * I, I);
            for (std::size_t i = 0; i < I; ++i) {
                const int tid = trace_ids::ipu(i);
                if (t0 > before)  // the IPUs wait while the host prepares, feeds and dispatches the call
                    m_out.slice(pid, tid, "wait for the host (call " + std::to_string(call) + ")", "host wait", before, t0);
                for (const auto& e : replica[i].trace())
                    m_out.slice(pid, tid, e.label.empty() ? std::string_view(to_string(e.kind)) : std::string_view(e.label),
                                to_string(e.kind), t0 + e.start, t0 + e.end);
                if (replica[i].now() < makespan)  // the IPU waits for the call's last IPU
                    m_out.slice(pid, tid, "wait for the call's end", to_string(emulator::activity::idle),
                                t0 + replica[i].now(), t0 + makespan);
                memory(pid, i, replica[i].spans(), t0, t0 + makespan);
            }
            flows(pid, replica, t0);
        }
    }

    /// Counter `name` of the modelled host process takes `value` at the end of the last call traced
    /// (e.g. the loss scale the next step uses).
    void host_counter(std::string_view name, double value) {
        if (m_origin) m_out.counter(m_host, name, "value", m_last_end, value);
    }

    /// Sets the wall clock's time 0 (seconds on the steady clock, as run_result::wall_start): the
    /// processes of a run set it as they leave a barrier, so their threads line up. Unset, it is
    /// the first call's start.
    void start_wall_clock(double origin) noexcept { m_wall_origin = origin; }

    /// Call `call` on the wall clock: each IPU thread's instruction spans (run_result::wall_spans,
    /// replica-major) from `start` (run_result::wall_start) for `seconds`.
    void measured(std::size_t call, const std::vector<std::vector<emulator::instruction_span>>& spans, double start,
                  double seconds) {
        if (!m_wall_origin) m_wall_origin = start;
        const double origin = *m_wall_origin;
        m_out.slice(m_measured_host, 0, "call " + std::to_string(call), "call", start - origin, start - origin + seconds);
        m_wall_end.resize(m_replicas * m_sched.ipus, 0.0);
        for (std::size_t d = 0; d < spans.size() && d < m_replicas * m_sched.ipus; ++d) {
            const std::size_t r = d / m_sched.ipus, i = d % m_sched.ipus;
            const int pid = trace_ids::measured_replica(m_first + r);
            if (!spans[d].empty() && spans[d].front().start - origin > m_wall_end[d])  // the thread between calls
                m_out.slice(pid, trace_ids::ipu(i), "between calls", "idle", m_wall_end[d], spans[d].front().start - origin);
            if (!spans[d].empty()) m_wall_end[d] = spans[d].back().end - origin;
            for (const auto& s : spans[d]) {
                const instruction& in = m_sched.programs[i].at(s.pc);
                m_out.slice(pid, trace_ids::ipu(i), to_string(in), to_string(in.op), s.start - origin, s.end - origin);
            }
        }
    }

private:
    [[nodiscard]] std::size_t stash_bytes(std::size_t s) const { return m_costs.stashed_bytes(s); }
    [[nodiscard]] std::size_t held_bytes(std::size_t s) const {
        return held_gradient_bytes(m_costs.stages[s], m_costs.bits);
    }

    // The host's side of the call: waiting for its batch, feeding and dispatching it, the IPUs
    // running it; the batch's preparation on the first loader track free at the time (an async
    // loader may have started it before the trace's first call: from time 0, so named).
    void host(std::size_t call, const emulator::call_timing& t, double stands_for) {
        const int pid = m_host;
        const std::string k = std::to_string(call);
        const double before = t.device_start - t.host_wait, taken = before + t.prepare_wait;
        if (t.prepare_wait > 0) m_out.slice(pid, 0, "wait for batch " + k, "host wait", before, taken);
        if (t.device_start > taken) m_out.slice(pid, 0, "feed and dispatch call " + k, "host feed", taken, t.device_start);
        m_out.slice(pid, 0, "call " + k + " on the IPUs", "call", t.device_start, t.end, {{"calls_it_stands_for", stands_for}});
        if (t.ready > std::max(t.prepare_start, 0.0)) {  // (a batch prepared before the trace: not drawn)
            std::size_t w = 0;
            while (w < m_loader_free.size() && m_loader_free[w] > t.prepare_start) ++w;
            if (w == m_loader_free.size()) {
                m_loader_free.push_back(0);
                m_out.thread_name(pid, int(1 + w), "loader " + std::to_string(w), int(1 + w));
            }
            m_loader_free[w] = t.ready;
            const bool earlier = t.prepare_start < 0;
            m_out.slice(pid, int(1 + w), "prepare batch " + k + (earlier ? " (started before the trace)" : ""),
                        "host prepare", std::max(t.prepare_start, 0.0), t.ready);
        }
    }

    // IPU i's on-chip bytes over the call from `t0` to `end`: its plan's fixed items, plus each
    // stashed micro-batch from its forward's start to the end of the pass that frees it (bwd, or
    // split: bwd_weights), and split, each micro-batch's held gradients from bwd's start to
    // bwd_weights' end.
    void memory(int pid, std::size_t i, const std::vector<emulator::instruction_span>& spans, double t0, double end) {
        const std::string name = "memory IPU " + std::to_string(i);
        double bytes = m_base[i];
        m_out.counter(pid, name, "bytes", t0, bytes);
        if (m_sched.request.training) {
            const bool split = m_sched.backward_split(), on_chip = stash_on_chip(m_sched, m_costs);
            const opcode frees = split ? opcode::bwd_weights : opcode::bwd;
            for (const auto& s : spans) {
                const instruction& in = m_sched.programs[i].at(s.pc);
                double up = 0, down = 0;
                if (in.op == opcode::fwd && on_chip) up += double(stash_bytes(in.stage));
                if (in.op == frees && on_chip) down += double(stash_bytes(in.stage));
                if (split && in.op == opcode::bwd) up += double(held_bytes(in.stage));
                if (split && in.op == opcode::bwd_weights) down += double(held_bytes(in.stage));
                if (up > 0) m_out.counter(pid, name, "bytes", t0 + s.start, bytes += up);
                if (down > 0) m_out.counter(pid, name, "bytes", t0 + s.end, bytes -= down);
            }
        }
        m_out.counter(pid, name, "bytes", end, bytes);
    }

    // A flow from each send to its receive: the k-th message on a link (sender, receiver,
    // activation or gradient) is the k-th the receiver takes.
    void flows(int pid, std::span<const emulator::modelled_clock> replica, double t0) {
        const std::size_t I = m_sched.ipus;
        std::vector<std::vector<double>> sent(I * I * 2), taken(I * I * 2);
        const auto link = [I](std::size_t from, std::size_t to, bool gradient) { return (from * I + to) * 2 + gradient; };
        for (std::size_t i = 0; i < I; ++i)
            for (const auto& s : replica[i].spans()) {
                const instruction& in = m_sched.programs[i].at(s.pc);
                const bool gradient = in.op == opcode::send_grad || in.op == opcode::recv_grad;
                if (in.op == opcode::send_act || in.op == opcode::send_grad)
                    sent[link(i, in.peer, gradient)].push_back(t0 + (s.start + s.end) / 2);
                if (in.op == opcode::recv_act || in.op == opcode::recv_grad)
                    taken[link(in.peer, i, gradient)].push_back(t0 + s.end);
            }
        for (std::size_t from = 0; from < I; ++from)
            for (std::size_t to = 0; to < I; ++to)
                for (const bool gradient : {false, true}) {
                    const auto& a = sent[link(from, to, gradient)];
                    const auto& b = taken[link(from, to, gradient)];
                    if (a.size() != b.size())
                        throw std::logic_error("tessera::exec::call_tracer: IPU " + std::to_string(from) + " sent " +
                                               std::to_string(a.size()) + " messages to IPU " + std::to_string(to) +
                                               ", which took " + std::to_string(b.size()));
                    for (std::size_t k = 0; k < a.size(); ++k)
                        m_out.flow(m_next_flow++, gradient ? "gradient" : "activation", pid, trace_ids::ipu(from), a[k],
                                   pid, trace_ids::ipu(to), b[k]);
                }
    }

    report::trace_writer& m_out;
    const schedule& m_sched;
    const cost_model& m_costs;
    std::size_t m_replicas, m_first;
    int m_host, m_measured_host;
    std::vector<double> m_base;           // per IPU: on-chip bytes but the stash and held gradients
    std::vector<double> m_loader_free;    // per loader track: when its last preparation ended
    std::uint64_t m_next_flow;
    std::optional<double> m_origin;       // the modelled clock's time 0 in the trace
    double m_last_end = 0;                // the last call's end, from the origin
    std::optional<double> m_wall_origin;  // the first measured call's start
    std::vector<double> m_wall_end;       // per IPU thread: its last instruction's end, from the origin
};

}  // namespace tessera::exec
