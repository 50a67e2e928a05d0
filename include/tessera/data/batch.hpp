#pragma once
// Combined batches handed out as RAII leases from a pool: a batch the user holds is never reused.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "tessera/data/concepts.hpp"

namespace tessera::data {

/// Dataset index of a padded (masked-out) position in a batch.
inline constexpr std::size_t padding_index = std::numeric_limits<std::size_t>::max();

namespace detail {

template <BatchValue T>
struct batch_storage {
    std::vector<T> images;            // batch x C x H x W
    std::vector<label_t> labels;      // batch
    std::vector<std::uint8_t> mask;   // batch: 1 = real sample, 0 = padding
    std::vector<std::size_t> indices; // batch: dataset index, or padding_index
    std::size_t valid = 0;
    std::size_t number = 0;  // position of the batch in its epoch
    std::size_t epoch = 0;
};

/// The shared state of a pool: free buffers. Leases keep it alive, so a lease may outlive its loader.
template <BatchValue T>
class pool_state {
public:
    pool_state(std::size_t batch, sample_shape shape) : m_batch(batch), m_shape(shape) {}

    std::unique_ptr<batch_storage<T>> take() {
        {
            std::lock_guard lock(m_mutex);
            if (!m_free.empty()) {
                auto b = std::move(m_free.back());
                m_free.pop_back();
                return b;
            }
            ++m_allocated;
        }
        auto b = std::make_unique<batch_storage<T>>();
        b->images.resize(m_batch * m_shape.size());
        b->labels.resize(m_batch);
        b->mask.resize(m_batch);
        b->indices.resize(m_batch);
        return b;
    }
    void give_back(std::unique_ptr<batch_storage<T>> b) noexcept {
        std::lock_guard lock(m_mutex);
        m_free.push_back(std::move(b));  // capacity reserved in take(): cannot throw in practice
    }
    [[nodiscard]] std::size_t allocated() const {
        std::lock_guard lock(m_mutex);
        return m_allocated;
    }
    [[nodiscard]] std::size_t batch() const noexcept { return m_batch; }
    [[nodiscard]] sample_shape shape() const noexcept { return m_shape; }
    void reserve_free(std::size_t n) {
        std::lock_guard lock(m_mutex);
        m_free.reserve(n);
    }

private:
    std::size_t m_batch;
    sample_shape m_shape;
    mutable std::mutex m_mutex;
    std::vector<std::unique_ptr<batch_storage<T>>> m_free;
    std::size_t m_allocated = 0;
};

}  // namespace detail

/// One combined batch, owned exclusively by whoever holds the lease; the buffers go back to the
/// pool when the lease is destroyed, and only then can the loader reuse them. Move-only.
/// Layout: `size()` samples, CHW each, consecutive micro-batches (replica-major as the session splits
/// them). With drop_last = false the last batch is padded at its end: `mask()[i] == 0`,
/// `indices()[i] == padding_index`, zero pixels and label 0 there; `valid()` counts the real samples.
/// @code
///   for (auto& batch : loader) {
///       auto x = batch.images();     // std::span<const float>, <const std::uint8_t> or token ids <const std::uint16_t>
///       auto y = batch.labels();
///       kept.push_back(std::move(batch));   // keeping it is safe: the loader never touches it again
///   }
/// @endcode
template <BatchValue T>
class batch_lease {
public:
    using value_type = T;

    batch_lease() = default;
    batch_lease(std::shared_ptr<detail::pool_state<T>> pool, std::unique_ptr<detail::batch_storage<T>> storage) noexcept
        : m_pool(std::move(pool)), m_storage(std::move(storage)) {}
    batch_lease(batch_lease&&) noexcept = default;
    batch_lease& operator=(batch_lease&& other) noexcept {
        if (this != &other) {
            release();
            m_pool = std::move(other.m_pool);
            m_storage = std::move(other.m_storage);
        }
        return *this;
    }
    batch_lease(const batch_lease&) = delete;
    batch_lease& operator=(const batch_lease&) = delete;
    ~batch_lease() { release(); }

    /// False for a default-constructed or moved-from lease.
    [[nodiscard]] explicit operator bool() const noexcept { return m_storage != nullptr; }

    /// Samples in the batch (the combined batch size, padding included).
    [[nodiscard]] std::size_t size() const noexcept { return m_storage->labels.size(); }
    /// Real (unmasked) samples: size() except in a padded last batch.
    [[nodiscard]] std::size_t valid() const noexcept { return m_storage->valid; }
    [[nodiscard]] sample_shape shape() const noexcept { return m_pool->shape(); }
    /// Position of this batch in its epoch, and the epoch.
    [[nodiscard]] std::size_t number() const noexcept { return m_storage->number; }
    [[nodiscard]] std::size_t epoch() const noexcept { return m_storage->epoch; }

    [[nodiscard]] std::span<const T> images() const noexcept { return m_storage->images; }
    [[nodiscard]] std::span<T> images() noexcept { return m_storage->images; }
    /// Sample i of the batch.
    [[nodiscard]] std::span<const T> image(std::size_t i) const noexcept {
        return std::span<const T>(m_storage->images).subspan(i * shape().size(), shape().size());
    }
    [[nodiscard]] std::span<const label_t> labels() const noexcept { return m_storage->labels; }
    [[nodiscard]] std::span<const std::uint8_t> mask() const noexcept { return m_storage->mask; }
    [[nodiscard]] std::span<const std::size_t> indices() const noexcept { return m_storage->indices; }

    /// The raw storage, for the loader that fills it.
    [[nodiscard]] detail::batch_storage<T>& storage() noexcept { return *m_storage; }

private:
    void release() noexcept {
        if (m_storage) m_pool->give_back(std::move(m_storage));
        m_pool.reset();
    }

    std::shared_ptr<detail::pool_state<T>> m_pool;
    std::unique_ptr<detail::batch_storage<T>> m_storage;
};

/// Hands out leases; never blocks: when every buffer is held, it allocates another (so a user who
/// keeps batches costs memory, never correctness). allocated() tells how many buffers exist.
template <BatchValue T>
class batch_pool {
public:
    batch_pool(std::size_t batch, sample_shape shape)
        : m_state(std::make_shared<detail::pool_state<T>>(batch, shape)) {}

    [[nodiscard]] batch_lease<T> acquire() const {  // thread-safe
        auto storage = m_state->take();
        m_state->reserve_free(m_state->allocated());  // so give_back never reallocates
        return batch_lease<T>(m_state, std::move(storage));
    }
    [[nodiscard]] std::size_t allocated() const { return m_state->allocated(); }
    [[nodiscard]] std::size_t batch() const noexcept { return m_state->batch(); }

private:
    std::shared_ptr<detail::pool_state<T>> m_state;
};

}  // namespace tessera::data
