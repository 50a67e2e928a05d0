#pragma once
// A bounded blocking queue between the loader's threads, closable so that no one waits forever.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>

namespace tessera::data::detail {

/// push() blocks while full and returns false once closed; pop() blocks while empty and returns
/// std::nullopt once closed and drained. close() wakes every waiter (oneTBB's abort()).
template <class T>
class bounded_queue {
public:
    explicit bounded_queue(std::size_t capacity) : m_capacity(capacity == 0 ? 1 : capacity) {}

    bool push(T value) {
        std::unique_lock lock(m_mutex);
        m_not_full.wait(lock, [&] { return m_closed || m_items.size() < m_capacity; });
        if (m_closed) return false;
        m_items.push_back(std::move(value));
        lock.unlock();
        m_not_empty.notify_one();
        return true;
    }

    std::optional<T> pop() {
        std::unique_lock lock(m_mutex);
        m_not_empty.wait(lock, [&] { return m_closed || !m_items.empty(); });
        if (m_items.empty()) return std::nullopt;
        std::optional<T> value(std::move(m_items.front()));
        m_items.pop_front();
        lock.unlock();
        m_not_full.notify_one();
        return value;
    }

    void close() noexcept {
        {
            std::lock_guard lock(m_mutex);
            m_closed = true;
        }
        m_not_full.notify_all();
        m_not_empty.notify_all();
    }

private:
    std::size_t m_capacity;
    std::mutex m_mutex;
    std::condition_variable m_not_full, m_not_empty;
    std::deque<T> m_items;
    bool m_closed = false;
};

}  // namespace tessera::data::detail
