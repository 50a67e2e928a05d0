#pragma once
// Fixed-order collectives among threads (all-reduce, reduce-scatter, all-gather): deterministic, abortable.
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

/// A group of threads running fixed-order collectives on their own buffers: deterministic, abortable.
///  - reduce(rank, data): an all-reduce. When all have arrived, each buffer holds
///    data_0 + data_1 + ... + data_{R-1}, summed in rank order whatever the arrival order, so the
///    result is bit-identical on every rank and on every run.
///  - reduce_scatter(rank, data, first, last): the same sums, but each rank receives only the part
///    [first, last) it names (its shard); the rest of its buffer is left as it was.
///  - all_gather(rank, data, first, last): each rank brings its part [first, last) (what it owns);
///    when all have arrived, every buffer holds every rank's part (elements nobody owns: rank 0's).
/// abort() wakes the waiters with collective_aborted. Each call also synchronises modelled clocks:
/// it returns the latest arrival time. Every rank of a round must make the same call.
/// @code
///   collective_group<float> group(replicas);
///   double t0 = group.reduce(replica, gradients, clock.now());   // in each replica's thread
/// @endcode
template <class T>
class collective_group {
    static_assert(std::is_arithmetic_v<T>, "tessera::emulator::collective_group<T>: T must be arithmetic");

public:
    /// If given, `combine` runs once on the round's result (in the last arriving thread, the others
    /// waiting) before the buffers receive it: the hook for the same collective across processes
    /// (tessera::dist), which must itself be deterministic. After a reduction it receives the sums of
    /// this group; after an all-gather, this group's parts in place (it fills in the other processes').
    /// It runs without the group's lock: abort() during it wakes the waiters at once.
    explicit collective_group(std::size_t participants, std::function<void(std::span<T>)> combine = {})
        : m_buffers(participants), m_parts(participants), m_arrived_flags(participants), m_combine(std::move(combine)) {
        if (participants == 0)
            throw std::invalid_argument("tessera::emulator::collective_group: needs at least one participant");
    }

    [[nodiscard]] std::size_t participants() const noexcept { return m_buffers.size(); }

    /// Blocks until all participants have called; throws collective_aborted after abort(),
    /// std::invalid_argument for a bad rank or a size mismatch (which also aborts the others).
    double reduce(std::size_t rank, std::span<T> data, double arrival = 0.0) {
        return run(operation::reduce, rank, data, 0, data.size(), arrival);
    }
    /// Sums as reduce() does; rank receives elements [first, last) of the sum only.
    double reduce_scatter(std::size_t rank, std::span<T> data, std::size_t first, std::size_t last, double arrival = 0.0) {
        return run(operation::reduce_scatter, rank, data, first, last, arrival);
    }
    /// Every buffer receives every rank's elements [first, last) of its own buffer.
    double all_gather(std::size_t rank, std::span<T> data, std::size_t first, std::size_t last, double arrival = 0.0) {
        return run(operation::all_gather, rank, data, first, last, arrival);
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
    enum class operation { reduce, reduce_scatter, all_gather };
    struct part {
        std::size_t first = 0, last = 0;
    };

    double run(operation op, std::size_t rank, std::span<T> data, std::size_t first, std::size_t last, double arrival) {
        std::unique_lock lock(m_mutex);
        if (m_aborted) throw collective_aborted("tessera::emulator::collective_group: aborted");
        if (rank >= m_buffers.size())
            fail(lock, "rank " + std::to_string(rank) + " of " + std::to_string(m_buffers.size()) + " participants");
        if (m_arrived_flags[rank]) fail(lock, "rank " + std::to_string(rank) + " arrived twice in one round");
        if (m_arrived > 0 && data.size() != m_size)
            fail(lock, "rank " + std::to_string(rank) + " brings " + std::to_string(data.size()) +
                           " elements, the others " + std::to_string(m_size));
        if (m_arrived > 0 && op != m_operation) fail(lock, "rank " + std::to_string(rank) + " joins another collective");
        if (first > last || last > data.size())
            fail(lock, "rank " + std::to_string(rank) + " names elements [" + std::to_string(first) + ", " +
                           std::to_string(last) + ") of " + std::to_string(data.size()));
        m_size = data.size();
        m_operation = op;
        m_buffers[rank] = data;
        m_parts[rank] = {first, last};
        m_arrived_flags[rank] = true;
        m_latest = m_arrived == 0 ? arrival : std::max(m_latest, arrival);
        if (++m_arrived < m_buffers.size()) {
            const std::size_t generation = m_generation;
            m_cv.wait(lock, [&] { return m_generation != generation || m_aborted; });
            if (m_generation == generation) throw collective_aborted("tessera::emulator::collective_group: aborted");
            return m_result_time;
        }
        // The last to arrive computes the round's result, in rank order.
        m_result.resize(m_size);
        if (op == operation::all_gather) {
            std::copy(m_buffers[0].begin(), m_buffers[0].end(), m_result.begin());
            for (std::size_t r = 1; r < m_buffers.size(); ++r)
                std::copy(m_buffers[r].begin() + std::ptrdiff_t(m_parts[r].first),
                          m_buffers[r].begin() + std::ptrdiff_t(m_parts[r].last), m_result.begin() + std::ptrdiff_t(m_parts[r].first));
        } else {
            for (std::size_t i = 0; i < m_size; ++i) {
                T sum = m_buffers[0][i];
                for (std::size_t r = 1; r < m_buffers.size(); ++r) sum += m_buffers[r][i];
                m_result[i] = sum;
            }
        }
        if (m_combine) {
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
            if (m_aborted) throw collective_aborted("tessera::emulator::collective_group: aborted");
        }
        for (std::size_t r = 0; r < m_buffers.size(); ++r) {
            const bool scatter = op == operation::reduce_scatter;
            const std::size_t from = scatter ? m_parts[r].first : 0, to = scatter ? m_parts[r].last : m_size;
            std::copy(m_result.begin() + std::ptrdiff_t(from), m_result.begin() + std::ptrdiff_t(to),
                      m_buffers[r].begin() + std::ptrdiff_t(from));
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

    [[noreturn]] void fail(std::unique_lock<std::mutex>& lock, const std::string& what) {
        m_aborted = true;
        lock.unlock();
        m_cv.notify_all();
        throw std::invalid_argument("tessera::emulator::collective_group: " + what);
    }

    std::mutex m_mutex;
    std::condition_variable m_cv;
    std::vector<std::span<T>> m_buffers;
    std::vector<part> m_parts;
    std::vector<bool> m_arrived_flags;
    operation m_operation = operation::reduce;
    std::size_t m_arrived = 0, m_size = 0, m_generation = 0;
    double m_latest = 0, m_result_time = 0;
    bool m_aborted = false;
    std::function<void(std::span<T>)> m_combine;
    std::vector<T> m_result;
};

}  // namespace tessera::emulator
