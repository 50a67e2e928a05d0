#pragma once
// Which samples a process reads in an epoch: the seeded global order, and its shard for (rank, size).
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "tessera/data/random.hpp"

namespace tessera::data {

/// The order of the N samples in `epoch`: 0..N-1, or with `shuffle` a permutation from
/// splitmix64 seeded with mix_seed(seed, epoch) — the same on every machine, so every process of a
/// distributed run computes the same global order without communicating.
[[nodiscard]] inline std::vector<std::size_t> epoch_order(std::size_t n, bool shuffle, std::uint64_t seed,
                                                          std::size_t epoch) {
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), std::size_t{0});
    if (shuffle) data::shuffle(std::span<std::size_t>(order), mix_seed(seed, epoch));
    return order;
}

/// A process's part of an epoch: the dataset indices it reads, in order, and its batch count.
struct shard {
    std::vector<std::size_t> indices;
    std::size_t batches = 0;  // the same on every rank, or a distributed run would wait forever
};

/// Batches every rank has per epoch (see shard_of).
[[nodiscard]] constexpr std::size_t shard_batches(std::size_t n, std::size_t batch, std::size_t size,
                                                  bool drop_last) noexcept {
    if (drop_last) return n / (batch * size);
    const std::size_t largest = n / size + (n % size > 0 ? 1 : 0);
    return (largest + batch - 1) / batch;
}

/// Splits a global order among `size` processes for combined batches of `batch` samples.
/// drop_last (PopTorch's rule): each rank gets the contiguous block of
///   per_proc = batch * floor(N / (batch * size)) samples at offset rank * per_proc; the tail is unused.
/// !drop_last: nothing is lost. Rank r gets a contiguous block of floor(N/size) samples, one more for
///   r < N mod size; every rank has ceil(ceil(N/size) / batch) batches, the last ones padded (masked).
[[nodiscard]] inline shard shard_of(std::span<const std::size_t> order, std::size_t batch, std::size_t rank,
                                    std::size_t size, bool drop_last) {
    const std::size_t n = order.size();
    shard s;
    std::size_t first = 0, count = 0;
    if (drop_last) {
        count = batch * (n / (batch * size));
        first = rank * count;
    } else {
        const std::size_t base = n / size, extra = n % size;
        first = rank * base + (rank < extra ? rank : extra);
        count = base + (rank < extra ? 1 : 0);
    }
    s.batches = shard_batches(n, batch, size, drop_last);
    s.indices.assign(order.begin() + static_cast<std::ptrdiff_t>(first),
                     order.begin() + static_cast<std::ptrdiff_t>(first + count));
    return s;
}

}  // namespace tessera::data
