#pragma once
// A group of emulated IPUs run together: the first failure aborts the rest and reaches the caller.
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/emulator/device_spec.hpp"
#include "tessera/emulator/error.hpp"
#include "tessera/emulator/ipu.hpp"

namespace tessera::emulator {

/// IPUs 0..n-1 with the same spec. run() starts one job per IPU and waits for all of them;
/// when a job throws, the registered abort actions (closing channels, aborting collectives)
/// run at once on the failing worker so no peer stays blocked, and run() rethrows the first
/// exception that is a cause: channel_closed and collective_aborted, the usual consequences of an
/// abort, are reported only when nothing else failed.
/// @code
///   emulator::cluster c(2);
///   emulator::channel<int> link(1);
///   c.on_abort([&] { link.close(); });
///   c.run({[&](ipu&) { link.send(1); }, [&](ipu&) { (void)link.receive(); }});
/// @endcode
class cluster {
public:
    explicit cluster(std::size_t ipus, device_spec spec = {}, bool record_trace = true) : m_spec(spec) {
        if (ipus == 0) throw std::invalid_argument("tessera::emulator::cluster: needs at least one IPU, got 0");
        m_ipus.reserve(ipus);
        for (std::size_t i = 0; i < ipus; ++i) m_ipus.push_back(std::make_unique<ipu>(i, spec, record_trace));
    }
    cluster(const cluster&) = delete;
    cluster& operator=(const cluster&) = delete;

    [[nodiscard]] std::size_t size() const noexcept { return m_ipus.size(); }
    [[nodiscard]] ipu& operator[](std::size_t i) { return *m_ipus.at(i); }
    [[nodiscard]] const ipu& operator[](std::size_t i) const { return *m_ipus.at(i); }
    [[nodiscard]] const device_spec& spec() const noexcept { return m_spec; }

    /// Registers an action for the next run()'s abort; must be noexcept in practice (close, abort).
    /// Call it before run(), from the thread that calls run().
    void on_abort(std::function<void()> action) {
        std::lock_guard lock(m_abort_mutex);
        m_abort_actions.push_back(std::move(action));
    }

    /// Job i runs on IPU i (fewer jobs than IPUs leave the rest idle). Blocks until every job is done;
    /// rethrows the first failure. Abort actions are cleared afterwards.
    void run(std::vector<ipu::job> jobs) {
        if (jobs.size() > m_ipus.size())
            throw std::invalid_argument("tessera::emulator::cluster::run: " + std::to_string(jobs.size()) +
                                        " jobs for " + std::to_string(m_ipus.size()) + " IPUs");
        m_first_error = nullptr;
        m_first_is_consequence = false;
        // Last IPU first: downstream IPUs start by waiting for data, so they hand the core back at once,
        // while a woken IPU 0 (work at hand) could keep this thread from launching the others on a
        // busy machine.
        std::vector<bool> launched(jobs.size(), false);
        try {
            for (std::size_t i = jobs.size(); i-- > 0;) {
                m_ipus[i]->launch(std::move(jobs[i]), [this](std::exception_ptr e) { fail(e); });
                launched[i] = true;
            }
        } catch (...) {
            fail(std::current_exception());
        }
        for (std::size_t i = 0; i < jobs.size(); ++i)
            if (launched[i]) (void)m_ipus[i]->join();
        {
            // A thread outside the cluster (a host feeder) may still be running the actions: wait for
            // it, and leave later abort() calls nothing to run. The abort state is reset here, not
            // when the next run() starts: an abort that comes before the next run() (a feeder failing
            // at once) must still run that run's actions.
            std::lock_guard lock(m_abort_mutex);
            m_abort_actions.clear();
            m_aborted = false;
        }
        if (m_first_error) std::rethrow_exception(std::exchange(m_first_error, nullptr));
    }

    /// Runs the registered abort actions once (until run() returns, later calls do nothing). Any
    /// thread may call it, also one the cluster does not own (a host feeder), and before run()
    /// starts: run() returns only after the actions are done. With no actions registered (after
    /// run() returned) it does nothing, so a late call cannot affect the next run().
    void abort() noexcept {
        std::lock_guard lock(m_abort_mutex);
        if (m_aborted || m_abort_actions.empty()) return;
        m_aborted = true;
        for (auto& action : m_abort_actions) action();
    }

private:
    // A closed channel or an aborted collective is usually the consequence of another failure: the
    // first error that is not one of these is the one reported.
    static bool is_consequence(std::exception_ptr e) noexcept {
        try {
            std::rethrow_exception(e);
        } catch (const channel_closed&) {
            return true;
        } catch (const collective_aborted&) {
            return true;
        } catch (...) {
            return false;
        }
    }
    void fail(std::exception_ptr e) noexcept {
        {
            std::lock_guard lock(m_error_mutex);
            if (!m_first_error || (m_first_is_consequence && !is_consequence(e))) {
                m_first_error = e;
                m_first_is_consequence = is_consequence(e);
            }
        }
        abort();
    }

    device_spec m_spec;
    std::vector<std::unique_ptr<ipu>> m_ipus;
    std::mutex m_abort_mutex;  // guards the actions and m_aborted: abort() may run on a thread outside the cluster
    std::vector<std::function<void()>> m_abort_actions;
    bool m_aborted = false;  // guarded by m_abort_mutex
    std::mutex m_error_mutex;
    std::exception_ptr m_first_error;
    bool m_first_is_consequence = false;
};

}  // namespace tessera::emulator
