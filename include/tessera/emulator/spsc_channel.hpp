#pragma once
// A bounded single-producer single-consumer channel without locks (IPU links, infeed, outfeed).
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <utility>

#include "tessera/emulator/channel.hpp"
#include "tessera/emulator/error.hpp"

namespace tessera::emulator {

/// The same contract as channel<T> (send blocks while full and throws channel_closed after close();
/// receive returns std::nullopt once closed and drained; close() wakes every waiter; bytes counted),
/// for exactly one sending thread and one receiving thread: a ring of slots indexed by two atomic
/// counters. A blocked side spins briefly, then sleeps on an atomic wait that the other side's next
/// push, pop or close() ends.
/// @code
///   spsc_channel<std::vector<float>> link(4);   // IPU 0 sends, IPU 1 receives
/// @endcode
template <class T>
class spsc_channel {
    static_assert(std::is_nothrow_move_constructible_v<T>,
                  "tessera::emulator::spsc_channel<T>: T must be nothrow move-constructible");

public:
    explicit spsc_channel(std::size_t capacity) : m_capacity(capacity) {
        if (capacity == 0)
            throw std::invalid_argument("tessera::emulator::spsc_channel: capacity must be at least 1, got 0");
        m_slots = std::make_unique<std::optional<T>[]>(capacity);
    }
    spsc_channel(const spsc_channel&) = delete;
    spsc_channel& operator=(const spsc_channel&) = delete;

    /// Blocks while full; throws channel_closed once closed. Producer thread only.
    void send(T value) {
        const std::size_t tail = m_tail.load(std::memory_order_relaxed);
        wait_until([&] { return tail - m_head.load(std::memory_order_acquire) < m_capacity; });
        if (m_closed.load(std::memory_order_acquire))
            throw channel_closed("tessera::emulator::spsc_channel::send: the channel is closed");
        push(tail, std::move(value));
    }

    /// Never blocks: false when full or closed (the value is left untouched).
    bool try_send(T& value) {
        const std::size_t tail = m_tail.load(std::memory_order_relaxed);
        if (m_closed.load(std::memory_order_acquire) || tail - m_head.load(std::memory_order_acquire) >= m_capacity)
            return false;
        push(tail, std::move(value));
        return true;
    }

    /// Blocks while empty; std::nullopt once closed and drained. Consumer thread only.
    [[nodiscard]] std::optional<T> receive() {
        const std::size_t head = m_head.load(std::memory_order_relaxed);
        wait_until([&] { return m_tail.load(std::memory_order_acquire) != head; });
        return try_receive();
    }

    /// Never blocks: std::nullopt when empty.
    [[nodiscard]] std::optional<T> try_receive() {
        const std::size_t head = m_head.load(std::memory_order_relaxed);
        if (m_tail.load(std::memory_order_acquire) == head) return std::nullopt;
        auto& slot = m_slots[head % m_capacity];
        std::optional<T> value(std::move(*slot));
        slot.reset();
        m_head.store(head + 1, std::memory_order_release);
        wake();
        return value;
    }

    /// Wakes both sides; later sends throw, receives drain what is left then return nullopt. Any thread.
    void close() noexcept {
        m_closed.store(true, std::memory_order_release);
        m_events.fetch_add(1, std::memory_order_acq_rel);
        m_events.notify_all();
    }

    [[nodiscard]] bool closed() const noexcept { return m_closed.load(std::memory_order_acquire); }
    [[nodiscard]] std::size_t size() const noexcept {
        return m_tail.load(std::memory_order_acquire) - m_head.load(std::memory_order_acquire);
    }
    [[nodiscard]] std::size_t capacity() const noexcept { return m_capacity; }
    [[nodiscard]] std::size_t messages_sent() const noexcept { return m_messages.load(std::memory_order_relaxed); }
    [[nodiscard]] std::size_t bytes_sent() const noexcept { return m_bytes.load(std::memory_order_relaxed); }

private:
    void push(std::size_t tail, T&& value) {
        const std::size_t bytes = payload_bytes(value);
        m_slots[tail % m_capacity].emplace(std::move(value));
        m_messages.fetch_add(1, std::memory_order_relaxed);
        m_bytes.fetch_add(bytes, std::memory_order_relaxed);
        m_tail.store(tail + 1, std::memory_order_release);
        wake();
    }
    // seq_cst on the event counter and the sleeper count: a store-then-load on each side (Dekker),
    // so either the waker sees the sleeper or the sleeper sees the event.
    void wake() noexcept {
        m_events.fetch_add(1, std::memory_order_seq_cst);
        if (m_sleepers.load(std::memory_order_seq_cst) > 0) m_events.notify_all();
    }
    // Returns when ready() or closed. Spins, then yields for up to spin_time, and only then sleeps
    // until the event counter moves (every push, pop and close moves it). Staying runnable through
    // the short waits of a pipeline matters: threads that sleep at every hand-off are woken on the
    // waker's CPU, and the stages of a pipeline then share one core while the other is free.
    template <class Ready>
    void wait_until(Ready ready) {
        for (int i = 0; i < 64; ++i)
            if (ready() || m_closed.load(std::memory_order_acquire)) return;
        const auto give_up = std::chrono::steady_clock::now() + spin_time;
        for (unsigned i = 0;; ++i) {
            if (ready() || m_closed.load(std::memory_order_acquire)) return;
            std::this_thread::yield();
            if (i % 16 == 15 && std::chrono::steady_clock::now() > give_up) break;
        }
        for (;;) {
            const std::uint32_t seen = m_events.load(std::memory_order_acquire);
            if (ready() || m_closed.load(std::memory_order_acquire)) return;
            m_sleepers.fetch_add(1, std::memory_order_seq_cst);
            // Re-check after announcing the sleep: a wake() that missed the announcement moved m_events.
            if (m_events.load(std::memory_order_seq_cst) == seen) m_events.wait(seen, std::memory_order_acquire);
            m_sleepers.fetch_sub(1, std::memory_order_seq_cst);
        }
    }
    static constexpr std::chrono::microseconds spin_time{500};

    const std::size_t m_capacity;
    std::unique_ptr<std::optional<T>[]> m_slots;
    alignas(64) std::atomic<std::size_t> m_head{0};  // next slot to read: written by the consumer
    alignas(64) std::atomic<std::size_t> m_tail{0};  // next slot to write: written by the producer
    alignas(64) std::atomic<std::uint32_t> m_events{0};
    std::atomic<int> m_sleepers{0};
    std::atomic<bool> m_closed{false};
    std::atomic<std::size_t> m_messages{0}, m_bytes{0};
};

}  // namespace tessera::emulator
