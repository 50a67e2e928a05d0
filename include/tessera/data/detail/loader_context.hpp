#pragma once
// What a data loader's epochs share: settings, the batch pool, the per-sample pipeline, the producer.
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
#include "tessera/data/loader_options.hpp"

namespace tessera::data {

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
    /// Token ids (std::uint16_t) are copied as read: never augmented, normalised or converted.
    void finish(scratch& s, std::span<Io> out, std::uint64_t sample_key, std::size_t epoch) const {
        if constexpr (std::is_same_v<raw_type, std::uint16_t>) {
            std::copy(s.raw.begin(), s.raw.end(), out.begin());
        } else {
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


}  // namespace detail

}  // namespace tessera::data
