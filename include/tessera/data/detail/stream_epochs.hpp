#pragma once
// Epochs of iterable datasets: sync, PyTorch's naive worker split (async) and PopTorch's rebatching.
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

#include "tessera/data/detail/loader_context.hpp"

namespace tessera::data {

namespace detail {

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

}  // namespace tessera::data
