#pragma once
// Worker threads kept between kernel calls: a parallel loop costs a wake-up, not a thread spawn.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace tessera::kernels {

/// `threads - 1` workers plus the calling thread. run(n, body) runs body(0) on the caller and
/// body(1 .. n-1) on the workers, returns when all are done and rethrows the exception of the lowest
/// index that threw. Spawning a thread per parallel loop costs 0.1-0.3 ms on a virtual machine, more
/// than a small batch-norm or ReLU takes; a woken worker costs microseconds. One caller at a time
/// (others wait); a body that calls run() again, or a call from a worker, runs serially.
/// @code
///   kernels::thread_pool pool(2);
///   nn::context ctx{.mode = nn::mode::train, .threads = 2, .pool = &pool};
/// @endcode
class thread_pool {
public:
    explicit thread_pool(std::size_t threads) {
        if (threads == 0) throw std::invalid_argument("tessera::kernels::thread_pool: needs at least 1 thread, got 0");
        m_errors.resize(threads);
        m_workers.reserve(threads - 1);
        try {
            for (std::size_t w = 1; w < threads; ++w) m_workers.emplace_back([this, w] { work(w); });
        } catch (...) {
            stop();  // the workers already started must not outlive a pool that was never built
            throw;
        }
    }
    ~thread_pool() { stop(); }
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;

    /// Threads a run() can use: the workers and the caller.
    [[nodiscard]] std::size_t size() const noexcept { return m_workers.size() + 1; }

    /// body(t) for t in [0, n), n <= size(); body(0) on the calling thread.
    template <class F>
    void run(std::size_t n, F&& body) {
        if (n > size())
            throw std::invalid_argument("tessera::kernels::thread_pool::run: " + std::to_string(n) + " tasks for " +
                                        std::to_string(size()) + " threads");
        if (n <= 1 || is_worker() || m_owner.load(std::memory_order_acquire) == std::this_thread::get_id()) {
            for (std::size_t t = 0; t < n; ++t) body(t);  // nothing to share, or already inside a run
            return;
        }
        std::lock_guard serial(m_run);
        m_owner.store(std::this_thread::get_id(), std::memory_order_release);
        struct owner_reset {
            std::atomic<std::thread::id>& owner;
            ~owner_reset() { owner.store(std::thread::id(), std::memory_order_release); }
        } reset{m_owner};
        auto* erased = static_cast<void*>(&body);
        {
            std::lock_guard lock(m_mutex);
            m_task = {erased, [](void* f, std::size_t t) { (*static_cast<std::remove_reference_t<F>*>(f))(t); }, n};
            m_remaining.store(n - 1, std::memory_order_release);
            for (std::size_t t = 0; t < n; ++t) m_errors[t] = nullptr;
            m_generation.fetch_add(1, std::memory_order_release);
        }
        m_wake.notify_all();
        try {
            body(0);
        } catch (...) {
            m_errors[0] = std::current_exception();
        }
        wait_for_workers();
        for (std::size_t t = 0; t < n; ++t)
            if (m_errors[t]) std::rethrow_exception(m_errors[t]);
    }

private:
    void stop() noexcept {
        {
            std::lock_guard lock(m_mutex);
            m_stop = true;
        }
        m_stop_flag.store(true, std::memory_order_relaxed);
        m_wake.notify_all();
        for (auto& t : m_workers) t.join();
    }

    struct task {
        void* body = nullptr;
        void (*call)(void*, std::size_t) = nullptr;
        std::size_t count = 0;
    };

    [[nodiscard]] bool is_worker() const noexcept {
        const auto me = std::this_thread::get_id();
        for (const auto& t : m_workers)
            if (t.get_id() == me) return true;
        return false;
    }

    // Spin briefly (back-to-back kernel calls), then sleep until the next generation or stop.
    void work(std::size_t index) {
        std::uint64_t seen = 0;
        for (;;) {
            task job;
            const auto give_up = std::chrono::steady_clock::now() + spin_time;
            while (m_generation.load(std::memory_order_acquire) == seen && std::chrono::steady_clock::now() < give_up &&
                   !m_stop_flag.load(std::memory_order_relaxed))
                std::this_thread::yield();
            {
                std::unique_lock lock(m_mutex);
                m_wake.wait(lock, [&] { return m_stop || m_generation.load(std::memory_order_relaxed) != seen; });
                if (m_stop) return;
                seen = m_generation.load(std::memory_order_relaxed);
                job = m_task;
            }
            if (index < job.count) {
                try {
                    job.call(job.body, index);
                } catch (...) {
                    m_errors[index] = std::current_exception();
                }
                if (m_remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
                    std::lock_guard lock(m_mutex);
                    m_done.notify_one();
                }
            }
        }
    }

    void wait_for_workers() {
        const auto give_up = std::chrono::steady_clock::now() + spin_time;
        while (m_remaining.load(std::memory_order_acquire) != 0 && std::chrono::steady_clock::now() < give_up)
            std::this_thread::yield();
        std::unique_lock lock(m_mutex);
        m_done.wait(lock, [&] { return m_remaining.load(std::memory_order_acquire) == 0; });
    }

    static constexpr std::chrono::microseconds spin_time{200};

    std::vector<std::thread> m_workers;
    std::vector<std::exception_ptr> m_errors;  // per task index; each written by its own thread
    std::mutex m_run;                          // one run() at a time
    std::atomic<std::thread::id> m_owner{};    // the thread inside run(), for nested calls
    std::mutex m_mutex;
    std::condition_variable m_wake, m_done;
    task m_task;
    std::atomic<std::uint64_t> m_generation{0};
    std::atomic<std::size_t> m_remaining{0};
    std::atomic<bool> m_stop_flag{false};
    bool m_stop = false;
};

/// How many threads a kernel may use, and the pool that runs them (none: a thread per task and
/// call). Converts from a thread count, so `relu_forward(..., ws, 2)` still reads naturally.
struct parallelism {
    std::size_t threads = 1;
    thread_pool* pool = nullptr;
    constexpr parallelism(std::size_t t = 1, thread_pool* p = nullptr) noexcept : threads(t), pool(p) {}  // NOLINT: implicit
};

namespace detail {

/// Runs body(t) for t in [0, par.threads): on the pool's workers and the caller when there is a pool
/// big enough, otherwise on threads-1 threads started for this call and the caller; rethrows the
/// first exception after every task has finished.
template <class F>
void run_parallel(parallelism par, F&& body) {
    const std::size_t threads = par.threads;
    if (threads <= 1) {
        body(std::size_t{0});
        return;
    }
    if (par.pool != nullptr && par.pool->size() >= threads) {
        par.pool->run(threads, body);
        return;
    }
    std::vector<std::exception_ptr> errors(threads);
    {
        std::vector<std::jthread> pool;
        pool.reserve(threads - 1);
        for (std::size_t t = 1; t < threads; ++t)
            pool.emplace_back([&, t] {
                try {
                    body(t);
                } catch (...) {
                    errors[t] = std::current_exception();
                }
            });
        try {
            body(std::size_t{0});
        } catch (...) {
            errors[0] = std::current_exception();
        }
    }
    for (auto& e : errors)
        if (e) std::rethrow_exception(e);
}

/// Elements per thread below which an elementwise pass stays on the calling thread: 64 Ki where each
/// parallel loop starts its own threads, 16 Ki where a pool's workers wait for work (a hand-over
/// costs microseconds, starting a thread tens). With 64 Ki, every pass over a 7×7 × 64-channel
/// activation of batch 32 (100 Ki elements) ran on one thread of two.
[[nodiscard]] constexpr std::size_t elementwise_grain(parallelism par) noexcept {
    return par.pool != nullptr ? std::size_t{1} << 14 : std::size_t{1} << 16;
}

/// Splits [0, n) into `threads` contiguous ranges and runs body(begin, end, t) on each; runs on the
/// calling thread alone when n is below `grain` elements per thread (spawning would cost more).
template <class F>
void parallel_ranges(parallelism par, std::size_t n, std::size_t grain, F&& body) {
    const std::size_t threads = std::max<std::size_t>(1, std::min(par.threads, n / std::max<std::size_t>(grain, 1)));
    const std::size_t per = (n + threads - 1) / threads;
    run_parallel(parallelism{threads, par.pool}, [&](std::size_t t) {
        const std::size_t begin = std::min(n, t * per), end = std::min(n, begin + per);
        body(begin, end, t);
    });
}

}  // namespace detail

}  // namespace tessera::kernels
