#pragma once
// Splitting a combined batch into the micro-batches a session feeds to replicas and iterations.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "tessera/config/batching.hpp"
#include "tessera/config/error.hpp"
#include "tessera/data/batch.hpp"
#include "tessera/data/concepts.hpp"

namespace tessera::data {

/// One micro-batch of a combined batch: views into the lease (valid while it lives).
template <BatchValue T>
struct micro_batch_view {
    std::span<const T> images;              ///< micro_batch x C x H x W
    std::span<const label_t> labels;        ///< micro_batch
    std::span<const std::uint8_t> mask;     ///< 1 = real sample, 0 = padding: count it in no loss, gradient or metric
    std::span<const std::size_t> indices;   ///< each sample's dataset index (padding_index for padding)
    std::size_t valid = 0;                  ///< real samples (padding is always at the end)
};

/// Micro-batch `m` of input group `group` in device iteration `d` of a combined batch, in the order
/// exec::session takes them: [iteration][input group][micro-batch] (G micro-batches per group when
/// training, 1 for inference). Throws config::batch_error when the batch is not one combined batch of `b`.
/// @code
///   auto mb = data::micro_batch(batch, session.batching(), d, g, m);
///   loss += model.loss(mb.images, mb.labels, mb.mask);
/// @endcode
template <BatchValue T>
[[nodiscard]] micro_batch_view<T> micro_batch(const batch_lease<T>& batch, const config::batching& b, std::size_t d,
                                              std::size_t group, std::size_t m) {
    b.check_batch(batch.size());
    const std::size_t groups = b.local_replicas() / b.input_group;
    const std::size_t per_group = b.training ? b.gradient_accumulation : 1;
    if (d >= b.device_iterations || group >= groups || m >= per_group)
        throw config::batch_error("tessera::data::micro_batch: (iteration " + std::to_string(d) + ", group " +
                                  std::to_string(group) + ", micro-batch " + std::to_string(m) + ") is outside " +
                                  std::to_string(b.device_iterations) + " x " + std::to_string(groups) + " x " +
                                  std::to_string(per_group));
    const std::size_t index = (d * groups + group) * per_group + m;
    const std::size_t first = index * b.micro_batch, n = batch.shape().size();
    micro_batch_view<T> view;
    view.images = batch.images().subspan(first * n, b.micro_batch * n);
    view.labels = batch.labels().subspan(first, b.micro_batch);
    view.mask = batch.mask().subspan(first, b.micro_batch);
    view.indices = batch.indices().subspan(first, b.micro_batch);
    view.valid = static_cast<std::size_t>(std::count(view.mask.begin(), view.mask.end(), std::uint8_t{1}));
    return view;
}

}  // namespace tessera::data
