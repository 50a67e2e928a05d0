#pragma once
// A bounded single-producer single-consumer channel without locks (IPU links, infeed, outfeed).
#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <utility>

#include "tessera/emulator/channel.hpp"
#include "tessera/emulator/error.hpp"

namespace tessera::emulator {

/// How a blocked side of an spsc_channel waits. Spinning wins when every thread has a core (a
/// hand-off costs a cache-line transfer, not a wake-up); when threads outnumber cores, a spinning
/// waiter only delays the thread it waits for, so it should sleep at once.
///
/// Batching: a stream of small messages costs the two threads a transfer of the ring's shared cache
/// lines at every message when the waiting side takes each one as soon as it appears. When messages
/// pass faster than one per `fast` (measured between the side's waits), a receiver that finds the
/// ring empty waits for `batch` messages, and a sender that finds it full waits for `batch` free
/// slots, each for at most `batch_wait`; then it takes what there is. Slower streams (a stage with
/// real work between messages) never wait for a batch, so batching adds no latency where a hand-off
/// is on the critical path. 1 turns it off.
struct spin_policy {
    std::chrono::microseconds spin{500};  ///< spin, then yield, for this long before sleeping
    std::size_t batch = 1;                ///< messages (or free slots) a waiting side of a fast stream waits for
    std::chrono::nanoseconds fast{1000};  ///< a stream is fast when its messages come at least this often
    std::chrono::nanoseconds batch_wait{20000};  ///< the longest wait for a batch
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
    explicit spsc_channel(std::size_t capacity, spin_policy spin = {})
        : m_capacity(capacity),
          m_mask(std::bit_ceil(std::max<std::size_t>(capacity, 1)) - 1),
          m_spin(spin.spin),
          m_batch(std::min(spin.batch, capacity)),
          m_fast(spin.fast),
          m_batch_wait(spin.batch_wait) {
        if (capacity == 0)
            throw std::invalid_argument("tessera::emulator::spsc_channel: capacity must be at least 1, got 0");
        if (spin.batch == 0)
            throw std::invalid_argument("tessera::emulator::spsc_channel: spin_policy::batch must be at least 1, got 0");
        m_slots = std::make_unique<slot[]>(m_mask + 1);
    }
    ~spsc_channel() {
        const std::size_t end = m_tail.load(std::memory_order_acquire);
        for (std::size_t i = m_head.load(std::memory_order_acquire); i != end; ++i) std::destroy_at(at(i));
    }
    spsc_channel(const spsc_channel&) = delete;
    spsc_channel& operator=(const spsc_channel&) = delete;

    /// Blocks while full; throws channel_closed once closed. Producer thread only.
    void send(T value) { emplace(std::move(value)); }

    /// send(T(args...)), constructing the message in its slot. Producer thread only.
    template <class... Args>
    void emplace(Args&&... args) {
        const std::size_t tail = m_tail.load(std::memory_order_relaxed);
        if (full_at(tail)) {
            wait_for_batch(m_send_pace, tail, [&] { return room_for(tail, m_batch); });
            wait_until([&] { return !full_at(tail); });
        }
        if (m_closed.load(std::memory_order_acquire))
            throw channel_closed("tessera::emulator::spsc_channel::send: the channel is closed");
        push(tail, std::forward<Args>(args)...);
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
        if (empty_at(head)) {
            wait_for_batch(m_receive_pace, head, [&] { return holds(head, m_batch); });
            wait_until([&] { return !empty_at(head); });
        }
        return try_receive();
    }

    /// receive(), handing the message to f(T&) where it lies in the ring (no copy or move of the
    /// whole message); false once closed and drained. Consumer thread only.
    template <class F>
    bool receive_into(F&& f) {
        const std::size_t head = m_head.load(std::memory_order_relaxed);
        if (empty_at(head)) {
            wait_for_batch(m_receive_pace, head, [&] { return holds(head, m_batch); });
            wait_until([&] { return !empty_at(head); });
            if (empty_at(head)) return false;
        }
        f(*at(head));
        release(head);
        return true;
    }

    /// Never blocks: std::nullopt when empty. Consumer thread only.
    [[nodiscard]] std::optional<T> try_receive() {
        const std::size_t head = m_head.load(std::memory_order_relaxed);
        if (empty_at(head)) return std::nullopt;
        std::optional<T> value(std::move(*at(head)));
        release(head);
        return value;
    }

    /// Never blocks: hands every message in the channel to f(T&&), in order; returns how many.
    /// Consumer thread only.
    template <class F>
    std::size_t drain(F&& f) {
        std::size_t n = 0;
        for (std::size_t head = m_head.load(std::memory_order_relaxed); !empty_at(head); ++head, ++n) {
            f(std::move(*at(head)));
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
    // Whether `n` messages are ready from `head` on (consumer) / `n` slots free from `tail` on (producer).
    [[nodiscard]] bool holds(std::size_t head, std::size_t n) {
        return m_tail_seen - head >= n || (m_tail_seen = m_tail.load(std::memory_order_acquire)) - head >= n;
    }
    [[nodiscard]] bool room_for(std::size_t tail, std::size_t n) {
        return m_head_seen + m_capacity - tail >= n ||
               (m_head_seen = m_head.load(std::memory_order_acquire)) + m_capacity - tail >= n;
    }
    void release(std::size_t head) noexcept {
        std::destroy_at(at(head));
        m_head.store(head + 1, std::memory_order_release);
        wake();
    }
    template <class... Args>
    void push(std::size_t tail, Args&&... args) {
        // Constructs in place without reading the slot: the consumer wrote its cache line last.
        const T* value =
            std::construct_at(reinterpret_cast<T*>(m_slots[tail & m_mask].bytes), std::forward<Args>(args)...);
        const std::size_t bytes = payload_bytes(*value);
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
    // One side's pace: when its last wait ended, and its index then.
    struct pace {
        std::chrono::steady_clock::time_point last_wait{};
        std::size_t index = 0;
    };
    // Before a side waits for one message or slot: if the stream is fast (at least one message per
    // m_fast since this side's last wait), yields until `batch_ready` or m_batch_wait has passed.
    template <class BatchReady>
    void wait_for_batch(pace& p, std::size_t index, BatchReady batch_ready) {
        if (m_batch <= 1) return;
        const auto now = std::chrono::steady_clock::now();
        const bool fast = index > p.index && now - p.last_wait < m_fast * static_cast<long>(index - p.index);
        if (fast) {
            const auto give_up = now + m_batch_wait;
            // Yields between looks: with more threads than cores, the other side may need this core.
            for (unsigned i = 0; !batch_ready() && !m_closed.load(std::memory_order_acquire); ++i) {
                std::this_thread::yield();
                if (i % 4 == 3 && std::chrono::steady_clock::now() > give_up) break;
            }
        }
        p.last_wait = fast ? std::chrono::steady_clock::now() : now;
        p.index = index;
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
    const std::size_t m_mask;  // the ring has a power of two slots (at least m_capacity): an index is a mask away
    const std::chrono::microseconds m_spin;
    const std::size_t m_batch;
    const std::chrono::nanoseconds m_fast, m_batch_wait;
    struct slot {
        alignas(T) unsigned char bytes[sizeof(T)];
    };
    [[nodiscard]] T* at(std::size_t index) noexcept {
        return std::launder(reinterpret_cast<T*>(m_slots[index & m_mask].bytes));
    }
    std::unique_ptr<slot[]> m_slots;  // values live in [m_head, m_tail)
    // Each index on a cache line of its own (the other side reads it), each side's own state on another.
    alignas(64) std::atomic<std::size_t> m_head{0};  // next slot to read: written by the consumer
    alignas(64) std::size_t m_tail_seen = 0;         // the consumer's copy of m_tail
    pace m_receive_pace;
    alignas(64) std::atomic<std::size_t> m_tail{0};  // next slot to write: written by the producer
    alignas(64) std::size_t m_head_seen = 0;         // the producer's copy of m_head
    pace m_send_pace;
    std::atomic<std::size_t> m_messages{0}, m_bytes{0};
    alignas(64) std::atomic<int> m_sleepers{0};
    std::atomic<bool> m_closed{false};
    std::mutex m_sleep_mutex;
    std::condition_variable m_wake;
};

}  // namespace tessera::emulator
