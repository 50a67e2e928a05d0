#pragma once
// Softmax cross-entropy with its gradient and the batch's top-1 accuracy.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/storage.hpp"

namespace tessera::kernels {

namespace detail {

/// Stores element i of a loss gradient computed in C as D: to nearest, or stochastically with
/// element i's bits where D is a half and `rounding` says so.
template <Storage D, Compute C>
inline void store_gradient(D* out, std::size_t i, C g, const tensor::rounding& rounding) noexcept {
    if constexpr (std::is_same_v<D, tensor::half> && std::is_same_v<C, float>)
        if (rounding.stochastic) {
            out[i] = tensor::round_element(g, rounding, i);
            return;
        }
    out[i] = store_as<D>(g);
}

}  // namespace detail

/// Mean loss over the batch and the number of samples whose largest logit is the label.
template <Compute C>
struct loss_result {
    C loss = 0;
    std::size_t correct = 0;
};

/// The index of the largest of `classes` values (the first one on ties); 16-bit values compare as float.
template <Storage T>
[[nodiscard]] std::size_t top1_class(const T* row, std::size_t classes) {
    using V = std::conditional_t<std::is_same_v<T, double>, double, float>;
    std::size_t best = 0;
    for (std::size_t k = 1; k < classes; ++k)
        if (detail::load_as<V>(row[k]) > detail::load_as<V>(row[best])) best = k;
    return best;
}

/// logits: batch × classes; labels in [0, classes). When dlogits is not null it receives
/// scale · (softmax − onehot) / batch: the gradient of scale × mean loss (scale = the loss scale).
template <Compute C, Storage T, Storage D>
loss_result<C> softmax_cross_entropy(const T* logits, std::size_t batch, std::size_t classes,
                                     const std::int32_t* labels, D* dlogits, C scale, workspace<C>& ws,
                                     const tensor::rounding& rounding = {}) {
    const C* z = load_compute<C>(logits, batch * classes, ws.a);
    if (ws.b.size() < classes) ws.b.resize(classes);
    loss_result<C> result;
    double total = 0;
    for (std::size_t r = 0; r < batch; ++r) {
        const std::int32_t label = labels[r];
        if (label < 0 || static_cast<std::size_t>(label) >= classes)
            throw std::out_of_range("tessera::kernels::softmax_cross_entropy: label " + std::to_string(label) +
                                    " of sample " + std::to_string(r) + " is not in [0, " + std::to_string(classes) + ")");
        const C* zr = z + r * classes;
        const std::size_t best = top1_class(zr, classes);
        result.correct += best == static_cast<std::size_t>(label);
        C sum = 0;
        for (std::size_t k = 0; k < classes; ++k) sum += std::exp(zr[k] - zr[best]);
        const C log_sum = std::log(sum) + zr[best];
        total += static_cast<double>(log_sum - zr[label]);
        if (dlogits != nullptr)
            for (std::size_t k = 0; k < classes; ++k) {
                const C p = std::exp(zr[k] - log_sum);
                const C g = (p - (k == static_cast<std::size_t>(label) ? C(1) : C(0))) * scale / static_cast<C>(batch);
                detail::store_gradient(dlogits, r * classes + k, g, rounding);
            }
    }
    result.loss = static_cast<C>(total / static_cast<double>(batch));
    return result;
}

}  // namespace tessera::kernels
