#pragma once
// The loss a staged network ends in, with its label type: a class per sample, or a token per position.
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tessera/config/error.hpp"
#include "tessera/exec/run_result.hpp"
#include "tessera/kernels/loss.hpp"
#include "tessera/kernels/token_loss.hpp"
#include "tessera/nn/layer.hpp"
#include "tessera/nn/loss.hpp"
#include "tessera/tensor/dense.hpp"

namespace tessera::exec {

/// Class indices of a micro-batch; samples from `valid` on are padding and count in neither the loss
/// nor the loss gradient. Padded rows inside a micro-batch still enter batch-norm statistics in the
/// forward pass, so batch_feed never sends them: it feeds the data loader's drop_last = false tail as
/// shorter micro-batches (all labels real), which staged_network runs at any size up to the compiled one.
struct class_labels {
    std::vector<std::int32_t> classes;
    std::size_t valid = 0;
    class_labels() = default;
    class_labels(std::vector<std::int32_t> c) : classes(std::move(c)), valid(classes.size()) {}  // implicit: all real
    class_labels(std::vector<std::int32_t> c, std::size_t real) : classes(std::move(c)), valid(real) {}
};

/// A label per position of a micro-batch of sequences (samples × positions, row after row): the
/// next token (a language model), or the masked token (masked LM) with kernels::ignore_label at the
/// positions that count in neither the loss nor its gradient (padding, unmasked positions).
struct token_labels {
    std::vector<std::int32_t> tokens;
    token_labels() = default;
    token_labels(std::vector<std::int32_t> t) noexcept : tokens(std::move(t)) {}  // NOLINT: implicit
};

/// A loss a staged network ends in: compute(logits, labels, scale, rounding) -> {loss, d(scale ·
/// loss)/dlogits} for one micro-batch, score(logits, labels) -> top-1 hits over what it counts, and
/// samples(labels): how many real samples the labels describe (for messages).
template <class L, class P>
concept StagedLoss = std::copy_constructible<L> && std::is_nothrow_move_constructible_v<typename L::label> &&
    requires(L& l, const L& cl, const nn::activation<P>& y, const typename L::label& t, double scale,
             const tensor::rounding& r) {
        { l.compute(y, t, scale, r) } -> std::same_as<std::pair<float, nn::activation<P>>>;
        { cl.score(y, t) } -> std::same_as<top1_score>;
        { cl.samples(t) } -> std::convertible_to<std::size_t>;
    };

/// Softmax cross-entropy over a class per sample: the mean over the real samples (the first
/// `valid` rows), padding contributing a zero gradient; top-1 hits per sample.
template <nn::Numeric P>
class class_loss {
public:
    using label = class_labels;
    using tensor = nn::activation<P>;

    std::pair<float, tensor> compute(const tensor& logits, const label& labels, double scale,
                                     const tessera::tensor::rounding& rounding) {
        const auto shape = tessera::tensor::shape_of(logits);
        if (labels.valid > labels.classes.size() || labels.classes.size() != shape.n)
            throw config::config_error("tessera::exec::staged_network::loss: " + std::to_string(labels.classes.size()) +
                                       " labels (" + std::to_string(labels.valid) + " real) for a batch of " +
                                       std::to_string(shape.n));
        if (labels.valid == shape.n && shape.n > 0) {
            const auto r = m_loss(logits, labels.classes, scale, rounding);
            return {static_cast<float>(r.loss), tensor(m_loss.gradient())};
        }
        tensor grad = tessera::tensor::make_nhwc<typename P::data_type>(shape);
        std::fill(grad.begin(), grad.end(), typename P::data_type{});
        if (labels.valid == 0) return {0.0f, std::move(grad)};
        // Padding is at the end: the loss of the first `valid` rows, averaged over them only.
        const auto r = kernels::softmax_cross_entropy(logits.data(), labels.valid, shape.per_sample(),
                                                      labels.classes.data(), grad.data(), static_cast<float>(scale),
                                                      m_workspace, rounding);
        return {static_cast<float>(r.loss), std::move(grad)};
    }
    /// Top-1 hits of the logits over the real samples (the first `valid` rows).
    [[nodiscard]] top1_score score(const tensor& logits, const label& labels) const {
        const auto shape = tessera::tensor::shape_of(logits);
        const std::size_t classes = shape.per_sample(), rows = std::min(labels.valid, shape.n);
        top1_score hits{0, rows};
        const auto* p = logits.data();
        for (std::size_t i = 0; i < rows; ++i)
            hits.correct += kernels::top1_class(p + i * classes, classes) == static_cast<std::size_t>(labels.classes[i]);
        return hits;
    }
    [[nodiscard]] std::size_t samples(const label& labels) const noexcept { return labels.valid; }

private:
    nn::softmax_cross_entropy<P> m_loss;
    kernels::workspace<typename P::accumulate_type> m_workspace;
};

/// Softmax cross-entropy per position over N × 1 × T × vocab logits: each micro-batch's loss is the
/// mean over its labelled positions (PopTorch's mean reduction; G and R then average the
/// micro-batches' means, as accumulationAndReplicationReductionType = Mean does); a micro-batch with
/// none has loss 0 and a zero gradient. Its score counts the labelled positions whose largest logit
/// is the label (accuracy per token).
template <nn::Numeric P>
class token_loss {
public:
    using label = token_labels;
    using tensor = nn::activation<P>;

    std::pair<float, tensor> compute(const tensor& logits, const label& labels, double scale,
                                     const tessera::tensor::rounding& rounding) {
        const auto shape = tessera::tensor::shape_of(logits);
        if (labels.tokens.size() != shape.pixels())
            throw config::config_error("tessera::exec::staged_network::loss: " + std::to_string(labels.tokens.size()) +
                                       " token labels for logits of " + std::to_string(shape.n) + " sequences of " +
                                       std::to_string(shape.w) + " positions");
        if (shape.n == 0) return {0.0f, tensor(logits)};
        const auto r = m_loss(logits, labels.tokens, scale, rounding);
        return {static_cast<float>(r.loss), tensor(m_loss.gradient())};
    }
    [[nodiscard]] top1_score score(const tensor& logits, const label& labels) const {
        const auto shape = tessera::tensor::shape_of(logits);
        top1_score hits{0, 0};
        const auto* p = logits.data();
        for (std::size_t i = 0; i < std::min(labels.tokens.size(), shape.pixels()); ++i) {
            if (labels.tokens[i] == kernels::ignore_label) continue;
            ++hits.samples;
            hits.correct += kernels::top1_class(p + i * shape.c, shape.c) == static_cast<std::size_t>(labels.tokens[i]);
        }
        return hits;
    }
    /// The sequences the labels cover cannot be told from them alone: their positions.
    [[nodiscard]] std::size_t samples(const label& labels) const noexcept { return labels.tokens.size(); }

private:
    nn::token_cross_entropy<P> m_loss;
};

}  // namespace tessera::exec
