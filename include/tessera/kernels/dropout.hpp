#pragma once
// Dropout from a counter-based stream: which elements are kept is a pure function of the key and
// the element's place in the combined batch, so it is recomputed in backward, not stored.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/storage.hpp"
#include "tessera/tensor/stochastic_rounding.hpp"

namespace tessera::kernels {

/// The stream a dropout layer draws from in one training step. Element k of sample s of a
/// micro-batch is the element (first_sample + s) · per_sample + k of the stream: the sample's index
/// in the combined batch, not in its micro-batch, so R replicas and one replica with R× the
/// micro-batches (each given its samples' first index) draw the same masks on any strategy and thread
/// count. child(tag) names a layer inside a network, as tensor::rounding's streams do (its own
/// stream: fp32 runs draw dropout masks too, where they round nothing).
struct dropout_stream {
    bool active = false;          ///< false: dropout passes everything (evaluation, or no stream set)
    std::uint64_t seed = 0;       ///< the run's seed
    std::uint64_t step = 0;       ///< the optimiser's step (counting skipped ones)
    std::uint64_t stream = 0;     ///< the layer's place in the network (child tags)
    std::uint64_t first_sample = 0;  ///< the micro-batch's first sample in the combined batch

    [[nodiscard]] constexpr dropout_stream child(std::uint64_t tag) const noexcept {
        dropout_stream d = *this;
        d.stream = tensor::mix64(stream ^ tensor::mix64(tag + 0x9E3779B97F4A7C15ull));
        return d;
    }
    /// The counter_base of this step's stream of this layer.
    [[nodiscard]] constexpr std::uint64_t base() const noexcept {
        return tensor::counter_base(tensor::mix64(seed ^ tensor::mix64(step + 0xD1B54A32D192ED03ull)), stream);
    }
    friend constexpr bool operator==(const dropout_stream&, const dropout_stream&) = default;
};

/// The draw below which an element is dropped with probability p: p · 2³², in [0, 2³²].
[[nodiscard]] inline std::uint64_t dropout_threshold(double p) {
    if (!(p >= 0.0 && p < 1.0))
        throw std::invalid_argument("tessera::kernels::dropout: the probability must be in [0, 1), got " +
                                    std::to_string(p));
    return static_cast<std::uint64_t>(std::ldexp(p, 32));
}

/// Whether element `counter` of the stream with counter_base `base` is kept (its top 32 random bits
/// at or above the threshold).
[[nodiscard]] constexpr bool dropout_keeps(std::uint64_t base, std::uint64_t counter, std::uint64_t threshold) noexcept {
    return (tensor::counter_bits_at(base, counter) >> 32) >= threshold;
}

/// y = x / (1 − p) where kept, else 0 (training; `stream.active`), for `samples` samples of
/// `per_sample` values; backward is the same map applied to dy (dropout_forward on the gradient with
/// the same stream). Inactive or p = 0: y = x.
template <Compute C, Storage T, Storage Y>
void dropout_forward(const T* x, std::size_t samples, std::size_t per_sample, double p, const dropout_stream& stream,
                     Y* y, workspace<C>& ws, parallelism par = {}, const tensor::rounding& rounding = {}) {
    const std::size_t n = samples * per_sample;
    const std::uint64_t threshold = dropout_threshold(p);
    const C* xc = load_compute<C>(x, n, ws.a, par);
    store_compute<C, Y> dst(y, n, ws.c, par, rounding);
    C* out = dst.target();
    const bool drops = stream.active && threshold > 0;
    const C scale = drops ? static_cast<C>(1.0 / (1.0 - p)) : C(1);
    const std::uint64_t base = stream.base(), first = stream.first_sample * per_sample;
    detail::parallel_ranges(par, n, detail::elementwise_grain(par), [&](std::size_t b, std::size_t e, std::size_t) {
        if (!drops) {
            for (std::size_t i = b; i < e; ++i) out[i] = xc[i];
            return;
        }
        for (std::size_t i = b; i < e; ++i) out[i] = dropout_keeps(base, first + i, threshold) ? xc[i] * scale : C(0);
    });
    dst.commit();
}

}  // namespace tessera::kernels
