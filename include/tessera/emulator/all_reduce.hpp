#pragma once
// A fixed-order all-reduce among threads: deterministic sums, abortable.
#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/emulator/error.hpp"

namespace tessera::emulator {

/// Every participant calls reduce(rank, data); when all have arrived, each buffer holds
/// data_0 + data_1 + ... + data_{R-1}, summed in rank order whatever the arrival order, so the
/// result is bit-identical on every rank and on every run. abort() wakes the waiters with
/// collective_aborted. Also synchronises modelled clocks: reduce returns the latest arrival time.
/// @code
///   all_reduce_group<float> group(replicas);
///   double t0 = group.reduce(replica, gradients, clock.now());   // in each replica's thread
/// @endcode
template <class T>
class all_reduce_group {
    static_assert(std::is_arithmetic_v<T>, "tessera::emulator::all_reduce_group<T>: T must be arithmetic");

public:
    /// Sums over the participants, then, if given, `combine` runs once on the sum (in the last
    /// arriving thread, the others waiting) before every buffer receives the result: the hook for a
    /// reduction across processes (tessera::dist), which must itself be deterministic. It runs
    /// without the group's lock: abort() during it wakes the waiters at once.
    explicit all_reduce_group(std::size_t participants, std::function<void(std::span<T>)> combine = {})
        : m_buffers(participants), m_arrived_flags(participants), m_combine(std::move(combine)) {
        if (participants == 0)
            throw std::invalid_argument("tessera::emulator::all_reduce_group: needs at least one participant");
    }

    [[nodiscard]] std::size_t participants() const noexcept { return m_buffers.size(); }

    /// Blocks until all participants have called; throws collective_aborted after abort(),
    /// std::invalid_argument for a bad rank or a size mismatch (which also aborts the others).
    double reduce(std::size_t rank, std::span<T> data, double arrival = 0.0) {
        std::unique_lock lock(m_mutex);
        if (m_aborted) throw collective_aborted("tessera::emulator::all_reduce_group: aborted");
        if (rank >= m_buffers.size())
            fail(lock, "rank " + std::to_string(rank) + " of " + std::to_string(m_buffers.size()) + " participants");
        if (m_arrived_flags[rank]) fail(lock, "rank " + std::to_string(rank) + " arrived twice in one round");
        if (m_arrived > 0 && data.size() != m_size)
            fail(lock, "rank " + std::to_string(rank) + " brings " + std::to_string(data.size()) +
                           " elements, the others " + std::to_string(m_size));
        m_size = data.size();
        m_buffers[rank] = data;
        m_arrived_flags[rank] = true;
        m_latest = m_arrived == 0 ? arrival : std::max(m_latest, arrival);
        if (++m_arrived == m_buffers.size()) {
            if (m_combine) {
                m_result.resize(m_size);
                for (std::size_t i = 0; i < m_size; ++i) {
                    T sum = m_buffers[0][i];
                    for (std::size_t r = 1; r < m_buffers.size(); ++r) sum += m_buffers[r][i];
                    m_result[i] = sum;
                }
                // combine may wait for other processes: never under the lock abort() takes, so a local
                // failure wakes this group's waiters at once. The others wait for the generation.
                lock.unlock();
                try {
                    m_combine(std::span<T>(m_result));
                } catch (...) {
                    abort();  // the waiters must not wait for a result that will not come
                    throw;
                }
                lock.lock();
                // Aborted meanwhile: the waiters have gone and their buffers may be gone with them.
                if (m_aborted) throw collective_aborted("tessera::emulator::all_reduce_group: aborted");
                for (auto& b : m_buffers) std::copy(m_result.begin(), m_result.end(), b.begin());
            } else {
                for (std::size_t i = 0; i < m_size; ++i) {
                    T sum = m_buffers[0][i];
                    for (std::size_t r = 1; r < m_buffers.size(); ++r) sum += m_buffers[r][i];
                    for (auto& b : m_buffers) b[i] = sum;
                }
            }
            m_result_time = m_latest;
            const double done = m_result_time;
            m_arrived = 0;
            std::fill(m_arrived_flags.begin(), m_arrived_flags.end(), false);
            ++m_generation;
            lock.unlock();
            m_cv.notify_all();
            return done;
        }
        const std::size_t generation = m_generation;
        m_cv.wait(lock, [&] { return m_generation != generation || m_aborted; });
        if (m_generation == generation) throw collective_aborted("tessera::emulator::all_reduce_group: aborted");
        return m_result_time;
    }

    /// Wakes every waiter with collective_aborted; later calls throw too.
    void abort() noexcept {
        {
            std::lock_guard lock(m_mutex);
            m_aborted = true;
        }
        m_cv.notify_all();
    }

private:
    [[noreturn]] void fail(std::unique_lock<std::mutex>& lock, const std::string& what) {
        m_aborted = true;
        lock.unlock();
        m_cv.notify_all();
        throw std::invalid_argument("tessera::emulator::all_reduce_group::reduce: " + what);
    }

    std::mutex m_mutex;
    std::condition_variable m_cv;
    std::vector<std::span<T>> m_buffers;
    std::vector<bool> m_arrived_flags;
    std::size_t m_arrived = 0, m_size = 0, m_generation = 0;
    double m_latest = 0, m_result_time = 0;
    bool m_aborted = false;
    std::function<void(std::span<T>)> m_combine;
    std::vector<T> m_result;
};

}  // namespace tessera::emulator
