#pragma once
// Softmax cross-entropy per position with an ignore index: a language model's loss over its tokens.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/loss.hpp"
#include "tessera/kernels/storage.hpp"

namespace tessera::kernels {

/// PyTorch's default ignore_index: a label that counts in neither the loss nor its gradient
/// (padding; masked-LM's unmasked positions).
inline constexpr std::int32_t ignore_label = -100;

/// Sum and mean of the loss over the labelled positions, how many they are, and how many of them
/// have their label as the largest logit.
template <Compute C>
struct token_loss_result {
    C loss = 0;                 ///< mean over the labelled positions (0 when none is)
    double sum = 0;             ///< the loss summed over them (nats)
    std::size_t labelled = 0;   ///< positions whose label is not ignore_label
    std::size_t correct = 0;
};

/// logits: rows × classes, labels: rows, each in [0, classes) or ignore_label. When dlogits is not
/// null it receives scale · (softmax − onehot) / labelled on the labelled rows and 0 on the others:
/// the gradient of scale × the mean over the labelled positions (PopTorch's mean reduction; a
/// micro-batch with no labelled position has a zero gradient).
template <Compute C, Storage T, Storage D>
token_loss_result<C> token_cross_entropy(const T* logits, std::size_t rows, std::size_t classes,
                                         const std::int32_t* labels, D* dlogits, C scale, workspace<C>& ws,
                                         const tensor::rounding& rounding = {}) {
    token_loss_result<C> result;
    for (std::size_t r = 0; r < rows; ++r) {
        const std::int32_t label = labels[r];
        if (label == ignore_label) continue;
        if (label < 0 || static_cast<std::size_t>(label) >= classes)
            throw std::out_of_range("tessera::kernels::token_cross_entropy: label " + std::to_string(label) +
                                    " of position " + std::to_string(r) + " is neither in [0, " +
                                    std::to_string(classes) + ") nor the ignore index " + std::to_string(ignore_label));
        ++result.labelled;
    }
    const C* z = load_compute<C>(logits, rows * classes, ws.a);
    const C per = result.labelled == 0 ? C(0) : scale / static_cast<C>(result.labelled);
    for (std::size_t r = 0; r < rows; ++r) {
        const std::int32_t label = labels[r];
        const C* zr = z + r * classes;
        const bool counted = label != ignore_label;
        C log_sum = 0;
        if (counted) {
            const std::size_t best = top1_class(zr, classes);
            result.correct += best == static_cast<std::size_t>(label);
            C sum = 0;
            for (std::size_t k = 0; k < classes; ++k) sum += std::exp(zr[k] - zr[best]);
            log_sum = std::log(sum) + zr[best];
            result.sum += static_cast<double>(log_sum - zr[label]);
        }
        if (dlogits == nullptr) continue;
        for (std::size_t k = 0; k < classes; ++k) {
            const C g = counted ? (std::exp(zr[k] - log_sum) - (k == static_cast<std::size_t>(label) ? C(1) : C(0))) * per
                                : C(0);
            detail::store_gradient(dlogits, r * classes + k, g, rounding);
        }
    }
    result.loss = result.labelled == 0 ? C(0) : static_cast<C>(result.sum / static_cast<double>(result.labelled));
    return result;
}

}  // namespace tessera::kernels
