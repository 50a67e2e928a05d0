#pragma once
// Epochs of map-style datasets: loaded in the caller (sync) or ahead of it by workers (async).
#include <algorithm>
#include <atomic>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

#include "tessera/data/detail/loader_context.hpp"

namespace tessera::data {

namespace detail {

/// Loads batch b when the caller asks for it, nothing ahead. With W workers the caller and W - 1
/// helper threads fill the batch's samples j = w, w + W, ... together.
template <class D, class Io>
class map_sync_state final : public epoch_state<Io> {
public:
    map_sync_state(const loader_context<D, Io>& ctx, shard s, std::size_t epoch, std::size_t workers)
        : m_ctx(&ctx), m_producer(ctx, std::move(s), epoch), m_scratch(ctx.shape.size()),
          m_workers(std::max<std::size_t>(1, workers)) {
        try {
            m_helpers.reserve(m_workers - 1);
            for (std::size_t w = 1; w < m_workers; ++w) m_helpers.emplace_back([this, w] { help(w); });
        } catch (...) {
            stop();
            throw;
        }
    }

    ~map_sync_state() override { stop(); }

    std::optional<batch_lease<Io>> next() override {
        if (m_next >= m_producer.batches()) return std::nullopt;
        auto lease = m_ctx->pool.acquire();
        m_producer.begin(lease, m_next);
        if (!m_helpers.empty()) {
            {
                std::lock_guard lock(m_mutex);
                m_job = &lease;
                m_job_batch = m_next;
                m_pending = m_helpers.size();
                ++m_generation;
            }
            m_start.notify_all();
        }
        std::exception_ptr error;
        try {
            m_producer.fill_part(lease, m_next, m_scratch, 0, m_workers);
        } catch (...) {
            error = std::current_exception();
        }
        if (!m_helpers.empty()) {  // wait for the helpers even on error: they write into `lease`
            std::unique_lock lock(m_mutex);
            m_done.wait(lock, [&] { return m_pending == 0; });
            if (!error) error = std::exchange(m_error, nullptr);
        }
        if (error) std::rethrow_exception(error);
        ++m_next;
        return lease;
    }

private:
    void stop() noexcept {
        {
            std::lock_guard lock(m_mutex);
            m_stopping = true;
        }
        m_start.notify_all();
        m_helpers.clear();  // joins
    }

    void help(std::size_t w) {
        run_as_background_thread();
        typename loader_context<D, Io>::scratch scratch(m_ctx->shape.size());
        std::size_t seen = 0;
        for (;;) {
            batch_lease<Io>* job = nullptr;
            std::size_t b = 0;
            {
                std::unique_lock lock(m_mutex);
                m_start.wait(lock, [&] { return m_stopping || m_generation != seen; });
                if (m_stopping) return;
                seen = m_generation;
                job = m_job;
                b = m_job_batch;
            }
            std::exception_ptr error;
            try {
                m_producer.fill_part(*job, b, scratch, w, m_workers);
            } catch (...) {
                error = std::current_exception();
            }
            {
                std::lock_guard lock(m_mutex);
                if (error && !m_error) m_error = error;
                // Drop this thread's reference under the lock, so the caller (who may rethrow and free the
                // exception once m_pending is 0) never races with it.
                error = nullptr;
                if (--m_pending == 0) m_done.notify_one();
            }
        }
    }

    const loader_context<D, Io>* m_ctx;
    map_producer<D, Io> m_producer;
    typename loader_context<D, Io>::scratch m_scratch;
    std::size_t m_workers;
    std::size_t m_next = 0;
    std::mutex m_mutex;
    std::condition_variable m_start, m_done;
    batch_lease<Io>* m_job = nullptr;
    std::size_t m_job_batch = 0, m_pending = 0, m_generation = 0;
    bool m_stopping = false;
    std::exception_ptr m_error;
    std::vector<std::jthread> m_helpers;  // last: started after everything above exists
};

/// Async loading of consecutive epochs by workers that live across them, as PopTorch keeps its
/// loader's workers: batch g of the stream is batch g mod B of epoch first + g / B, so while the
/// caller finishes epoch e the workers already fill the first batches of epoch e + 1, within the
/// ring's depth. The caller takes the batches of one epoch at a time (next_of).
template <class D, class Io>
class map_stream {
public:
    using shard_maker = std::function<shard(std::size_t epoch)>;

    /// Epochs first_epoch, first_epoch + 1, ... (`epochs` of them at most).
    map_stream(const loader_context<D, Io>& ctx, shard_maker make, std::size_t first_epoch, std::size_t workers,
               std::size_t depth, std::size_t epochs = std::numeric_limits<std::size_t>::max())
        : m_ctx(&ctx), m_make(std::move(make)), m_first(first_epoch), m_epochs(epochs), m_ring(depth) {
        auto first = std::make_shared<const map_producer<D, Io>>(ctx, m_make(first_epoch), first_epoch);
        m_batches = first->batches();
        m_producers.emplace_back(first_epoch, std::move(first));
        try {
            m_threads.reserve(workers);
            for (std::size_t w = 0; w < workers; ++w) m_threads.emplace_back([this] { work(); });
        } catch (...) {
            stop();
            throw;
        }
    }
    map_stream(const map_stream&) = delete;
    map_stream& operator=(const map_stream&) = delete;
    ~map_stream() { stop(); }

    /// The epoch whose batch the caller gets next, and whether none of it was handed out yet.
    [[nodiscard]] std::size_t next_epoch() const {
        std::lock_guard lock(m_mutex);
        return m_batches == 0 ? m_first : m_first + m_handed / m_batches;
    }
    [[nodiscard]] bool at_epoch_start() const {
        std::lock_guard lock(m_mutex);
        return m_batches == 0 || m_handed % m_batches == 0;
    }

    /// The next batch of `epoch`; std::nullopt once all of it was handed out. Rethrows a worker's exception.
    std::optional<batch_lease<Io>> next_of(std::size_t epoch) {
        std::unique_lock lock(m_mutex);
        if (m_error) std::rethrow_exception(m_error);
        if (m_batches == 0 || m_first + m_handed / m_batches != epoch) return std::nullopt;
        auto& slot = m_ring[m_handed % m_ring.size()];
        m_ready.wait(lock, [&] { return m_error || slot.has_value(); });
        if (m_error) std::rethrow_exception(m_error);
        batch_lease<Io> lease = std::move(*slot);
        slot.reset();
        ++m_handed;
        // An epoch fully handed out was fully filled: no worker needs its order any more.
        std::erase_if(m_producers, [&](const auto& p) { return p.first < m_first + m_handed / m_batches; });
        lock.unlock();
        m_space.notify_one();
        return lease;
    }

private:
    void stop() noexcept {
        {
            std::lock_guard lock(m_mutex);
            m_stopping = true;
        }
        m_space.notify_all();
        m_threads.clear();  // joins
    }

    // The order of `epoch`: made once, by the first worker that needs it (outside the lock: a shuffle).
    std::shared_ptr<const map_producer<D, Io>> producer(std::unique_lock<std::mutex>& lock, std::size_t epoch) {
        const auto find = [&]() -> std::shared_ptr<const map_producer<D, Io>> {
            for (const auto& [e, p] : m_producers)
                if (e == epoch) return p;
            return nullptr;
        };
        if (auto p = find()) return p;
        lock.unlock();
        auto made = std::make_shared<const map_producer<D, Io>>(*m_ctx, m_make(epoch), epoch);
        lock.lock();
        if (auto p = find()) return p;
        m_producers.emplace_back(epoch, made);
        return made;
    }

    void work() {
        run_as_background_thread();
        typename loader_context<D, Io>::scratch scratch(m_ctx->shape.size());
        for (;;) {
            std::size_t g = 0;
            std::shared_ptr<const map_producer<D, Io>> p;
            {
                std::unique_lock lock(m_mutex);
                const auto done = [&] { return m_batches > 0 && m_claimed / m_batches >= m_epochs; };
                m_space.wait(lock, [&] {
                    return m_stopping || m_error || done() || (m_batches > 0 && m_claimed < m_handed + m_ring.size());
                });
                if (m_stopping || m_error || done()) return;
                g = m_claimed++;
                p = producer(lock, m_first + g / m_batches);
            }
            // The reference to the epoch's producer is dropped under the lock, after the batch is in the
            // ring: whichever thread frees the producer (the caller erasing a finished epoch or its last
            // worker) does so after every other worker's fill, by the mutex as well as by the count.
            try {
                auto lease = m_ctx->pool.acquire();
                p->fill(lease, g % m_batches, scratch);
                std::lock_guard lock(m_mutex);
                m_ring[g % m_ring.size()].emplace(std::move(lease));
                p.reset();
            } catch (...) {
                {
                    std::lock_guard lock(m_mutex);
                    if (!m_error) m_error = std::current_exception();
                    p.reset();
                }
                m_space.notify_all();
            }
            m_ready.notify_one();
        }
    }

    const loader_context<D, Io>* m_ctx;
    shard_maker m_make;
    std::size_t m_first, m_epochs, m_batches = 0;
    mutable std::mutex m_mutex;
    std::condition_variable m_space, m_ready;
    std::vector<std::optional<batch_lease<Io>>> m_ring;
    std::vector<std::pair<std::size_t, std::shared_ptr<const map_producer<D, Io>>>> m_producers;
    std::size_t m_handed = 0, m_claimed = 0;
    bool m_stopping = false;
    std::exception_ptr m_error;
    std::vector<std::jthread> m_threads;  // last: started after everything above exists
};

/// One epoch loaded ahead of the caller by its own workers (an explicit epoch(e)): a stream of one
/// epoch, whose workers stop with it. Batch b goes to ring slot b mod depth and may start only once
/// batch b - depth has been handed out, so the ring never holds more than `depth` batches and the
/// caller receives them in order whatever the timing.
template <class D, class Io>
class map_async_state final : public epoch_state<Io> {
public:
    map_async_state(const loader_context<D, Io>& ctx, shard s, std::size_t epoch, std::size_t workers, std::size_t depth)
        : m_epoch(epoch),
          m_stream(ctx, [first = std::make_shared<shard>(std::move(s))](std::size_t) { return std::move(*first); }, epoch,
                   workers, depth, 1) {}
    std::optional<batch_lease<Io>> next() override { return m_stream.next_of(m_epoch); }

private:
    std::size_t m_epoch;
    map_stream<D, Io> m_stream;
};

/// One epoch of a map_stream, as an epoch_state (the stream, not the epoch, owns the workers).
template <class D, class Io>
class map_stream_epoch final : public epoch_state<Io> {
public:
    map_stream_epoch(map_stream<D, Io>& stream, std::size_t epoch) noexcept : m_stream(&stream), m_epoch(epoch) {}
    std::optional<batch_lease<Io>> next() override { return m_stream->next_of(m_epoch); }

private:
    map_stream<D, Io>* m_stream;
    std::size_t m_epoch;
};

// ---- iterable datasets ---------------------------------------------------------------------------


}  // namespace detail

}  // namespace tessera::data
