#pragma once
// The data loader's settings and modes (PopTorch's DataLoader options and DataLoaderMode).
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
#include "tessera/data/normalize.hpp"

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


}  // namespace tessera::data
