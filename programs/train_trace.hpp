#pragma once
// tessera-train --trace: a training run's calls as a Trace Event Format file (Perfetto,
// chrome://tracing, speedscope), on the modelled clock and the emulator's wall clock.
#include <tessera/tessera.hpp>

#include <cstddef>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "train_request.hpp"

namespace tessera::programs {

/// The calls a trace of request `r` writes at most: --trace-calls, or every call of a training run
/// and 2 of a dry run's epoch.
[[nodiscard]] inline std::size_t trace_calls_of(const train_request& r) noexcept {
    if (r.trace_calls > 0) return r.trace_calls;
    return r.dry_run ? 2 : std::numeric_limits<std::size_t>::max();
}

/// A training run's --trace: opened with the session, each call added until --trace-calls, closed
/// by finish() (or, if the run fails, by the writer's destructor). Inactive without --trace and on
/// every rank but the lead.
class training_trace {
public:
    template <class Model>
    training_trace(const train_request& r, exec::basic_session<Model>& session)
        : m_limit(trace_calls_of(r)), m_path(r.trace) {
        if (r.trace.empty() || !r.processes.lead()) return;
        m_file = std::make_unique<std::ofstream>(r.trace);
        if (!*m_file) throw std::runtime_error("--trace: cannot write " + r.trace);
        m_writer.emplace(*m_file);
        session.device().measure_wall_spans(true);
        m_tracer.emplace(*m_writer, session.program(), session.costs(), session.plan(), session.batching().local_replicas(),
                         true);
    }

    /// Adds one call of `session` (until the limit): its clocks, its threads and the loss scale its
    /// next step uses.
    template <class Model, class Tensor>
    void add(const exec::basic_session<Model>& session, const exec::run_result<Tensor>& result) {
        if (!m_tracer || m_calls == m_limit) return;
        m_tracer->modelled(m_calls, result.clocks, result.host);
        m_tracer->measured(m_calls, result.wall_spans, result.wall_start, result.wall_seconds);
        if constexpr (requires { session.model().loss_scale(); })
            m_tracer->host_counter("loss scale", session.model().loss_scale());
        ++m_calls;
    }
    /// Writes the trace's description and closes the file; prints where it is.
    void finish(std::size_t run_calls) {
        if (!m_writer) return;
        m_writer->close([&](report::json_writer& j) {
            j.member("what", "tessera-train: a training run");
            j.member("clocks", "modelled (replica processes, host) and measured (the emulator's threads)");
            j.member("calls_traced", m_calls).member("calls_run", run_calls);
        });
        m_file->close();
        if (!*m_file) throw std::runtime_error("--trace: failed writing " + m_path);
        std::printf("trace: %s (%zu of %zu calls, %zu events; Perfetto, chrome://tracing and speedscope open it)\n",
                    m_path.c_str(), m_calls, run_calls, m_writer->events());
        m_writer.reset();
    }

private:
    std::size_t m_limit = 0, m_calls = 0;
    std::string m_path;
    std::unique_ptr<std::ofstream> m_file;
    std::optional<report::trace_writer> m_writer;
    std::optional<exec::call_tracer> m_tracer;
};

}  // namespace tessera::programs
