#pragma once
// The end of a lock-step pipeline cycle among IPU threads: all meet, and learn the latest arrival.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "tessera/emulator/error.hpp"

namespace tessera::emulator {

/// A reusable barrier of `participants` threads that also returns the latest of their modelled
/// arrival times. A waiting thread spins, then yields for up to `spin`, and only then sleeps: a
/// pipeline's cycles are short, and a thread woken from sleep at every cycle would lose a wake-up's
/// latency each time (bench_pipeline_speedup's lock_step_over_dataflow measures what remains).
/// abort() wakes every waiter with collective_aborted; later calls throw too.
/// @code
///   emulator::cycle_barrier cycle(2);
///   double end = cycle.arrive_and_wait(clock.now());   // in each IPU's thread
/// @endcode
class cycle_barrier {
public:
    explicit cycle_barrier(std::size_t participants, std::chrono::microseconds spin = std::chrono::microseconds{5000})
        : m_participants(participants), m_spin(spin) {
        if (participants == 0)
            throw std::invalid_argument("tessera::emulator::cycle_barrier: needs at least one participant, got 0");
    }

    /// Arrives at `arrival` (seconds on the caller's modelled clock) and returns, once every
    /// participant has arrived, the latest of their arrivals.
    [[nodiscard]] double arrive_and_wait(double arrival) {
        std::unique_lock lock(m_mutex);
        if (m_aborted.load(std::memory_order_relaxed)) throw collective_aborted("tessera::emulator::cycle_barrier: aborted");
        m_latest = m_arrived == 0 ? arrival : std::max(m_latest, arrival);
        if (++m_arrived == m_participants) {
            m_result = m_latest;
            m_arrived = 0;
            m_generation.fetch_add(1, std::memory_order_release);
            lock.unlock();
            m_wake.notify_all();
            return m_result;
        }
        const std::size_t generation = m_generation.load(std::memory_order_relaxed);
        lock.unlock();
        const auto passed = [&] {
            return m_generation.load(std::memory_order_acquire) != generation || m_aborted.load(std::memory_order_acquire);
        };
        bool done = false;
        for (int i = 0; i < 64 && !done; ++i) done = passed();
        if (!done && m_spin.count() > 0) {
            const auto give_up = std::chrono::steady_clock::now() + m_spin;
            for (unsigned i = 0; !(done = passed()); ++i) {
                std::this_thread::yield();
                if (i % 16 == 15 && std::chrono::steady_clock::now() > give_up) break;
            }
        }
        if (!done) {
            lock.lock();
            m_wake.wait(lock, passed);
            lock.unlock();
        }
        // m_result stays until this thread arrives again: the next round cannot end without it.
        if (m_generation.load(std::memory_order_acquire) == generation)
            throw collective_aborted("tessera::emulator::cycle_barrier: aborted");
        return m_result;
    }

    void abort() noexcept {
        {
            std::lock_guard lock(m_mutex);
            m_aborted.store(true, std::memory_order_release);
        }
        m_wake.notify_all();
    }

private:
    const std::size_t m_participants;
    const std::chrono::microseconds m_spin;
    std::mutex m_mutex;
    std::condition_variable m_wake;
    std::size_t m_arrived = 0;
    double m_latest = 0, m_result = 0;
    std::atomic<std::size_t> m_generation{0};
    std::atomic<bool> m_aborted{false};
};

}  // namespace tessera::emulator
