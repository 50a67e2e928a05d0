#pragma once
// A streaming writer of the Trace Event Format: the JSON that Perfetto, chrome://tracing and speedscope open.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <ostream>
#include <string_view>
#include <utility>

#include "tessera/report/json.hpp"

namespace tessera::report {

/// Writes {"traceEvents":[...],"displayTimeUnit":"ms","otherData":{...}} event by event, holding
/// nothing: processes and threads (tracks) by number and name, slices, flow arrows between slices,
/// counters. Times are given in seconds and written in microseconds, as the format has them.
/// close() ends the file (the destructor does it when an exception left it open).
/// @code
///   std::ofstream file("run.json");
///   report::trace_writer trace(file);
///   trace.process_name(1, "replica 0");
///   trace.thread_name(1, 1, "IPU 0");
///   trace.slice(1, 1, "fwd s0 mb0", "forward", 0.0, 1e-3);  // from 0 to 1 ms
///   trace.close();
/// @endcode
class trace_writer {
public:
    /// A named number attached to a slice (its "args").
    using arg = std::pair<std::string_view, double>;

    explicit trace_writer(std::ostream& out) : m_json(out) {
        m_json.begin_object().key("traceEvents").begin_array();
    }
    trace_writer(const trace_writer&) = delete;
    trace_writer& operator=(const trace_writer&) = delete;
    ~trace_writer() {
        if (!m_closed) try {
                close();
            } catch (...) {  // a stream that failed: nothing more can be written
            }
    }

    /// Names process `pid`; `order`: its place among the processes (lower first).
    void process_name(int pid, std::string_view name, int order) {
        metadata(pid, 0, "process_name", name);
        metadata_number(pid, 0, "process_sort_index", order);
    }
    /// Names thread (track) `tid` of process `pid`; `order`: its place in the process.
    void thread_name(int pid, int tid, std::string_view name, int order) {
        metadata(pid, tid, "thread_name", name);
        metadata_number(pid, tid, "thread_sort_index", order);
    }
    /// A complete slice ("X") from `start` to `stop` on track (pid, tid). Its duration is the
    /// difference of the two times as written, so a slice that ends where the next starts abuts it
    /// exactly in the file (viewers nest slices that overlap by a rounding error).
    void slice(int pid, int tid, std::string_view name, std::string_view category, double start, double stop,
               std::initializer_list<arg> args = {}) {
        begin(pid, tid, "X", name, category, start).member("dur", microseconds(stop) - microseconds(start));
        if (args.size() > 0) {
            m_json.key("args").begin_object();
            for (const auto& [k, v] : args) m_json.member(k, v);
            m_json.end_object();
        }
        end();
    }
    /// A flow arrow `id` from the slice enclosing time `from` on (from_pid, from_tid) to the first
    /// slice that starts at `to` or after it on (to_pid, to_tid).
    void flow(std::uint64_t id, std::string_view name, int from_pid, int from_tid, double from, int to_pid, int to_tid,
              double to) {
        begin(from_pid, from_tid, "s", name, "flow", from).member("id", id);
        end();
        begin(to_pid, to_tid, "f", name, "flow", to).member("id", id);
        end();
    }
    /// Counter `name` of process `pid` takes `value` (series `series`) at time `t`.
    void counter(int pid, std::string_view name, std::string_view series, double t, double value) {
        begin(pid, 0, "C", name, "counter", t).key("args").begin_object().member(series, value).end_object();
        end();
    }
    /// Ends the events; `other` writes members of the trace's "otherData" object (what the trace is of).
    void close(const std::function<void(json_writer&)>& other = {}) {
        if (m_closed) return;
        m_closed = true;
        m_json.end_array().member("displayTimeUnit", "ms").key("otherData").begin_object();
        if (other) other(m_json);
        m_json.end_object().end_object();
    }
    /// Adds `events`, `count` comma-separated events another writer wrote (events_of its text: a
    /// process's that a lead process gathers), as they are.
    void raw_events(std::string_view events, std::size_t count) {
        if (events.empty()) return;
        m_json.raw(events);
        m_events += count;
    }
    /// The events in text a writer wrote so far, or since the text was last taken: without the
    /// document's opening or the comma before them.
    [[nodiscard]] static std::string_view events_of(std::string_view written) noexcept {
        constexpr std::string_view opening = "{\"traceEvents\":[";
        if (written.substr(0, opening.size()) == opening) written.remove_prefix(opening.size());
        if (!written.empty() && written.front() == ',') written.remove_prefix(1);
        return written;
    }

    /// Events written so far.
    [[nodiscard]] std::size_t events() const noexcept { return m_events; }

private:
    json_writer& begin(int pid, int tid, std::string_view phase, std::string_view name, std::string_view category,
                       double t) {
        ++m_events;
        return m_json.begin_object()
            .member("ph", phase)
            .member("pid", pid)
            .member("tid", tid)
            .member("name", name)
            .member("cat", category)
            .member("ts", microseconds(t));
    }
    // Seconds as the microseconds written, rounded to a double: a fused multiply-add would skip that
    // rounding in a duration, and the slice would overlap the next by it.
    [[nodiscard]] static double microseconds(double seconds) noexcept {
        volatile double us = seconds * 1e6;
        return us;
    }
    void end() { m_json.end_object(); }
    void metadata(int pid, int tid, std::string_view what, std::string_view name) {
        ++m_events;
        m_json.begin_object().member("ph", "M").member("pid", pid).member("tid", tid).member("name", what);
        m_json.key("args").begin_object().member("name", name).end_object();
        end();
    }
    void metadata_number(int pid, int tid, std::string_view what, int value) {
        ++m_events;
        m_json.begin_object().member("ph", "M").member("pid", pid).member("tid", tid).member("name", what);
        m_json.key("args").begin_object().member("sort_index", value).end_object();
        end();
    }

    json_writer m_json;
    bool m_closed = false;
    std::size_t m_events = 0;
};

}  // namespace tessera::report
