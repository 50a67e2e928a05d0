#pragma once
// One emulated IPU: a worker thread, a memory arena and a modelled clock.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>

#include "tessera/emulator/device_spec.hpp"
#include "tessera/emulator/memory_arena.hpp"
#include "tessera/emulator/modelled_clock.hpp"

namespace tessera::emulator {

/// An IPU runs one job at a time on its own std::jthread. The job's exception is kept and
/// rethrown by wait(), as Taskflow's future.get() does; an optional failure hook runs on the
/// worker at once so that peers blocked on channels can be woken (see cluster).
/// @code
///   emulator::ipu dev(0);
///   dev.launch([](emulator::ipu& self) { self.clock().compute(1e9, 16, activity::forward); });
///   dev.wait();   // rethrows what the job threw
/// @endcode
class ipu {
public:
    using job = std::function<void(ipu&)>;
    using failure_hook = std::function<void(std::exception_ptr)>;

    explicit ipu(std::size_t id, device_spec spec = {}, bool record_trace = true)
        : m_id(id), m_spec((spec.validate(), spec)), m_arena(id, spec.memory_bytes()), m_clock(spec, record_trace),
          m_thread([this](std::stop_token stop) { work(stop); }) {}
    ipu(const ipu&) = delete;
    ipu& operator=(const ipu&) = delete;
    /// Joins the worker. A running job must be able to finish (close its channels first).
    ~ipu() = default;

    /// Starts `j` on the worker; throws std::logic_error if a job is still running.
    void launch(job j, failure_hook on_failure = {}) {
        if (!j) throw std::invalid_argument("tessera::emulator::ipu::launch: IPU " + std::to_string(m_id) + ": empty job");
        {
            std::lock_guard lock(m_mutex);
            if (m_state != state::idle)
                throw std::logic_error("tessera::emulator::ipu::launch: IPU " + std::to_string(m_id) +
                                       " is still running a job (wait() for it first)");
            m_job = std::move(j);
            m_on_failure = std::move(on_failure);
            m_error = nullptr;
            m_state = state::queued;
        }
        m_wake.notify_all();
    }

    /// Blocks until the job is done and returns its exception (nullptr on success); the IPU is idle after.
    [[nodiscard]] std::exception_ptr join() {
        std::unique_lock lock(m_mutex);
        m_done.wait(lock, [&] { return m_state == state::finished || m_state == state::idle; });
        m_state = state::idle;
        return std::exchange(m_error, nullptr);
    }

    /// join(), rethrowing the job's exception.
    void wait() {
        if (auto e = join()) std::rethrow_exception(e);
    }

    /// True once the job has finished (a bounded wait: never blocks longer than `timeout`).
    template <class Rep, class Period>
    [[nodiscard]] bool wait_for(std::chrono::duration<Rep, Period> timeout) {
        std::unique_lock lock(m_mutex);
        return m_done.wait_for(lock, timeout, [&] { return m_state == state::finished || m_state == state::idle; });
    }

    [[nodiscard]] std::size_t id() const noexcept { return m_id; }
    [[nodiscard]] const device_spec& spec() const noexcept { return m_spec; }
    [[nodiscard]] memory_arena& arena() noexcept { return m_arena; }
    [[nodiscard]] const memory_arena& arena() const noexcept { return m_arena; }
    /// The modelled clock: touch it from the running job, or from the caller between jobs.
    [[nodiscard]] modelled_clock& clock() noexcept { return m_clock; }
    [[nodiscard]] const modelled_clock& clock() const noexcept { return m_clock; }

private:
    enum class state { idle, queued, running, finished };

    void work(std::stop_token stop) {
        std::unique_lock lock(m_mutex);
        for (;;) {
            m_wake.wait(lock, stop, [&] { return m_state == state::queued; });
            if (m_state != state::queued) return;  // stop requested while idle
            m_state = state::running;
            job j = std::move(m_job);
            failure_hook hook = std::move(m_on_failure);
            lock.unlock();
            std::exception_ptr error;
            try {
                j(*this);
            } catch (...) {
                error = std::current_exception();
            }
            // The hook runs before the job counts as finished, so peers are woken before wait() returns.
            if (error && hook) hook(error);
            lock.lock();
            m_error = error;
            m_state = state::finished;
            m_done.notify_all();
        }
    }

    const std::size_t m_id;
    const device_spec m_spec;
    memory_arena m_arena;
    modelled_clock m_clock;
    std::mutex m_mutex;
    std::condition_variable_any m_wake;
    std::condition_variable m_done;
    state m_state = state::idle;
    job m_job;
    failure_hook m_on_failure;
    std::exception_ptr m_error;
    std::jthread m_thread;  // last: joined before the members it uses are destroyed
};

}  // namespace tessera::emulator
