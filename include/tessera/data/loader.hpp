#pragma once
// data_loader: combined batches from a dataset, as poptorch.DataLoader yields them — shuffled with a
// seed, sharded by (rank, size), loaded in the caller (sync) or ahead of it by worker threads (async,
// async_rebatched), normalised on the host (float I/O) or left as bytes (8-bit I/O).
#include <algorithm>
#include <atomic>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iterator>
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

#include "tessera/data/augment.hpp"
#include "tessera/data/batch.hpp"
#include "tessera/data/concepts.hpp"
#include "tessera/data/error.hpp"
#include "tessera/data/normalize.hpp"
#include "tessera/data/queue.hpp"
#include "tessera/data/random.hpp"
#include "tessera/data/sampler.hpp"

namespace tessera::data {

/// How batches are produced (PopTorch's DataLoaderMode).
enum class loader_mode {
    sync,            ///< when the caller asks for the next batch, nothing ahead; with num_workers > 1 the
                     ///< caller and num_workers - 1 helpers split each batch (map-style datasets)
    async,           ///< worker threads fill a prefetch ring of `prefetch_depth` batches ahead of the caller
    async_rebatched  ///< workers load single samples and the loader batches them (no per-worker tail loss
                     ///< on iterable datasets); on map-style datasets the same as async
};

/// Anything that knows the combined batch, e.g. config::batching (micro_batch x D x G x R_local).
template <class B>
concept Batching = requires(const B& b) {
    { b.combined_batch() } -> std::convertible_to<std::size_t>;
};

/// The loader's settings; the defaults are PopTorch's (drop_last = true, no shuffle, sync).
struct loader_options {
    bool shuffle = false;
    std::uint64_t seed = 0;          ///< same seed, same order and augmentation on every machine
    bool drop_last = true;           ///< false: the last batch is padded and masked instead
    std::size_t num_workers = 0;     ///< loading threads (async modes: 0 means 1; sync: helpers, see loader_mode)
    loader_mode mode = loader_mode::sync;
    std::size_t prefetch_depth = 3;  ///< batches the async ring holds ahead (PopTorch's default: 3)
    std::size_t rank = 0;            ///< this process (instance) ...
    std::size_t size = 1;            ///< ... of this many; each reads its own shard
    normalization normalize = {};    ///< host side with float I/O; with 8-bit I/O the device applies it
    augmentation augment = {};       ///< applied on the host before normalisation, seeded per sample
    std::optional<sample_shape> expected_shape = {};  ///< the sample shape the model accepts
};

namespace detail {

/// Loader threads run as SCHED_BATCH on Linux: CPU-bound background work that does not preempt the
/// thread that woke it. Without it, on busy shared cores, each hand-out (which wakes a worker to load
/// the next batch) lets the worker preempt the caller for a whole batch's loading, and the device waits.
inline void run_as_background_thread() noexcept {
#if defined(__linux__)
    sched_param param{};
    param.sched_priority = 0;
    (void)pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);  // unprivileged; best effort
#endif
}

/// What every epoch's producers share: settings, the pool and the per-sample pipeline.
template <class D, class Io>
struct loader_context {
    using raw_type = typename D::value_type;

    const D* dataset;
    std::size_t batch;
    sample_shape shape;
    std::size_t classes;
    loader_options options;
    affine_channels affine;
    batch_pool<Io> pool;

    /// Per-thread scratch: the raw sample and the augmentation's copy.
    struct scratch {
        std::vector<raw_type> raw, tmp;
        explicit scratch(std::size_t n) : raw(n), tmp(n) {}
    };

    /// raw (one sample, as read) -> out: augment with the sample's own generator, then normalise or copy.
    void finish(scratch& s, std::span<Io> out, std::uint64_t sample_key, std::size_t epoch) const {
        std::span<raw_type> raw(s.raw);
        if (!options.augment.empty()) {
            splitmix64 g(mix_seed(mix_seed(options.seed ^ 0xA0C'0000'0000ull, epoch), sample_key));
            options.augment(raw, shape, g, std::span<raw_type>(s.tmp));
        }
        if constexpr (std::is_same_v<Io, std::uint8_t>)
            std::copy(raw.begin(), raw.end(), out.begin());  // 8-bit I/O: the device normalises
        else
            apply_affine<raw_type, Io>(std::span<const raw_type>(raw), shape, affine, out);
    }

    label_t check_label(label_t y, std::size_t where) const {
        if (y < 0 || static_cast<std::size_t>(y) >= classes)
            throw label_error("dataset given to data_loader", where, "label " + std::to_string(y) + " of sample " + std::to_string(where),
                              "a label in [0, " + std::to_string(classes) + ")");
        return y;
    }

    static void pad(batch_storage<Io>& b, std::size_t j, std::size_t n) {
        std::fill_n(b.images.begin() + static_cast<std::ptrdiff_t>(j * n), n, static_cast<Io>(0.0f));
        b.labels[j] = 0;
        b.mask[j] = 0;
        b.indices[j] = padding_index;
    }
};

template <class Io>
struct epoch_state {
    virtual ~epoch_state() = default;
    virtual std::optional<batch_lease<Io>> next() = 0;
};

// ---- map-style datasets -------------------------------------------------------------------------

template <class D, class Io>
class map_producer {
public:
    map_producer(const loader_context<D, Io>& ctx, shard s, std::size_t epoch) noexcept
        : m_ctx(&ctx), m_shard(std::move(s)), m_epoch(epoch) {}

    [[nodiscard]] std::size_t batches() const noexcept { return m_shard.batches; }

    /// Sets the batch's header (number, epoch, real samples) before its samples are filled.
    void begin(batch_lease<Io>& lease, std::size_t b) const noexcept {
        auto& out = lease.storage();
        const std::size_t n = m_shard.indices.size(), first = std::min(n, b * m_ctx->batch);
        out.number = b;
        out.epoch = m_epoch;
        out.valid = std::min(m_ctx->batch, n - first);
    }

    /// Fills samples first, first + stride, ... of batch b (several threads may fill disjoint ones).
    void fill_part(batch_lease<Io>& lease, std::size_t b, typename loader_context<D, Io>::scratch& s, std::size_t first,
                   std::size_t stride) const {
        auto& out = lease.storage();
        const std::size_t n = m_ctx->shape.size();
        for (std::size_t j = first; j < m_ctx->batch; j += stride) {
            const std::size_t pos = b * m_ctx->batch + j;
            if (pos >= m_shard.indices.size()) {
                loader_context<D, Io>::pad(out, j, n);
                continue;
            }
            const std::size_t index = m_shard.indices[pos];
            const label_t y = m_ctx->check_label(m_ctx->dataset->read(index, std::span(s.raw)), index);
            m_ctx->finish(s, std::span<Io>(out.images).subspan(j * n, n), index, m_epoch);
            out.labels[j] = y;
            out.mask[j] = 1;
            out.indices[j] = index;
        }
    }

    void fill(batch_lease<Io>& lease, std::size_t b, typename loader_context<D, Io>::scratch& s) const {
        begin(lease, b);
        fill_part(lease, b, s, 0, 1);
    }

private:
    const loader_context<D, Io>* m_ctx;
    shard m_shard;
    std::size_t m_epoch;
};

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

/// Workers claim batch numbers in order and fill them; batch b goes to ring slot b mod depth and may
/// start only once batch b - depth has been handed out, so the ring never holds more than `depth`
/// batches and the caller receives them in order whatever the timing.
template <class D, class Io>
class map_async_state final : public epoch_state<Io> {
public:
    map_async_state(const loader_context<D, Io>& ctx, shard s, std::size_t epoch, std::size_t workers, std::size_t depth)
        : m_ctx(&ctx), m_producer(ctx, std::move(s), epoch), m_ring(depth) {
        try {
            m_threads.reserve(workers);
            for (std::size_t w = 0; w < workers; ++w) m_threads.emplace_back([this] { work(); });
        } catch (...) {  // a thread that could not start: stop those that did before unwinding
            stop();
            throw;
        }
    }

    ~map_async_state() override { stop(); }

    std::optional<batch_lease<Io>> next() override {
        std::unique_lock lock(m_mutex);
        if (m_error) std::rethrow_exception(m_error);
        if (m_handed >= m_producer.batches()) return std::nullopt;
        auto& slot = m_ring[m_handed % m_ring.size()];
        m_ready.wait(lock, [&] { return m_error || slot.has_value(); });
        if (m_error) std::rethrow_exception(m_error);
        batch_lease<Io> lease = std::move(*slot);
        slot.reset();
        ++m_handed;
        lock.unlock();
        m_space.notify_one();  // one more batch may start: wake one worker, not all of them
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

    void work() {
        run_as_background_thread();
        typename loader_context<D, Io>::scratch scratch(m_ctx->shape.size());
        for (;;) {
            std::size_t b = 0;
            {
                std::unique_lock lock(m_mutex);
                m_space.wait(lock, [&] {
                    return m_stopping || m_error || m_claimed >= m_producer.batches() || m_claimed < m_handed + m_ring.size();
                });
                if (m_stopping || m_error || m_claimed >= m_producer.batches()) return;
                b = m_claimed++;
            }
            try {
                auto lease = m_ctx->pool.acquire();
                m_producer.fill(lease, b, scratch);
                std::lock_guard lock(m_mutex);
                m_ring[b % m_ring.size()].emplace(std::move(lease));
            } catch (...) {
                {
                    std::lock_guard lock(m_mutex);
                    if (!m_error) m_error = std::current_exception();
                }
                m_space.notify_all();  // the other workers stop too
            }
            m_ready.notify_one();  // the caller is the only one waiting for batches
        }
    }

    const loader_context<D, Io>* m_ctx;
    map_producer<D, Io> m_producer;
    std::mutex m_mutex;
    std::condition_variable m_space;  // workers wait for a free slot in the window
    std::condition_variable m_ready;  // the caller waits for the next batch
    std::vector<std::optional<batch_lease<Io>>> m_ring;
    std::size_t m_handed = 0, m_claimed = 0;
    bool m_stopping = false;
    std::exception_ptr m_error;
    std::vector<std::jthread> m_threads;  // last: started after everything above exists
};

// ---- iterable datasets ---------------------------------------------------------------------------

/// A worker's copy of an iterable dataset, restarted on its part.
template <class D, class Io>
class stream_reader {
public:
    stream_reader(const loader_context<D, Io>& ctx, std::size_t part, std::size_t parts, std::size_t epoch)
        : m_ctx(&ctx), m_stream(*ctx.dataset), m_part(part), m_epoch(epoch), m_scratch(ctx.shape.size()) {
        m_stream.reset(part, parts);
    }

    /// The next sample into `out`; false at the end of the part.
    bool read(std::span<Io> out, label_t& label, std::size_t& ordinal) {
        auto y = m_stream.next(std::span(m_scratch.raw));
        if (!y) return false;
        ordinal = m_count++;
        label = m_ctx->check_label(*y, ordinal);
        m_ctx->finish(m_scratch, out, (std::uint64_t{m_part} << 40) ^ ordinal, m_epoch);
        return true;
    }

    /// Fills a whole batch from this stream; returns the number of real samples (the rest padded).
    std::size_t fill(batch_lease<Io>& lease, std::size_t number) {
        auto& out = lease.storage();
        const std::size_t n = m_ctx->shape.size();
        out.number = number;
        out.epoch = m_epoch;
        out.valid = 0;
        for (std::size_t j = 0; j < m_ctx->batch; ++j) {
            label_t y = 0;
            std::size_t ordinal = 0;
            if (out.valid == j && read(std::span<Io>(out.images).subspan(j * n, n), y, ordinal)) {
                out.labels[j] = y;
                out.mask[j] = 1;
                out.indices[j] = ordinal;
                ++out.valid;
            } else {
                loader_context<D, Io>::pad(out, j, n);
            }
        }
        return out.valid;
    }

private:
    const loader_context<D, Io>* m_ctx;
    D m_stream;
    std::size_t m_part;
    std::size_t m_epoch;
    typename loader_context<D, Io>::scratch m_scratch;
    std::size_t m_count = 0;
};

/// Whether a batch with `valid` real samples is handed out: a full one always, a partial one only
/// without drop_last, an empty one never.
[[nodiscard]] inline bool keep_batch(std::size_t valid, std::size_t batch, bool drop_last) noexcept {
    return valid == batch || (valid > 0 && !drop_last);
}

template <class D, class Io>
class stream_sync_state final : public epoch_state<Io> {
public:
    stream_sync_state(const loader_context<D, Io>& ctx, std::size_t epoch)
        : m_ctx(&ctx), m_reader(ctx, ctx.options.rank, ctx.options.size, epoch) {}

    std::optional<batch_lease<Io>> next() override {
        if (m_done) return std::nullopt;
        auto lease = m_ctx->pool.acquire();
        const std::size_t valid = m_reader.fill(lease, m_number);
        if (valid < m_ctx->batch) m_done = true;
        if (!keep_batch(valid, m_ctx->batch, m_ctx->options.drop_last)) return std::nullopt;
        ++m_number;
        return lease;
    }

private:
    const loader_context<D, Io>* m_ctx;
    stream_reader<D, Io> m_reader;
    std::size_t m_number = 0;
    bool m_done = false;
};

/// Records the first failure of any thread; the caller rethrows it.
class failure {
public:
    void set(std::exception_ptr e) noexcept {
        std::lock_guard lock(m_mutex);
        if (!m_error) m_error = std::move(e);
    }
    void rethrow_if_set() const {
        std::lock_guard lock(m_mutex);
        if (m_error) std::rethrow_exception(m_error);
    }

private:
    mutable std::mutex m_mutex;
    std::exception_ptr m_error;
};

/// PyTorch's naive split: worker w streams part (rank * W + w) of (size * W) and batches it itself,
/// so each worker drops (or pads) its own tail; the caller takes batches from the workers in turn.
template <class D, class Io>
class stream_async_state final : public epoch_state<Io> {
public:
    stream_async_state(const loader_context<D, Io>& ctx, std::size_t epoch, std::size_t workers, std::size_t depth)
        : m_ctx(&ctx), m_live(workers) {
        for (std::size_t w = 0; w < workers; ++w)
            m_queues.push_back(std::make_unique<bounded_queue<batch_lease<Io>>>((depth + workers - 1) / workers));
        for (std::size_t w = 0; w < workers; ++w) m_live[w] = w;
        m_threads.reserve(workers);
        for (std::size_t w = 0; w < workers; ++w)
            m_threads.emplace_back([this, w, epoch, workers] { work(w, epoch, workers); });
    }

    ~stream_async_state() override {
        for (auto& q : m_queues) q->close();
        m_threads.clear();
    }

    std::optional<batch_lease<Io>> next() override {
        while (!m_live.empty()) {
            m_failure.rethrow_if_set();
            m_turn %= m_live.size();
            auto batch = m_queues[m_live[m_turn]]->pop();
            m_failure.rethrow_if_set();
            if (!batch) {  // this worker is exhausted: the rotation goes on without it
                m_live.erase(m_live.begin() + static_cast<std::ptrdiff_t>(m_turn));
                continue;
            }
            ++m_turn;
            batch->storage().number = m_number++;
            return batch;
        }
        return std::nullopt;
    }

private:
    void work(std::size_t w, std::size_t epoch, std::size_t workers) {
        run_as_background_thread();
        auto& queue = *m_queues[w];
        try {
            stream_reader<D, Io> reader(*m_ctx, m_ctx->options.rank * workers + w, m_ctx->options.size * workers, epoch);
            for (std::size_t number = 0;; ++number) {
                auto lease = m_ctx->pool.acquire();
                const std::size_t valid = reader.fill(lease, number);
                if (!keep_batch(valid, m_ctx->batch, m_ctx->options.drop_last)) break;
                if (!queue.push(std::move(lease)) || valid < m_ctx->batch) break;
            }
            queue.close();
        } catch (...) {
            m_failure.set(std::current_exception());
            for (auto& q : m_queues) q->close();  // wakes the caller wherever it waits
        }
    }

    const loader_context<D, Io>* m_ctx;
    failure m_failure;
    std::vector<std::unique_ptr<bounded_queue<batch_lease<Io>>>> m_queues;
    std::vector<std::size_t> m_live;  // caller-only: workers still producing, in turn order
    std::size_t m_turn = 0, m_number = 0;
    std::vector<std::jthread> m_threads;
};

/// PopTorch's AsyncRebatched: workers stream single samples from their parts; an assembler thread
/// takes them in turn (skipping exhausted workers) into combined batches, so only the epoch's last
/// partial batch can be dropped: floor(N / batch) * batch samples are used.
template <class D, class Io>
class stream_rebatched_state final : public epoch_state<Io> {
    struct sample {
        std::vector<Io> values;
        label_t label = 0;
        std::size_t ordinal = 0;
    };

public:
    stream_rebatched_state(const loader_context<D, Io>& ctx, std::size_t epoch, std::size_t workers, std::size_t depth)
        : m_ctx(&ctx), m_batches(depth) {
        for (std::size_t w = 0; w < workers; ++w)
            m_samples.push_back(std::make_unique<bounded_queue<sample>>(std::max<std::size_t>(2, ctx.batch * depth / workers)));
        m_threads.reserve(workers + 1);
        for (std::size_t w = 0; w < workers; ++w)
            m_threads.emplace_back([this, w, epoch, workers] { work(w, epoch, workers); });
        m_threads.emplace_back([this, epoch] { assemble(epoch); });
    }

    ~stream_rebatched_state() override {
        close_all();
        m_threads.clear();
    }

    std::optional<batch_lease<Io>> next() override {
        m_failure.rethrow_if_set();
        auto batch = m_batches.pop();
        m_failure.rethrow_if_set();
        return batch;
    }

private:
    void close_all() noexcept {
        for (auto& q : m_samples) q->close();
        m_batches.close();
    }

    void work(std::size_t w, std::size_t epoch, std::size_t workers) {
        run_as_background_thread();
        try {
            stream_reader<D, Io> reader(*m_ctx, m_ctx->options.rank * workers + w, m_ctx->options.size * workers, epoch);
            for (;;) {
                sample s;
                s.values.resize(m_ctx->shape.size());
                if (!reader.read(std::span<Io>(s.values), s.label, s.ordinal)) break;
                if (!m_samples[w]->push(std::move(s))) break;
            }
            m_samples[w]->close();
        } catch (...) {
            m_failure.set(std::current_exception());
            close_all();
        }
    }

    void assemble(std::size_t epoch) {
        run_as_background_thread();
        try {
            std::vector<std::size_t> live(m_samples.size());
            for (std::size_t w = 0; w < live.size(); ++w) live[w] = w;
            const std::size_t n = m_ctx->shape.size();
            std::size_t turn = 0, number = 0;
            bool open = true;
            while (open) {
                auto lease = m_ctx->pool.acquire();
                auto& out = lease.storage();
                out.number = number;
                out.epoch = epoch;
                out.valid = 0;
                while (out.valid < m_ctx->batch && !live.empty()) {
                    turn %= live.size();
                    auto s = m_samples[live[turn]]->pop();
                    if (!s) {
                        live.erase(live.begin() + static_cast<std::ptrdiff_t>(turn));
                        continue;
                    }
                    ++turn;
                    const std::size_t j = out.valid++;
                    std::copy(s->values.begin(), s->values.end(), out.images.begin() + static_cast<std::ptrdiff_t>(j * n));
                    out.labels[j] = s->label;
                    out.mask[j] = 1;
                    out.indices[j] = s->ordinal;
                }
                for (std::size_t j = out.valid; j < m_ctx->batch; ++j) loader_context<D, Io>::pad(out, j, n);
                open = out.valid == m_ctx->batch;
                if (!keep_batch(out.valid, m_ctx->batch, m_ctx->options.drop_last)) break;
                if (!m_batches.push(std::move(lease))) return;
                ++number;
            }
            m_batches.close();
        } catch (...) {
            m_failure.set(std::current_exception());
            close_all();
        }
    }

    const loader_context<D, Io>* m_ctx;
    failure m_failure;
    std::vector<std::unique_ptr<bounded_queue<sample>>> m_samples;
    bounded_queue<batch_lease<Io>> m_batches;
    std::vector<std::jthread> m_threads;
};

}  // namespace detail

/// Yields combined batches of a dataset, as poptorch.DataLoader does, with these differences:
/// batches are RAII leases (a batch you hold is never overwritten), drop_last = false pads and masks
/// the last batch instead of dropping or shrinking it, and a worker's exception reaches the caller.
///
/// `Io` is the element type of the batches: float or tessera::half (the host normalises), or
/// std::uint8_t (8-bit I/O: raw bytes, a quarter of float's host-link traffic; the device calls
/// data::normalize). make_data_loader<Config> picks it from the config's I/O policy.
/// Each `for` over the loader (or each epoch()) is one epoch; the order of epoch e is
/// epoch_order(N, shuffle, seed, e) split by shard_of(..., rank, size, drop_last), identical in every
/// mode and for every worker count.
/// The dataset is held by reference and must outlive the loader.
/// @code
///   auto train = data::fashion_mnist(data::split::train);
///   data::data_loader<decltype(train), std::uint8_t> loader(train, batching,
///       {.shuffle = true, .seed = 7, .num_workers = 2, .mode = data::loader_mode::async});
///   for (int e = 0; e < 10; ++e)
///       for (auto& batch : loader) session.step(batch);
/// @endcode
template <AnyDataset D, class Io = float>
class data_loader {
    static_assert(BatchValue<Io>,
                  "tessera::data::data_loader<D, Io>: Io must be float or tessera::half (normalised on the host) or "
                  "std::uint8_t (8-bit I/O, normalised on the device)");
    static_assert(!std::is_same_v<Io, std::uint8_t> || std::is_same_v<typename D::value_type, std::uint8_t>,
                  "tessera::data::data_loader<D, std::uint8_t>: 8-bit I/O needs a dataset of std::uint8_t samples "
                  "(normalised float samples cannot be sent as bytes)");

    using context = detail::loader_context<D, Io>;

public:
    using value_type = Io;
    using batch_type = batch_lease<Io>;

    /// Batches of `combined_batch` samples. Throws loader_error for settings that cannot work and
    /// shape_error when the dataset's samples are not options.expected_shape.
    data_loader(const D& dataset, std::size_t combined_batch, loader_options options = {})
        : m_ctx(std::make_unique<context>(context{&dataset, combined_batch, dataset.shape(), dataset.num_classes(),
                                                  std::move(options), {}, batch_pool<Io>(std::max<std::size_t>(combined_batch, 1), dataset.shape())})) {
        auto& o = m_ctx->options;
        if (combined_batch == 0) throw loader_error("the combined batch is 0 samples (micro_batch x D x G x R_local must be > 0)");
        if (o.size == 0 || o.rank >= o.size)
            throw loader_error("rank " + std::to_string(o.rank) + " of " + std::to_string(o.size) + " instances (need rank < size)");
        if (o.mode != loader_mode::sync && o.prefetch_depth == 0)
            throw loader_error("prefetch_depth 0 in an async mode (the ring needs at least one slot)");
        if (o.expected_shape && *o.expected_shape != m_ctx->shape)
            throw shape_error("dataset given to data_loader", 0, "samples of " + to_string(m_ctx->shape),
                              "samples of " + to_string(*o.expected_shape) + " (the shape the model accepts)");
        if (m_ctx->shape.size() == 0) throw shape_error("dataset given to data_loader", 0, "empty samples", "C, H, W > 0");
        m_ctx->affine = detail::prepare<typename D::value_type>(o.normalize, m_ctx->shape.channels);
        if constexpr (Dataset<D>) {
            const std::size_t n = dataset.size();
            if (o.drop_last && combined_batch * o.size > n)
                throw loader_error("a combined batch of " + std::to_string(combined_batch) + " samples x " + std::to_string(o.size) +
                                   " instances needs at least " + std::to_string(combined_batch * o.size) +
                                   " samples with drop_last; the dataset has " + std::to_string(n));
        } else {
            if (o.shuffle) throw loader_error("shuffle needs a map-style dataset (an iterable dataset decides its own order)");
        }
    }

    /// Batches of `b.combined_batch()` samples (e.g. config::batching). When `b` also names its
    /// `instances` (P), the loader shards over them: options.size is taken from b when left at 1,
    /// and must equal it otherwise.
    template <Batching B>
    data_loader(const D& dataset, const B& b, loader_options options = {})
        : data_loader(dataset, static_cast<std::size_t>(b.combined_batch()), with_instances(b, std::move(options))) {}

    data_loader(data_loader&&) noexcept = default;
    data_loader& operator=(data_loader&&) noexcept = default;

    [[nodiscard]] std::size_t combined_batch() const noexcept { return m_ctx->batch; }
    [[nodiscard]] sample_shape shape() const noexcept { return m_ctx->shape; }
    [[nodiscard]] const loader_options& options() const noexcept { return m_ctx->options; }
    /// Batch buffers allocated so far (bounded by prefetch depth + workers + batches the user holds).
    [[nodiscard]] std::size_t buffers_allocated() const { return m_ctx->pool.allocated(); }

    /// Batches per epoch on this rank (map-style datasets: known in advance).
    [[nodiscard]] std::size_t batches_per_epoch() const requires Dataset<D> {
        return shard_batches(m_ctx->dataset->size(), m_ctx->batch, m_ctx->options.size, m_ctx->options.drop_last);
    }

    /// One epoch's batches, in order. Destroying it (or the loader's next epoch) stops its workers.
    class epoch_range {
    public:
        /// The next batch, std::nullopt at the end of the epoch; rethrows a worker's exception.
        [[nodiscard]] std::optional<batch_type> next() { return m_state->next(); }
        [[nodiscard]] std::size_t number() const noexcept { return m_epoch; }

        class iterator {
        public:
            using value_type = batch_type;
            using difference_type = std::ptrdiff_t;
            iterator() = default;
            explicit iterator(epoch_range* range) : m_range(range), m_current(range->next()) {}
            batch_type& operator*() const noexcept { return *m_current; }
            batch_type* operator->() const noexcept { return &*m_current; }
            iterator& operator++() {
                m_current.reset();  // hand the buffer back (unless the user moved it out) before loading more
                m_current = m_range->next();
                return *this;
            }
            void operator++(int) { ++*this; }
            friend bool operator==(const iterator& it, std::default_sentinel_t) noexcept { return !it.m_current; }

        private:
            epoch_range* m_range = nullptr;
            mutable std::optional<batch_type> m_current;
        };

        [[nodiscard]] iterator begin() { return iterator(this); }
        [[nodiscard]] std::default_sentinel_t end() const noexcept { return {}; }

    private:
        friend class data_loader;
        epoch_range(std::unique_ptr<detail::epoch_state<Io>> state, std::size_t epoch) noexcept
            : m_state(std::move(state)), m_epoch(epoch) {}
        std::unique_ptr<detail::epoch_state<Io>> m_state;
        std::size_t m_epoch;
    };

    /// Epoch `e` explicitly (its shuffle and augmentation depend on e only, not on what ran before).
    [[nodiscard]] epoch_range epoch(std::size_t e) const {
        const auto& o = m_ctx->options;
        const bool async = o.mode != loader_mode::sync;
        const std::size_t workers = std::max<std::size_t>(1, o.num_workers);
        if constexpr (Dataset<D>) {
            const auto order = epoch_order(m_ctx->dataset->size(), o.shuffle, o.seed, e);
            auto part = shard_of(order, m_ctx->batch, o.rank, o.size, o.drop_last);
            if (!async)
                return epoch_range(std::make_unique<detail::map_sync_state<D, Io>>(*m_ctx, std::move(part), e, o.num_workers), e);
            return epoch_range(
                std::make_unique<detail::map_async_state<D, Io>>(*m_ctx, std::move(part), e, workers, o.prefetch_depth), e);
        } else {
            if (!async) return epoch_range(std::make_unique<detail::stream_sync_state<D, Io>>(*m_ctx, e), e);
            if (o.mode == loader_mode::async)
                return epoch_range(std::make_unique<detail::stream_async_state<D, Io>>(*m_ctx, e, workers, o.prefetch_depth), e);
            return epoch_range(std::make_unique<detail::stream_rebatched_state<D, Io>>(*m_ctx, e, workers, o.prefetch_depth), e);
        }
    }

    /// The next epoch (0, 1, 2, ... over the loader's life).
    [[nodiscard]] epoch_range next_epoch() { return epoch(m_next_epoch++); }

    /// `for (auto& batch : loader)`: each loop is the next epoch.
    [[nodiscard]] typename epoch_range::iterator begin() {
        m_current.reset();  // stop the previous epoch's workers first
        m_current.emplace(next_epoch());
        return m_current->begin();
    }
    [[nodiscard]] std::default_sentinel_t end() const noexcept { return {}; }

private:
    template <class B>
    static loader_options with_instances(const B& b, loader_options o) {
        if constexpr (requires { b.instances; }) {
            const auto p = static_cast<std::size_t>(b.instances);
            if (o.size == 1) o.size = p;
            if (o.size != p)
                throw loader_error("options.size " + std::to_string(o.size) + " differs from the batching's " + std::to_string(p) +
                                   " instances");
        }
        return o;
    }

    std::unique_ptr<context> m_ctx;  // stable address: epochs and workers point at it
    std::size_t m_next_epoch = 0;
    std::optional<epoch_range> m_current;
};

}  // namespace tessera::data
