#pragma once
// A thread that runs one job at a time and is kept for the next one (IPU threads, host feeders).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>

namespace tessera::emulator {

/// A std::jthread that runs jobs one at a time: launch() hands it a job, join() waits for it and
/// returns what it threw. Starting and waking a thread costs tens to hundreds of microseconds on a
/// virtual machine, so the thread is kept, and after a job — and a joiner before it sleeps — stays
/// runnable for `linger`, yielding its core to any thread that wants it: calls that follow each
/// other (a training loop's steps) start and end without a wake-up.
/// @code
///   emulator::worker host;
///   host.launch([] { prepare_batches(); });
///   if (auto error = host.join()) std::rethrow_exception(error);
/// @endcode
class worker {
public:
    using job = std::function<void()>;
    /// Runs on the worker when the job throws, before join() returns (e.g. to wake blocked peers).
    using failure_hook = std::function<void(std::exception_ptr)>;
    static constexpr std::chrono::microseconds default_linger{200};

    explicit worker(std::chrono::microseconds linger = default_linger)
        : m_linger(linger), m_thread([this](std::stop_token stop) { work(stop); }) {}
    worker(const worker&) = delete;
    worker& operator=(const worker&) = delete;
    /// Stops and joins the thread. A running job must be able to finish (close its channels first).
    ~worker() = default;

    /// Starts `j`; throws std::logic_error if a job is still running or not yet joined.
    void launch(job j, failure_hook on_failure = {}) {
        if (!j) throw std::invalid_argument("tessera::emulator::worker::launch: empty job");
        {
            std::lock_guard lock(m_mutex);
            if (m_state.load(std::memory_order_relaxed) != state::idle)
                throw std::logic_error("tessera::emulator::worker::launch: a job is still running (join() it first)");
            m_job = std::move(j);
            m_on_failure = std::move(on_failure);
            m_error = nullptr;
            m_state.store(state::queued, std::memory_order_release);
        }
        m_wake.notify_all();
    }

    /// Blocks until the job is done and returns its exception (nullptr on success); idle after.
    [[nodiscard]] std::exception_ptr join() {
        linger_until([&] { return done(); });
        std::unique_lock lock(m_mutex);
        m_done.wait(lock, [&] { return done(); });
        m_state.store(state::idle, std::memory_order_relaxed);
        return std::exchange(m_error, nullptr);
    }

    /// True once the job has finished (a bounded wait: never blocks longer than `timeout`).
    template <class Rep, class Period>
    [[nodiscard]] bool wait_for(std::chrono::duration<Rep, Period> timeout) {
        std::unique_lock lock(m_mutex);
        return m_done.wait_for(lock, timeout, [&] { return done(); });
    }

private:
    enum class state { idle, queued, running, finished };

    [[nodiscard]] bool done() const noexcept {
        const state s = m_state.load(std::memory_order_acquire);
        return s == state::finished || s == state::idle;
    }
    // Yields until ready() or `m_linger` has passed.
    template <class Ready>
    void linger_until(Ready ready) const {
        if (ready()) return;
        const auto give_up = std::chrono::steady_clock::now() + m_linger;
        while (!ready() && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
    }

    void work(std::stop_token stop) {
        for (;;) {
            linger_until(
                [&] { return m_state.load(std::memory_order_acquire) == state::queued || stop.stop_requested(); });
            {
                std::unique_lock lock(m_mutex);
                m_wake.wait(lock, stop, [&] { return m_state.load(std::memory_order_relaxed) == state::queued; });
                if (m_state.load(std::memory_order_relaxed) != state::queued) return;  // stop requested while idle
                m_state.store(state::running, std::memory_order_relaxed);
            }
            std::exception_ptr error = run_job();
            // Publish: the worker hands over its only reference to the exception (and has destroyed
            // the job and the hook), so whatever the joiner reads is never released or destroyed
            // on this thread after the joiner could see it.
            {
                std::lock_guard lock(m_mutex);
                m_error = std::move(error);
                m_state.store(state::finished, std::memory_order_release);
            }
            m_done.notify_all();
        }
    }

    // Runs the queued job, then its failure hook if it threw; the job and the hook (and what they
    // capture) are destroyed before this returns, i.e. before the job counts as finished. A hook
    // must not throw (it would end the program, as any exception escaping a thread does).
    std::exception_ptr run_job() {
        job j = std::move(m_job);
        failure_hook hook = std::move(m_on_failure);
        std::exception_ptr error;
        try {
            j();
        } catch (...) {
            error = std::current_exception();
        }
        // The hook runs before the job counts as finished, so peers are woken before join() returns.
        if (error && hook) hook(error);
        return error;
    }

    const std::chrono::microseconds m_linger;
    std::mutex m_mutex;
    std::condition_variable_any m_wake;
    std::condition_variable m_done;
    std::atomic<state> m_state{state::idle};
    job m_job;
    failure_hook m_on_failure;
    std::exception_ptr m_error;
    std::jthread m_thread;  // last: joined before the members it uses are destroyed
};

}  // namespace tessera::emulator
