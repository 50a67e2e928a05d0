#pragma once
// make_data_loader<Config>: a data_loader whose batch and element type come from a configuration.
#include <cstddef>
#include <utility>

#include "tessera/config/batching.hpp"
#include "tessera/config/config.hpp"
#include "tessera/data/concepts.hpp"
#include "tessera/data/loader.hpp"

namespace tessera::data {

/// The loader type a configuration needs: its batches are Config::io_type (float, half, or bytes
/// with 8-bit I/O).
template <config::Config C, AnyDataset D>
using loader_for = data_loader<D, typename C::io_type>;

/// A loader for `Config` with its run-time counts from `counts`: the combined batch is
/// micro_batch × D × G × R_local (inference drops G), the shards are the config's instances, the
/// batch element type its I/O policy. Throws config::config_error (from make_batching) for counts that
/// break a rule, config::batch_error when a map-style dataset cannot fill one combined batch per
/// instance with drop_last, and loader_error / shape_error as data_loader does.
/// @code
///   using cfg = config::config<config::mixed, config::replication<2>, config::eight_bit_io>;
///   auto loader = data::make_data_loader<cfg>(train, {.micro_batch = 32, .gradient_accumulation = 4},
///                                             {.shuffle = true, .seed = 1, .mode = data::loader_mode::async});
/// @endcode
template <config::Config C, AnyDataset D>
[[nodiscard]] loader_for<C, D> make_data_loader(const D& dataset, const config::options& counts,
                                                loader_options options = {}) {
    const config::batching b = config::make_batching<C>(counts);
    if constexpr (Dataset<D>)
        if (options.drop_last) b.check_fits_dataset(static_cast<std::size_t>(dataset.size()));
    return loader_for<C, D>(dataset, b, std::move(options));
}

}  // namespace tessera::data
