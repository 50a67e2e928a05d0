#pragma once
// A bounded single-producer single-consumer channel without locks (IPU links, infeed, outfeed).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <utility>

#include "tessera/emulator/channel.hpp"
#include "tessera/emulator/error.hpp"

namespace tessera::emulator {

/// How long a blocked side of an spsc_channel stays runnable before it sleeps. Spinning wins when
/// every thread has a core (a hand-off costs a cache-line transfer, not a wake-up); when threads
/// outnumber cores, a spinning waiter only delays the thread it waits for, so it should sleep at once.
struct spin_policy {
    std::chrono::microseconds spin{500};  ///< spin, then yield, for this long before sleeping
    [[nodiscard]] static constexpr spin_policy sleep_at_once() noexcept { return {std::chrono::microseconds{0}}; }
};

/// The same contract as channel<T> (send blocks while full and throws channel_closed after close();
/// receive returns std::nullopt once closed and drained; close() wakes every waiter; bytes counted),
/// for exactly one sending thread and one receiving thread: a ring of slots indexed by two atomic
/// counters, each side keeping a private copy of the other's counter so that a stream of messages
/// moves cache lines only when the ring looks full or empty. A blocked side spins (spin_policy),
/// then sleeps on a condition variable; the other side pays for a wake-up only when someone sleeps.
/// @code
///   spsc_channel<std::vector<float>> link(4);   // IPU 0 sends, IPU 1 receives
/// @endcode
template <class T>
class spsc_channel {
    static_assert(std::is_nothrow_move_constructible_v<T>,
                  "tessera::emulator::spsc_channel<T>: T must be nothrow move-constructible");

public:
    explicit spsc_channel(std::size_t capacity, spin_policy spin = {}) : m_capacity(capacity), m_spin(spin.spin) {
        if (capacity == 0)
            throw std::invalid_argument("tessera::emulator::spsc_channel: capacity must be at least 1, got 0");
        m_slots = std::make_unique<std::optional<T>[]>(capacity);
    }
    spsc_channel(const spsc_channel&) = delete;
    spsc_channel& operator=(const spsc_channel&) = delete;

    /// Blocks while full; throws channel_closed once closed. Producer thread only.
    void send(T value) {
        const std::size_t tail = m_tail.load(std::memory_order_relaxed);
        if (full_at(tail)) wait_until([&] { return !full_at(tail); });
        if (m_closed.load(std::memory_order_acquire))
            throw channel_closed("tessera::emulator::spsc_channel::send: the channel is closed");
        push(tail, std::move(value));
    }

    /// Never blocks: false when full or closed (the value is left untouched). Producer thread only.
    bool try_send(T& value) {
        const std::size_t tail = m_tail.load(std::memory_order_relaxed);
        if (m_closed.load(std::memory_order_acquire) || full_at(tail)) return false;
        push(tail, std::move(value));
        return true;
    }

    /// Blocks while empty; std::nullopt once closed and drained. Consumer thread only.
    [[nodiscard]] std::optional<T> receive() {
        const std::size_t head = m_head.load(std::memory_order_relaxed);
        if (empty_at(head)) wait_until([&] { return !empty_at(head); });
        return try_receive();
    }

    /// Never blocks: std::nullopt when empty. Consumer thread only.
    [[nodiscard]] std::optional<T> try_receive() {
        const std::size_t head = m_head.load(std::memory_order_relaxed);
        if (empty_at(head)) return std::nullopt;
        std::optional<T> value(std::move(*m_slots[head % m_capacity]));
        release(head);
        return value;
    }

    /// Never blocks: hands every message in the channel to f(T&&), in order; returns how many.
    /// Consumer thread only.
    template <class F>
    std::size_t drain(F&& f) {
        std::size_t n = 0;
        for (std::size_t head = m_head.load(std::memory_order_relaxed); !empty_at(head); ++head, ++n) {
            f(std::move(*m_slots[head % m_capacity]));
            release(head);
        }
        return n;
    }

    /// Wakes both sides; later sends throw, receives drain what is left then return nullopt. Any thread.
    void close() noexcept {
        std::lock_guard lock(m_sleep_mutex);  // a side about to sleep either sees m_closed or is woken
        m_closed.store(true, std::memory_order_release);
        m_wake.notify_all();
    }

    [[nodiscard]] bool closed() const noexcept { return m_closed.load(std::memory_order_acquire); }
    [[nodiscard]] std::size_t size() const noexcept {
        return m_tail.load(std::memory_order_acquire) - m_head.load(std::memory_order_acquire);
    }
    [[nodiscard]] std::size_t capacity() const noexcept { return m_capacity; }
    [[nodiscard]] std::size_t messages_sent() const noexcept { return m_messages.load(std::memory_order_relaxed); }
    [[nodiscard]] std::size_t bytes_sent() const noexcept { return m_bytes.load(std::memory_order_relaxed); }

private:
    // Producer side: whether the ring is full before slot `tail` (re-reading the consumer's index only
    // when the private copy says so).
    [[nodiscard]] bool full_at(std::size_t tail) {
        return tail - m_head_seen >= m_capacity && tail - (m_head_seen = m_head.load(std::memory_order_acquire)) >= m_capacity;
    }
    // Consumer side: whether slot `head` is still unwritten (re-reading the producer's index only
    // when the private copy says so), and freeing it once its value has been moved out.
    [[nodiscard]] bool empty_at(std::size_t head) {
        return m_tail_seen == head && (m_tail_seen = m_tail.load(std::memory_order_acquire)) == head;
    }
    void release(std::size_t head) noexcept {
        m_slots[head % m_capacity].reset();
        m_head.store(head + 1, std::memory_order_release);
        wake();
    }
    void push(std::size_t tail, T&& value) {
        const std::size_t bytes = payload_bytes(value);
        m_slots[tail % m_capacity].emplace(std::move(value));
        // Only the producer writes the counters: a load and a store, no locked instruction.
        m_messages.store(m_messages.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        m_bytes.store(m_bytes.load(std::memory_order_relaxed) + bytes, std::memory_order_relaxed);
        m_tail.store(tail + 1, std::memory_order_release);
        wake();
    }
    // Wakes a sleeping other side. No fence on this path (it runs for every message): the mover reads
    // the sleeper count without ordering it after its index store, so in a window of a few
    // nanoseconds it can miss a side that is just going to sleep. That side re-checks the indices
    // under the mutex and sleeps at most missed_wake_timeout before checking again, so a missed
    // wake-up costs time, never progress.
    void wake() noexcept {
        if (m_sleepers.load(std::memory_order_relaxed) > 0) {
            std::lock_guard lock(m_sleep_mutex);
            m_wake.notify_all();
        }
    }
    // Returns when ready() or closed. Spins, then yields for up to m_spin, and only then sleeps.
    // Staying runnable through the short waits of a pipeline matters when each thread has a core:
    // threads that sleep at every hand-off are woken on the waker's CPU, and the stages then share
    // one core while the other is free.
    template <class Ready>
    void wait_until(Ready ready) {
        for (int i = 0; i < 64; ++i)
            if (ready() || m_closed.load(std::memory_order_acquire)) return;
        if (m_spin.count() > 0) {
            const auto give_up = std::chrono::steady_clock::now() + m_spin;
            for (unsigned i = 0;; ++i) {
                if (ready() || m_closed.load(std::memory_order_acquire)) return;
                std::this_thread::yield();
                if (i % 16 == 15 && std::chrono::steady_clock::now() > give_up) break;
            }
        }
        std::unique_lock lock(m_sleep_mutex);
        m_sleepers.fetch_add(1, std::memory_order_seq_cst);
        while (!ready() && !m_closed.load(std::memory_order_acquire))
            m_wake.wait_for(lock, missed_wake_timeout);
        m_sleepers.fetch_sub(1, std::memory_order_relaxed);
    }
    static constexpr std::chrono::microseconds missed_wake_timeout{1000};

    const std::size_t m_capacity;
    const std::chrono::microseconds m_spin;
    std::unique_ptr<std::optional<T>[]> m_slots;
    alignas(64) std::atomic<std::size_t> m_head{0};  // next slot to read: written by the consumer
    std::size_t m_tail_seen = 0;                      // the consumer's copy of m_tail
    alignas(64) std::atomic<std::size_t> m_tail{0};  // next slot to write: written by the producer
    std::size_t m_head_seen = 0;                      // the producer's copy of m_head
    std::atomic<std::size_t> m_messages{0}, m_bytes{0};
    alignas(64) std::atomic<int> m_sleepers{0};
    std::atomic<bool> m_closed{false};
    std::mutex m_sleep_mutex;
    std::condition_variable m_wake;
};

}  // namespace tessera::emulator
