#pragma once
// A session feed over one combined batch of the data loader: NHWC micro-batches with their masks.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "tessera/config/batching.hpp"
#include "tessera/data/batch.hpp"
#include "tessera/data/micro_batches.hpp"
#include "tessera/data/normalize.hpp"
#include "tessera/exec/staged_network.hpp"
#include "tessera/nn/layer.hpp"
#include "tessera/tensor/dense.hpp"

namespace tessera::exec {

/// feed(group, d, m) for a session: micro-batch (d, group, m) of a combined batch (data::micro_batch's
/// order), normalised from the loader's CHW samples (8-bit or float) into an NHWC activation of
/// precision P, with its class labels and padding mask (padded samples: zero input, counted nowhere).
/// The batch must outlive the feed (it reads the lease in place, on the host feeder threads).
/// @code
///   auto batch = epoch.next();
///   auto result = session(exec::batch_feed<cfg::fp32, float>(*batch, session.batching(), norm));
/// @endcode
template <nn::Numeric P, data::BatchValue T>
class batch_feed {
public:
    batch_feed(const data::batch_lease<T>& batch, config::batching b, data::normalization norm = {})
        : m_batch(&batch), m_batching(b), m_shape(batch.shape()), m_norm(std::move(norm)) {
        b.check_batch(batch.size());
    }

    [[nodiscard]] std::pair<nn::activation<P>, class_labels> operator()(std::size_t group, std::size_t d,
                                                                      std::size_t m) const {
        const auto mb = data::micro_batch(*m_batch, m_batching, d, group, m);
        const std::size_t n = m_batching.micro_batch, C = m_shape.channels, H = m_shape.height, W = m_shape.width;
        std::vector<float> chw(mb.images.size());
        data::normalize<T, float>(mb.images, m_shape, m_norm, chw);
        auto x = tessera::tensor::make_nhwc<typename P::data_type>({n, H, W, C});
        auto* out = x.data();
        for (std::size_t i = 0; i < n; ++i) {
            const bool real = mb.mask[i] != 0;
            for (std::size_t h = 0; h < H; ++h)
                for (std::size_t w = 0; w < W; ++w)
                    for (std::size_t c = 0; c < C; ++c)
                        out[((i * H + h) * W + w) * C + c] = static_cast<typename P::data_type>(
                            real ? chw[((i * C + c) * H + h) * W + w] : 0.0f);
        }
        std::vector<std::int32_t> labels(mb.labels.begin(), mb.labels.end());
        for (std::size_t i = mb.valid; i < n; ++i) labels[i] = 0;  // padding: a valid index, never counted
        return {std::move(x), class_labels(std::move(labels), mb.valid)};
    }

private:
    const data::batch_lease<T>* m_batch;
    config::batching m_batching;
    data::sample_shape m_shape;
    data::normalization m_norm;
};

}  // namespace tessera::exec
