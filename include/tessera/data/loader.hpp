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

#include "tessera/data/detail/loader_context.hpp"
#include "tessera/data/detail/map_epochs.hpp"
#include "tessera/data/detail/stream_epochs.hpp"
#include "tessera/data/loader_options.hpp"

namespace tessera::data {

/// The batch element type of data_loader<D> when none is given: std::uint16_t for a dataset of token
/// ids (they travel as they are), float for images.
template <AnyDataset D>
using default_batch_value =
    std::conditional_t<std::is_same_v<typename D::value_type, std::uint16_t>, std::uint16_t, float>;

/// Yields combined batches of a dataset, as poptorch.DataLoader does, with these differences:
/// batches are RAII leases (a batch you hold is never overwritten), drop_last = false pads and masks
/// the last batch instead of dropping or shrinking it, and a worker's exception reaches the caller.
///
/// `Io` is the element type of the batches: float or tessera::half (the host normalises), or
/// std::uint8_t (8-bit I/O: raw bytes, a quarter of float's host-link traffic; the device calls
/// data::normalize). make_data_loader<Config> picks it from the config's I/O policy. A dataset of
/// std::uint16_t token ids (token_windows) has std::uint16_t batches, and only those: the ids are
/// copied as read, neither augmented nor normalised (both options are refused), so none is rounded.
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
template <AnyDataset D, class Io = default_batch_value<D>>
class data_loader {
    static_assert(BatchValue<Io>,
                  "tessera::data::data_loader<D, Io>: Io must be float or tessera::half (normalised on the host) or "
                  "std::uint8_t (8-bit I/O, normalised on the device)");
    static_assert(!std::is_same_v<Io, std::uint8_t> || std::is_same_v<typename D::value_type, std::uint8_t>,
                  "tessera::data::data_loader<D, std::uint8_t>: 8-bit I/O needs a dataset of std::uint8_t samples "
                  "(normalised float samples cannot be sent as bytes)");
    static_assert(std::is_same_v<Io, std::uint16_t> == std::is_same_v<typename D::value_type, std::uint16_t>,
                  "tessera::data::data_loader<D, Io>: token ids (std::uint16_t samples) travel as std::uint16_t "
                  "batches, unconverted, and only they do: data_loader<D, std::uint16_t> (the default for them)");

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
        if constexpr (std::is_same_v<Io, std::uint16_t>) {
            if (!o.augment.empty()) throw loader_error("augmentation of token ids (it crops and flips images)");
            if (!o.normalize.mean.empty() || !o.normalize.stddev.empty() || o.normalize.scale)
                throw loader_error("normalization of token ids (they travel as integers, unconverted)");
        } else {
            m_ctx->affine = detail::prepare<typename D::value_type>(o.normalize, m_ctx->shape.channels);
        }
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

    /// Makes `epoch` the one the next loop (or next_epoch()) reads, e.g. when resuming a run.
    void seek(std::size_t epoch) noexcept { m_next_epoch = epoch; }

    /// The next epoch (0, 1, 2, ... over the loader's life).
    [[nodiscard]] epoch_range next_epoch() { return epoch(m_next_epoch++); }

    /// `for (auto& batch : loader)`: each loop is the next epoch. With an async mode on a map-style
    /// dataset the workers live across these epochs (as PopTorch keeps them): the first batches of
    /// the next epoch are prepared while the caller finishes this one. An epoch left before its end,
    /// or an explicit epoch(e), starts them afresh.
    [[nodiscard]] typename epoch_range::iterator begin() {
        m_current.reset();  // stop the previous epoch's workers first (an epoch of the stream: nothing to stop)
        if constexpr (Dataset<D>) {
            const auto& o = m_ctx->options;
            if (o.mode != loader_mode::sync) {
                const std::size_t e = m_next_epoch++;
                if (!m_stream || m_stream->next_epoch() != e || !m_stream->at_epoch_start()) {
                    m_stream.reset();
                    m_stream = std::make_unique<detail::map_stream<D, Io>>(
                        *m_ctx,
                        [ctx = m_ctx.get()](std::size_t epoch) {
                            const auto& opts = ctx->options;
                            return shard_of(epoch_order(ctx->dataset->size(), opts.shuffle, opts.seed, epoch), ctx->batch,
                                            opts.rank, opts.size, opts.drop_last);
                        },
                        e, std::max<std::size_t>(1, o.num_workers), o.prefetch_depth);
                }
                m_current.emplace(epoch_range(std::make_unique<detail::map_stream_epoch<D, Io>>(*m_stream, e), e));
                return m_current->begin();
            }
        }
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
    std::unique_ptr<detail::map_stream<D, Io>> m_stream;  // async epochs of begin(): workers across epochs
    std::optional<epoch_range> m_current;                  // last: destroyed before the stream it may read
};

}  // namespace tessera::data
