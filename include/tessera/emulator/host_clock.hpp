#pragma once
// The host's side of the modelled clock: when each host call's data is ready, and what the IPUs wait.
#include <algorithm>
#include <cstddef>
#include <deque>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/emulator/host_spec.hpp"

namespace tessera::emulator {

/// How a host process loads data: PopTorch's DataLoader modes.
struct host_loading {
    bool async = false;              ///< false: prepared when the loop asks for it; true: prepared ahead
    bool rebatched = false;          ///< async: the workers share each batch (PopTorch's AsyncRebatched), not one each
    std::size_t workers = 1;         ///< loader workers per process (PopTorch's num_workers = 0: the loop itself, 1)
    std::size_t prefetch_depth = 3;  ///< async: batches prepared ahead at most (PopTorch's ring buffer: 3)
    std::size_t instances = 1;       ///< host processes, each preparing its own share on its own workers

    void validate() const {
        if (workers == 0 || instances == 0 || (async && prefetch_depth == 0))
            throw std::invalid_argument("tessera::emulator::host_loading: workers, instances and (async) prefetch_depth "
                                        "must be at least 1, got " + std::to_string(workers) + ", " +
                                        std::to_string(instances) + ", " + std::to_string(prefetch_depth));
    }
};

/// When one host call happened on the modelled clock (seconds since the clock started).
struct call_timing {
    double prepare_start = 0; ///< a loader worker started preparing its combined batch (or the workers, together)
    double ready = 0;         ///< its combined batch was prepared
    double device_start = 0;  ///< the IPUs started it (after the loop fed it and dispatched the call)
    double end = 0;           ///< the IPUs finished it
    double host_wait = 0;     ///< seconds the IPUs sat idle between the previous call and this one
    double prepare_wait = 0;  ///< of which they waited for the batch to be prepared (the rest: feeding and dispatch)
};

/// A sequence of host calls (an epoch, or several) on the modelled clock. Each call needs
/// `prepare` seconds of loader work on one worker, then `feed` seconds of the training loop handing
/// it over plus host_spec::dispatch_seconds, then `device` seconds on the IPUs. Synchronous loading
/// prepares a call's batch after the previous call returns, its workers splitting the batch; async
/// loading gives each batch to a worker as soon as a slot of the prefetch ring is free (a slot is
/// freed when the loop takes its batch), so preparation hides behind the IPUs up to the ring's depth
/// (at most that many workers are busy); rebatched async loading has all workers share each batch.
/// The processes of a multi-instance run prepare their shares at the same time; workers beyond the
/// host's cores do not help.
/// @code
///   emulator::host_clock host(emulator::host_spec{}, {.async = true});
///   for (auto& call : epoch) host.call(prepare_seconds, feed_seconds, device_seconds);
///   double epoch_seconds = host.now();
/// @endcode
class host_clock {
public:
    explicit host_clock(host_spec spec = {}, host_loading loading = {}) : m_spec(spec), m_loading(loading) {
        m_spec.validate();
        m_loading.validate();
        const std::size_t per_process = std::max<std::size_t>(1, m_spec.cores / m_loading.instances);
        m_workers = std::min(m_loading.workers, per_process);
        m_worker_free.assign(m_workers, 0.0);
    }

    /// Models the next call; `prepare` and `feed` are one process's (every process does the same at once).
    call_timing call(double prepare, double feed, double device) {
        if (!(prepare >= 0) || !(feed >= 0) || !(device >= 0))
            throw std::invalid_argument("tessera::emulator::host_clock::call: negative or NaN seconds (prepare " +
                                        std::to_string(prepare) + ", feed " + std::to_string(feed) + ", device " +
                                        std::to_string(device) + ")");
        call_timing t;
        if (!m_loading.async) {
            t.prepare_start = m_now;
            t.ready = m_now + prepare / double(m_workers);
        } else {
            // The oldest of the ring's slots is free once the loop took the batch that held it.
            const double slot_free = m_taken.size() < m_loading.prefetch_depth ? 0.0 : m_taken.front();
            // One worker per batch, or (rebatched) all of them on each batch in turn.
            auto worker = m_loading.rebatched ? m_worker_free.begin()
                                              : std::min_element(m_worker_free.begin(), m_worker_free.end());
            const double start = std::max(*worker, slot_free);
            t.prepare_start = start;
            *worker = t.ready = start + (m_loading.rebatched ? prepare / double(m_workers) : prepare);
        }
        const double taken = std::max(m_now, t.ready);
        if (m_loading.async) {
            m_taken.push_back(taken);
            if (m_taken.size() > m_loading.prefetch_depth) m_taken.pop_front();
        }
        t.device_start = taken + feed + m_spec.dispatch_seconds;
        t.end = t.device_start + device;
        t.host_wait = t.device_start - m_now;
        t.prepare_wait = taken - m_now;
        m_now = t.end;
        m_calls.push_back(t);
        return t;
    }

    /// The end of the last call.
    [[nodiscard]] double now() const noexcept { return m_now; }
    /// Seconds the IPUs waited for the host so far.
    [[nodiscard]] double host_wait() const noexcept {
        double w = 0;
        for (const auto& c : m_calls) w += c.host_wait;
        return w;
    }
    /// Of host_wait(), the seconds the IPUs waited for batches to be prepared (the rest is feeding and dispatch).
    [[nodiscard]] double prepare_wait() const noexcept {
        double w = 0;
        for (const auto& c : m_calls) w += c.prepare_wait;
        return w;
    }
    [[nodiscard]] const std::vector<call_timing>& calls() const noexcept { return m_calls; }
    [[nodiscard]] const host_spec& spec() const noexcept { return m_spec; }
    [[nodiscard]] const host_loading& loading() const noexcept { return m_loading; }
    /// Workers that prepare at once in one process (the loader's, bounded by the host's cores).
    [[nodiscard]] std::size_t workers() const noexcept { return m_workers; }

private:
    host_spec m_spec;
    host_loading m_loading;
    std::size_t m_workers = 1;
    double m_now = 0;
    std::vector<double> m_worker_free;
    std::deque<double> m_taken;  // when the loop took each of the last prefetch_depth batches
    std::vector<call_timing> m_calls;
};

}  // namespace tessera::emulator
