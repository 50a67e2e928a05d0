#pragma once
// Evaluation over a data loader through an inference session: mean loss and top-1 accuracy.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/config/error.hpp"
#include "tessera/data/batch.hpp"
#include "tessera/data/micro_batches.hpp"
#include "tessera/data/normalize.hpp"
#include "tessera/exec/batch_feed.hpp"
#include "tessera/kernels/loss.hpp"
#include "tessera/kernels/storage.hpp"

namespace tessera::exec {

/// What evaluate() measured over every real sample of an epoch of the loader.
struct evaluation {
    std::size_t samples = 0;       ///< real samples (padding counts in nothing)
    std::size_t correct = 0;       ///< whose largest logit is the label
    double loss = 0;               ///< mean softmax cross-entropy over the samples
    double wall_seconds = 0;       ///< this machine
    double modelled_seconds = 0;   ///< the modelled IPUs and their host (session_options::host)
    [[nodiscard]] double accuracy() const noexcept { return samples ? double(correct) / double(samples) : 0.0; }
};

/// Runs one epoch of `loader` through inference session `session` (output mode `all`, as
/// inference_model gives) and scores each output against its labels on the host. A padded tail
/// (drop_last = false) is counted exactly: its padding is never fed, so only real samples score.
/// @code
///   auto eval = exec::inference_model<cfg>(net, sample, {.micro_batch = 100});
///   auto test = data::make_data_loader<cfg::for_inference>(test_set, {.micro_batch = 100}, {.drop_last = false});
///   auto e = exec::evaluate(eval, test, norm);   // e.accuracy(), e.loss
/// @endcode
template <class Session, class Loader>
[[nodiscard]] evaluation evaluate(Session& session, Loader& loader, const data::normalization& norm = {}) {
    using precision = typename Session::model_type::precision;
    using io = typename Loader::value_type;
    const config::batching b = session.batching();
    if (b.training) throw config::config_error("tessera::exec::evaluate: the session is for training (use inference_model)");
    const auto start = std::chrono::steady_clock::now();
    const double modelled_start = session.host().now();
    evaluation e;
    double loss_sum = 0;
    kernels::workspace<float> ws;
    for (auto& batch : loader) {
        const auto result = session(batch_feed<precision, io>(batch, b, norm));
        for (std::size_t r = 0; r < result.outputs.size(); ++r) {
            if (r % b.input_group != 0) continue;  // the replicas of an input group compute the same outputs
            for (std::size_t k = 0; k < result.outputs[r].size(); ++k) {
                // Inference runs the D iterations as micro-batches of one program: micro-batch k is iteration k.
                const auto mb = data::micro_batch(batch, b, result.selected[r][k], r / b.input_group, 0);
                std::vector<std::int32_t> labels;
                for (std::size_t i = 0; i < b.micro_batch; ++i)
                    if (mb.mask[i] != 0) labels.push_back(mb.labels[i]);
                const auto& logits = result.outputs[r][k];
                if (labels.empty()) continue;
                const std::size_t classes = logits.size() / labels.size();
                if (classes * labels.size() != logits.size())
                    throw config::config_error("tessera::exec::evaluate: " + std::to_string(logits.size()) +
                                               " outputs for " + std::to_string(labels.size()) + " samples");
                const auto s = kernels::softmax_cross_entropy<float>(logits.data(), labels.size(), classes, labels.data(),
                                                                     static_cast<float*>(nullptr), 1.0f, ws);
                loss_sum += double(s.loss) * double(labels.size());
                e.correct += s.correct;
                e.samples += labels.size();
            }
        }
    }
    e.loss = e.samples ? loss_sum / double(e.samples) : 0.0;
    e.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    e.modelled_seconds = session.host().now() - modelled_start;
    return e;
}

}  // namespace tessera::exec
