#pragma once
// The modelled IPU clock: advanced by each instruction's cost, with a trace of what filled the time.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/emulator/device_spec.hpp"

namespace tessera::emulator {

/// What a modelled interval is spent on (the timeline colours these). weight_gradient: the W passes
/// of a split backward; sync: a lock-step pipeline's global sync between cycles.
enum class activity { forward, backward, weight_gradient, recompute, update, all_reduce, transfer, sync, host_io, streaming, idle };

[[nodiscard]] constexpr const char* to_string(activity a) noexcept {
    switch (a) {
        case activity::forward: return "forward";
        case activity::backward: return "backward";
        case activity::weight_gradient: return "weight gradient";
        case activity::recompute: return "recompute";
        case activity::update: return "update";
        case activity::all_reduce: return "all-reduce";
        case activity::transfer: return "transfer";
        case activity::sync: return "sync";
        case activity::host_io: return "host I/O";
        case activity::streaming: return "streaming";
        case activity::idle: return "idle";
    }
    return "?";
}

/// One interval of modelled time.
struct trace_event {
    activity kind;
    double start, end;  ///< modelled seconds
    std::string label;  ///< e.g. "fwd s1 mb3"
};

/// When instruction `pc` of an IPU's program ran, in run `iteration` of the program (a call runs it
/// once per device iteration): [start, end] in seconds (modelled, or the wall clock's for the
/// executor's measured spans). A trace's flows and memory counters follow these.
struct instruction_span {
    std::uint32_t pc = 0, iteration = 0;
    double start = 0, end = 0;
};

/// Seconds of modelled device time. Compute costs FLOPs over the rate for its precision,
/// transfers cost bytes over their link's bandwidth, waits for data record idle time.
/// Not thread-safe: one clock belongs to one IPU's worker thread.
class modelled_clock {
public:
    explicit modelled_clock(device_spec spec = {}, bool record = true) : m_spec(spec), m_record(record) {}

    /// Advances by flops / rate(bits).
    double compute(double flops, int bits, activity kind, std::string label = {}) {
        return advance(m_spec.compute_seconds(flops, bits), kind, std::move(label));
    }
    /// Advances by bytes / bandwidth(l).
    double transfer(double bytes, link l, activity kind, std::string label = {}) {
        return advance(m_spec.transfer_seconds(bytes, l), kind, std::move(label));
    }
    /// One host/device synchronisation.
    double host_sync(std::string label = "host sync") {
        return advance(m_spec.host_sync_latency, activity::host_io, std::move(label));
    }
    /// Waits (idle) until `t`, e.g. until a message sent by another IPU has arrived; no-op if past.
    double wait_until(double t, std::string label) {
        if (t > m_now) {
            if (m_record) m_trace.push_back({activity::idle, m_now, t, std::move(label)});
            m_now = t;
        }
        return m_now;
    }
    /// wait_until(t, label) with no label: builds no string when there is nothing to wait for.
    double wait_until(double t) {
        if (t > m_now) return wait_until(t, std::string());
        return m_now;
    }
    /// Advances by `seconds` of `kind`.
    double advance(double seconds, activity kind, std::string label = {}) {
        if (!(seconds >= 0))
            throw std::invalid_argument("tessera::emulator::modelled_clock: negative or NaN duration " +
                                        std::to_string(seconds) + " for '" + label + "'");
        if (m_record && seconds > 0) m_trace.push_back({kind, m_now, m_now + seconds, std::move(label)});
        m_now += seconds;
        return m_now;
    }

    /// Records that instruction `pc` of run `iteration` ran from `start` until now (when recording).
    void record_span(std::uint32_t pc, std::uint32_t iteration, double start) {
        if (m_record) m_spans.push_back({pc, iteration, start, m_now});
    }

    /// advance() for a clock that does not record, with a duration known to be valid (a charge
    /// table's, checked when it was made): one addition.
    void advance_unrecorded(double seconds) noexcept { m_now += seconds; }

    [[nodiscard]] double now() const noexcept { return m_now; }
    /// Whether intervals are recorded (labels need not be built when not).
    [[nodiscard]] bool recording() const noexcept { return m_record; }
    [[nodiscard]] const std::vector<trace_event>& trace() const noexcept { return m_trace; }
    /// The instructions' spans, in the order they ran (recorded with the trace).
    [[nodiscard]] const std::vector<instruction_span>& spans() const noexcept { return m_spans; }
    [[nodiscard]] const device_spec& spec() const noexcept { return m_spec; }
    /// Total modelled seconds spent on `kind`.
    [[nodiscard]] double total(activity kind) const noexcept {
        double t = 0;
        for (const auto& e : m_trace)
            if (e.kind == kind) t += e.end - e.start;
        return t;
    }
    void reset() noexcept {
        m_now = 0;
        m_trace.clear();
        m_spans.clear();
    }

private:
    device_spec m_spec;
    bool m_record;
    double m_now = 0;
    std::vector<trace_event> m_trace;
    std::vector<instruction_span> m_spans;
};

}  // namespace tessera::emulator
