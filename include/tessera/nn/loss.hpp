#pragma once
// Softmax cross-entropy on a model's logits, per sample or per position: loss, accuracy and the
// (loss-scaled) gradient.
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

#include "tessera/kernels/loss.hpp"
#include "tessera/kernels/token_loss.hpp"
#include "tessera/nn/layer.hpp"

namespace tessera::nn {

/// Computes mean cross-entropy and top-1 hits, and stores d(scale · loss)/dlogits in the data type
/// (so with fp16 activations the scaled gradient is what flows backward, as on the IPU), rounded to a
/// half as `rounding` says.
template <Numeric P>
class softmax_cross_entropy {
public:
    using C = typename P::accumulate_type;

    kernels::loss_result<C> operator()(const activation<P>& logits, std::span<const std::int32_t> labels,
                                       double loss_scale = 1.0, const tensor::rounding& rounding = {}) {
        const tensor::shape s = tensor::shape_of(logits);
        if (labels.size() != s.n)
            throw tensor::shape_error("tessera::nn::softmax_cross_entropy: " + std::to_string(labels.size()) +
                                      " labels for a batch of " + std::to_string(s.n));
        detail::ensure_shape(m_grad, s);
        return kernels::softmax_cross_entropy(logits.data(), s.n, s.per_sample(), labels.data(), m_grad.data(),
                                              static_cast<C>(loss_scale), m_ws, rounding);
    }

    /// The gradient of the last call.
    [[nodiscard]] const activation<P>& gradient() const noexcept { return m_grad; }

private:
    activation<P> m_grad;
    kernels::workspace<C> m_ws;
};

/// Softmax cross-entropy per position of a sequence's logits (N × 1 × T × vocab), one label per
/// position or kernels::ignore_label: the loss is the mean over the labelled positions of the
/// micro-batch (PopTorch's mean reduction; G and R then average the micro-batches' means), and the
/// gradient d(scale · loss)/dlogits is stored in the data type, rounded as `rounding` says.
template <Numeric P>
class token_cross_entropy {
public:
    using C = typename P::accumulate_type;

    kernels::token_loss_result<C> operator()(const activation<P>& logits, std::span<const std::int32_t> labels,
                                             double loss_scale = 1.0, const tensor::rounding& rounding = {}) {
        const tensor::shape s = tensor::shape_of(logits);
        if (labels.size() != s.pixels())
            throw tensor::shape_error("tessera::nn::token_cross_entropy: " + std::to_string(labels.size()) +
                                      " labels for logits " + s.str() + " (" + std::to_string(s.pixels()) + " positions)");
        detail::ensure_shape(m_grad, s);
        return kernels::token_cross_entropy(logits.data(), s.pixels(), s.c, labels.data(), m_grad.data(),
                                            static_cast<C>(loss_scale), m_ws, rounding);
    }

    /// The gradient of the last call.
    [[nodiscard]] const activation<P>& gradient() const noexcept { return m_grad; }

private:
    activation<P> m_grad;
    kernels::workspace<C> m_ws;
};

}  // namespace tessera::nn
