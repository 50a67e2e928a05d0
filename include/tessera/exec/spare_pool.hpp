#pragma once
// Objects whose use is over, kept for the next user instead of freed: a stage's per-micro-batch state
// holds every activation its layers write, and a state taken again keeps those buffers (the layers
// reuse a buffer of the right shape), so the micro-batches after the first allocate none.
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace tessera::exec {

/// A pool of spare, default-constructible T. take() hands one out as a `handle` (a unique_ptr) whose
/// destruction, on any thread, gives it back to the pool, which the handle keeps alive; where an
/// exception is unwinding the stack, the object (perhaps half updated) is freed instead.
/// @code
///   auto pool = std::make_shared<spare_pool<state>>();
///   { auto st = spare_pool<state>::take(pool); use(*st); }  // back in the pool
///   auto again = spare_pool<state>::take(pool);             // the same object, as use() left it
/// @endcode
template <class T>
class spare_pool {
public:
    /// Gives an object back to its pool (or deletes it when it has none).
    class give_back {
    public:
        give_back() noexcept = default;
        explicit give_back(std::shared_ptr<spare_pool> pool) noexcept : m_pool(std::move(pool)) {}
        void operator()(T* t) const noexcept {
            if (m_pool == nullptr || std::uncaught_exceptions() > 0)
                delete t;
            else
                m_pool->keep(t);
        }

    private:
        std::shared_ptr<spare_pool> m_pool;
    };
    using handle = std::unique_ptr<T, give_back>;

    spare_pool() = default;
    spare_pool(const spare_pool&) = delete;
    spare_pool& operator=(const spare_pool&) = delete;
    ~spare_pool() = default;

    /// A spare T of `pool`, or a new (value-initialised) one when it has none.
    [[nodiscard]] static handle take(const std::shared_ptr<spare_pool>& pool) {
        std::unique_ptr<T> t;
        {
            const std::lock_guard lock(pool->m_mutex);
            if (!pool->m_spares.empty()) {
                t = std::move(pool->m_spares.back());
                pool->m_spares.pop_back();
            }
        }
        if (t == nullptr) t = std::make_unique<T>();
        return handle(t.release(), give_back(pool));
    }
    /// Spares held now.
    [[nodiscard]] std::size_t size() const {
        const std::lock_guard lock(m_mutex);
        return m_spares.size();
    }

private:
    void keep(T* t) noexcept {
        std::unique_ptr<T> owned(t);
        try {
            const std::lock_guard lock(m_mutex);
            m_spares.push_back(std::move(owned));
        } catch (...) {  // no room to keep it: freed by `owned`, as it would have been without a pool
        }
    }

    mutable std::mutex m_mutex;
    std::vector<std::unique_ptr<T>> m_spares;
};

}  // namespace tessera::exec
