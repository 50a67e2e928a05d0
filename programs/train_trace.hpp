#pragma once
// tessera-train --trace: a training run's calls as a Trace Event Format file (Perfetto,
// chrome://tracing, speedscope), on the modelled clock and the emulator's wall clock.
#include <tessera/tessera.hpp>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "train_request.hpp"

namespace tessera::programs {

/// The calls a trace of request `r` writes at most: --trace-calls, or every call of a training run
/// and 2 of a dry run's epoch.
[[nodiscard]] inline std::size_t trace_calls_of(const train_request& r) noexcept {
    if (r.trace_calls > 0) return r.trace_calls;
    return r.dry_run ? 2 : std::numeric_limits<std::size_t>::max();
}

/// A training run's --trace: opened with the session, each call added until --trace-calls, closed
/// by finish() (or, if the run fails, by the writer's destructor). Inactive without --trace. In a
/// run of several processes each rank traces its own replicas and host, the ranks' wall clocks
/// start together as they leave a barrier, and the lead rank gathers every rank's events after
/// each call and writes the file.
class training_trace {
public:
    template <class Model>
    training_trace(const train_request& r, exec::basic_session<Model>& session)
        : m_group(r.processes), m_limit(trace_calls_of(r)), m_path(r.trace) {
        if (r.trace.empty()) return;
        if (m_group.lead()) {
            m_file = std::make_unique<std::ofstream>(r.trace);
            if (!*m_file) throw std::runtime_error("--trace: cannot write " + r.trace);
            m_writer.emplace(*m_file);
        } else {
            m_writer.emplace(m_events);  // taken by gather() after each call
        }
        session.device().measure_wall_spans(true);
        const std::size_t local = session.batching().local_replicas();
        m_tracer.emplace(*m_writer, session.program(), session.costs(), session.plan(), local, true, m_group.rank,
                         m_group.rank * local);
        if (m_group.several()) {
            double barrier = 0;
            m_group.sum(std::span<double>(&barrier, 1));  // every rank leaves it at about the same time
        }
        m_tracer->start_wall_clock(
            std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count());
        gather();
    }

    /// Adds one call of `session` (until the limit): its clocks, its threads and the loss scale its
    /// next step uses. Every rank calls it after every call.
    template <class Model, class Tensor>
    void add(const exec::basic_session<Model>& session, const exec::run_result<Tensor>& result) {
        if (!m_tracer || m_calls == m_limit) return;
        m_tracer->modelled(m_calls, result.clocks, result.host);
        m_tracer->measured(m_calls, result.wall_spans, result.wall_start, result.wall_seconds);
        if constexpr (requires { session.model().loss_scale(); })
            m_tracer->host_counter("loss scale", session.model().loss_scale());
        ++m_calls;
        gather();
    }
    /// Writes the trace's description and closes the file; prints where it is (the lead rank).
    void finish(std::size_t run_calls) {
        if (!m_writer || !m_group.lead()) return;
        m_writer->close([&](report::json_writer& j) {
            j.member("what", "tessera-train: a training run");
            j.member("clocks", "modelled (replica processes, host) and measured (the emulator's threads)");
            j.member("calls_traced", m_calls).member("calls_run", run_calls).member("processes", m_group.size);
        });
        m_file->close();
        if (!*m_file) throw std::runtime_error("--trace: failed writing " + m_path);
        std::printf("trace: %s (%zu of %zu calls, %zu events; Perfetto, chrome://tracing and speedscope open it)\n",
                    m_path.c_str(), m_calls, run_calls, m_writer->events());
        m_tracer.reset();  // it writes into the writer: a later add() adds nothing
        m_writer.reset();
    }

private:
    // Several ranks: the others' events since the last gather, to the lead's file, in rank order.
    // The bytes travel as doubles through the group's element-wise sum, each rank's in its own range.
    void gather() {
        if (!m_group.several()) return;
        std::string mine;
        std::vector<double> lengths(2 * m_group.size, 0.0);  // each rank's bytes, then its events
        if (!m_group.lead()) {
            mine = std::string(report::trace_writer::events_of(m_events.str()));
            m_events.str("");
            lengths[m_group.size + m_group.rank] = double(m_writer->events() - m_sent);
            m_sent = m_writer->events();
        }
        lengths[m_group.rank] = double(mine.size());
        m_group.sum(lengths);
        std::vector<std::size_t> from(m_group.size + 1, 0);
        for (std::size_t k = 0; k < m_group.size; ++k) from[k + 1] = from[k] + std::size_t(lengths[k]);
        std::vector<double> bytes(from.back(), 0.0);
        for (std::size_t j = 0; j < mine.size(); ++j) bytes[from[m_group.rank] + j] = double(static_cast<unsigned char>(mine[j]));
        m_group.sum(bytes);
        if (!m_group.lead()) return;
        for (std::size_t k = 1; k < m_group.size; ++k) {
            std::string text(from[k + 1] - from[k], '\0');
            for (std::size_t j = 0; j < text.size(); ++j) text[j] = static_cast<char>(static_cast<unsigned char>(bytes[from[k] + j]));
            m_writer->raw_events(text, std::size_t(lengths[m_group.size + k]));
        }
    }

    const process_group& m_group;
    std::size_t m_limit = 0, m_calls = 0, m_sent = 0;  // m_sent: events gathered (a rank but the lead)
    std::string m_path;
    std::ostringstream m_events;  // a rank but the lead: its events since the last gather
    std::unique_ptr<std::ofstream> m_file;
    std::optional<report::trace_writer> m_writer;
    std::optional<exec::call_tracer> m_tracer;
};

}  // namespace tessera::programs
