#pragma once
// A session feed over one combined batch of token windows: each micro-batch's ids and its next-token
// or masked-LM labels.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/config/batching.hpp"
#include "tessera/config/error.hpp"
#include "tessera/data/batch.hpp"
#include "tessera/data/masked_lm.hpp"
#include "tessera/data/micro_batches.hpp"
#include "tessera/exec/host_input.hpp"
#include "tessera/exec/staged_loss.hpp"
#include "tessera/nn/tokens.hpp"

namespace tessera::exec {

/// feed(group, d, m) for a session of a language model: micro-batch (d, group, m) of a combined
/// batch of windows of T + 1 token ids (data::token_windows) as the model's N × 1 × T × 1 input
/// (nn::token_activation: ids in the elements' bits, never rounded) and its labels (exec::token_loss):
///  - next-token (GPT): the first T tokens of each window in, the last T as labels, position t
///    predicting token t + 1;
///  - masked-LM (BERT, given a data::masked_lm): the first T tokens, masked as it draws for the
///    sample's dataset index and the batch's epoch, and the original tokens as labels where it chose
///    a position (-100 elsewhere): the same masks on every rank, replica and strategy.
/// As batch_feed does, only the real windows are fed: the drop_last = false tail is a shorter
/// micro-batch. The batch must outlive the feed.
/// @code
///   auto batch = epoch.next();
///   auto result = session(exec::token_feed<cfg::half>(*batch, session.batching()));
///   auto bert = session(exec::token_feed<cfg::half>(*batch, session.batching(), {.seed = 1, .mask_token = 256, .vocabulary = 256}));
/// @endcode
template <nn::Numeric P>
class token_feed {
public:
    token_feed(const data::batch_lease<std::uint16_t>& batch, config::batching b) : token_feed(batch, b, std::nullopt) {}
    token_feed(const data::batch_lease<std::uint16_t>& batch, config::batching b, std::optional<data::masked_lm> masking)
        : m_batch(&batch), m_batching(b), m_window(batch.shape().size()), m_masking(masking) {
        b.check_batch(batch.size());
        if (m_window < 2)
            throw config::config_error("tessera::exec::token_feed: windows of " + std::to_string(m_window) +
                                       " tokens (a window holds the T inputs and one more token)");
        if (m_masking) m_masking->check();
    }

    [[nodiscard]] std::pair<host_input<P>, token_labels> operator()(std::size_t group, std::size_t d, std::size_t m) const {
        const auto mb = data::micro_batch(*m_batch, m_batching, d, group, m);
        const std::size_t T = m_window - 1;
        std::vector<std::uint16_t> ids;
        std::vector<std::int32_t> labels;
        ids.reserve(mb.valid * T);
        labels.reserve(mb.valid * T);
        std::size_t rows = 0;
        for (std::size_t i = 0; i < m_batching.micro_batch; ++i) {
            if (mb.mask[i] == 0) continue;
            const auto w = mb.images.subspan(i * m_window, m_window);
            ids.insert(ids.end(), w.begin(), w.end() - 1);
            if (m_masking) {
                labels.resize(labels.size() + T);
                m_masking->apply(std::span<std::uint16_t>(ids).last(T), std::span<std::int32_t>(labels).last(T),
                                 mb.indices[i], m_batch->epoch());
            } else {
                for (std::size_t t = 1; t < m_window; ++t) labels.push_back(static_cast<std::int32_t>(w[t]));
            }
            ++rows;
        }
        return {host_input<P>(nn::token_activation<P>(std::span<const std::uint16_t>(ids), rows, T)),
                token_labels(std::move(labels))};
    }

private:
    const data::batch_lease<std::uint16_t>* m_batch;
    config::batching m_batching;
    std::size_t m_window;
    std::optional<data::masked_lm> m_masking;
};

}  // namespace tessera::exec
