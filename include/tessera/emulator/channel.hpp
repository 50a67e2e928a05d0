#pragma once
// Bounded FIFO between two emulated devices (or a device and the host), counting bytes.
#include <atomic>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <iterator>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include "tessera/emulator/error.hpp"

namespace tessera::emulator {

/// A message that knows its own size in bytes.
template <class T>
concept SizedPayload = requires(const T& v) {
    { v.payload_bytes() } -> std::convertible_to<std::size_t>;
};

/// A contiguous sized range of trivially copyable elements (std::vector<float>, std::string, ...).
template <class T>
concept TrivialContiguousRange = requires(const T& v) {
    { std::data(v) } -> std::convertible_to<const void*>;
    { std::size(v) } -> std::convertible_to<std::size_t>;
} && std::is_pointer_v<decltype(std::data(std::declval<const T&>()))> &&
    std::is_trivially_copyable_v<std::remove_pointer_t<decltype(std::data(std::declval<const T&>()))>>;

/// Bytes a message carries: payload_bytes() if it has one, the elements of a contiguous range of
/// trivially copyable values, otherwise sizeof(T).
template <class T>
[[nodiscard]] std::size_t payload_bytes(const T& v) noexcept {
    if constexpr (SizedPayload<T>) {
        return static_cast<std::size_t>(v.payload_bytes());
    } else if constexpr (TrivialContiguousRange<T>) {
        return std::size(v) * sizeof(*std::data(v));
    } else {
        return sizeof(T);
    }
}

/// send() blocks while full; receive() returns std::nullopt once closed and drained.
/// close() wakes every waiter. Counts messages and bytes sent.
/// @code
///   channel<std::vector<float>> link(4);
///   while (auto a = link.receive()) consume(*a);
/// @endcode
template <class T>
class channel {
    static_assert(std::is_nothrow_move_constructible_v<T>,
                  "tessera::emulator::channel<T>: T must be nothrow move-constructible");

public:
    explicit channel(std::size_t capacity) : m_capacity(capacity) {
        if (capacity == 0)
            throw std::invalid_argument("tessera::emulator::channel: capacity must be at least 1, got 0");
    }
    channel(const channel&) = delete;
    channel& operator=(const channel&) = delete;

    /// Blocks while full; throws channel_closed once closed.
    void send(T value) {
        spin_while([&] { return m_size.load(std::memory_order_acquire) >= m_capacity; });
        std::unique_lock lock(m_mutex);
        m_not_full.wait(lock, [&] { return m_closed || m_queue.size() < m_capacity; });
        if (m_closed) throw channel_closed("tessera::emulator::channel::send: the channel is closed");
        push(lock, std::move(value));
    }

    /// Never blocks: false when full or closed (the value is left untouched).
    bool try_send(T& value) {
        std::unique_lock lock(m_mutex);
        if (m_closed || m_queue.size() >= m_capacity) return false;
        push(lock, std::move(value));
        return true;
    }

    /// Blocks while empty; std::nullopt once closed and drained (a normal end).
    [[nodiscard]] std::optional<T> receive() {
        spin_while([&] { return m_size.load(std::memory_order_acquire) == 0; });
        std::unique_lock lock(m_mutex);
        m_not_empty.wait(lock, [&] { return m_closed || !m_queue.empty(); });
        return pop(lock);
    }

    /// Never blocks: std::nullopt when empty.
    [[nodiscard]] std::optional<T> try_receive() {
        std::unique_lock lock(m_mutex);
        return pop(lock);
    }

    /// Wakes every waiter; later sends throw, receives drain what is left then return nullopt.
    void close() noexcept {
        {
            std::lock_guard lock(m_mutex);
            m_closed = true;
            m_closed_flag.store(true, std::memory_order_release);
        }
        m_not_full.notify_all();
        m_not_empty.notify_all();
    }

    [[nodiscard]] bool closed() const {
        std::lock_guard lock(m_mutex);
        return m_closed;
    }
    [[nodiscard]] std::size_t size() const {
        std::lock_guard lock(m_mutex);
        return m_queue.size();
    }
    [[nodiscard]] std::size_t capacity() const noexcept { return m_capacity; }
    [[nodiscard]] std::size_t messages_sent() const noexcept { return m_messages.load(std::memory_order_relaxed); }
    [[nodiscard]] std::size_t bytes_sent() const noexcept { return m_bytes.load(std::memory_order_relaxed); }

private:
    // A hand-off between threads is far cheaper when the other side is still running: yield a few
    // times before sleeping on the condition variable (a sleep/wake pair costs microseconds).
    template <class Blocked>
    void spin_while(Blocked blocked) const noexcept {
        for (int i = 0; i < spin_limit && blocked() && !m_closed_flag.load(std::memory_order_acquire); ++i)
            std::this_thread::yield();
    }
    static constexpr int spin_limit = 64;

    void push(std::unique_lock<std::mutex>& lock, T&& value) {
        const std::size_t bytes = payload_bytes(value);
        m_queue.push_back(std::move(value));
        m_size.store(m_queue.size(), std::memory_order_release);
        m_messages.fetch_add(1, std::memory_order_relaxed);
        m_bytes.fetch_add(bytes, std::memory_order_relaxed);
        lock.unlock();
        m_not_empty.notify_one();
    }
    std::optional<T> pop(std::unique_lock<std::mutex>& lock) {
        if (m_queue.empty()) return std::nullopt;
        std::optional<T> value(std::move(m_queue.front()));
        m_queue.pop_front();
        m_size.store(m_queue.size(), std::memory_order_release);
        lock.unlock();
        m_not_full.notify_one();
        return value;
    }

    const std::size_t m_capacity;
    mutable std::mutex m_mutex;
    std::condition_variable m_not_full, m_not_empty;
    std::deque<T> m_queue;
    bool m_closed = false;
    std::atomic<std::size_t> m_messages{0}, m_bytes{0};
    std::atomic<std::size_t> m_size{0};     // m_queue.size(), readable without the lock (spinning)
    std::atomic<bool> m_closed_flag{false};
};

}  // namespace tessera::emulator
