#pragma once
// A session feed over one combined batch of the data loader: NHWC micro-batches with their masks.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/config/batching.hpp"
#include "tessera/data/batch.hpp"
#include "tessera/data/micro_batches.hpp"
#include "tessera/data/normalize.hpp"
#include "tessera/exec/host_input.hpp"
#include "tessera/exec/staged_network.hpp"
#include "tessera/nn/layer.hpp"
#include "tessera/tensor/dense.hpp"

namespace tessera::exec {

/// feed(group, d, m) for a session: micro-batch (d, group, m) of a combined batch (data::micro_batch's
/// order) with its class labels: float or half samples normalised on the host into an NHWC
/// activation of precision P; 8-bit samples sent as they are, normalised by the IPU that receives
/// them (host_input). Only the real samples are fed: a micro-batch holding padding
/// (the drop_last = false tail) is SHORTER than the compiled micro-batch — {valid, H, W, C} with
/// `valid` labels — and a fully padded one is empty. So padding never enters batch-norm statistics
/// (batch or running), the loss, the gradients or the outputs (staged_network runs any size up to
/// the compiled one and skips empty micro-batches). What a session then reports:
///  - training: each micro-batch's loss is the mean over its real samples, 0 for a fully padded one
///    (output mode `sum` adds those zeros; `final` of a tail may thus be 0); the update still scales
///    the summed gradients by 1 / (G × replicas), so a short micro-batch weighs as much as a full one
///    (the mean over its real samples), as the executor's reduction defines;
///  - inference: each output holds the real samples' rows only (empty for a fully padded micro-batch).
/// The batch must outlive the feed (it reads the lease in place, on the host feeder threads).
/// @code
///   auto batch = epoch.next();
///   auto result = session(exec::batch_feed<cfg::fp32, float>(*batch, session.batching(), norm));
/// @endcode
template <nn::Numeric P, data::BatchValue T>
class batch_feed {
public:
    batch_feed(const data::batch_lease<T>& batch, config::batching b, data::normalization norm = {})
        : m_batch(&batch), m_batching(b), m_shape(batch.shape()),
          m_norm(std::make_shared<const data::normalization>(std::move(norm))) {
        b.check_batch(batch.size());
    }

    [[nodiscard]] std::pair<host_input<P>, class_labels> operator()(std::size_t group, std::size_t d,
                                                                   std::size_t m) const {
        const auto mb = data::micro_batch(*m_batch, m_batching, d, group, m);
        const std::size_t n = m_batching.micro_batch, C = m_shape.channels, H = m_shape.height, W = m_shape.width;
        const std::size_t per = m_shape.size();
        // The real rows, in order (the loader pads at the end, but any mask is honoured).
        std::vector<std::size_t> rows;
        rows.reserve(mb.valid);
        for (std::size_t i = 0; i < n; ++i)
            if (mb.mask[i] != 0) rows.push_back(i);
        std::vector<std::int32_t> labels;
        labels.reserve(rows.size());
        for (const std::size_t i : rows) labels.push_back(mb.labels[i]);
        // One copy or normalize call per run of consecutive real rows.
        const auto for_each_run = [&](auto&& f) {
            for (std::size_t k = 0; k < rows.size();) {
                std::size_t e = k + 1;
                while (e < rows.size() && rows[e] == rows[e - 1] + 1) ++e;
                f(k, e);
                k = e;
            }
        };
        if constexpr (std::is_same_v<T, std::uint8_t>) {  // 8-bit I/O: the pixels go as they are
            std::vector<std::uint8_t> pixels(rows.size() * per);
            for_each_run([&](std::size_t k, std::size_t e) {
                const auto src = mb.images.subspan(rows[k] * per, (e - k) * per);
                std::copy(src.begin(), src.end(), pixels.begin() + static_cast<std::ptrdiff_t>(k * per));
            });
            return {host_input<P>::pixels(std::move(pixels), m_shape, rows.size(), m_norm),
                    class_labels(std::move(labels))};
        } else {
            std::vector<float> chw(rows.size() * per);
            for_each_run([&](std::size_t k, std::size_t e) {
                data::normalize<T, float>(mb.images.subspan(rows[k] * per, (e - k) * per), m_shape, *m_norm,
                                          std::span<float>(chw).subspan(k * per, (e - k) * per));
            });
            auto x = tessera::tensor::make_nhwc<typename P::data_type>({rows.size(), H, W, C});
            host_input<P>::to_nhwc(chw.data(), x.data(), rows.size(), C, H, W);
            return {host_input<P>(std::move(x)), class_labels(std::move(labels))};
        }
    }

private:
    const data::batch_lease<T>* m_batch;
    config::batching m_batching;
    data::sample_shape m_shape;
    std::shared_ptr<const data::normalization> m_norm;
};

}  // namespace tessera::exec
