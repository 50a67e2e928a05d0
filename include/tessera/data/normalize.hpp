#pragma once
// Per-channel normalisation (x * scale - mean) / stddev: on the host into float, or on the device
// from 8-bit I/O into the compute type (float or half). Both sides run this one function, so they
// agree bit for bit.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/data/concepts.hpp"
#include "tessera/data/error.hpp"
#include "tessera/tensor/half.hpp"

namespace tessera::data {

/// Per-channel mean and standard deviation, applied after `scale` (default: 1/255 for uint8
/// samples, 1 for float samples). Empty mean/stddev mean 0 and 1; a single value is used for every
/// channel. E.g. Fashion-MNIST: {.mean = {0.2860f}, .stddev = {0.3530f}}.
struct normalization {
    std::vector<float> mean = {};
    std::vector<float> stddev = {};
    std::optional<float> scale = {};
};

/// Element types normalisation may produce.
template <class T>
concept NormalizedValue = std::same_as<T, float> || std::same_as<T, tessera::half>;

namespace detail {

/// y = x * a[c] + b[c] with a = scale / stddev, b = -mean / stddev, per channel.
struct affine_channels {
    std::vector<float> a, b;
};

template <PixelValue In>
[[nodiscard]] inline affine_channels prepare(const normalization& n, std::size_t channels) {
    const float scale = n.scale.value_or(std::is_same_v<In, std::uint8_t> ? 1.0f / 255.0f : 1.0f);
    auto pick = [&](const std::vector<float>& v, float fallback, const char* what, std::size_t c) {
        if (v.empty()) return fallback;
        if (v.size() != 1 && v.size() != channels)
            throw loader_error(std::string("normalization: ") + std::to_string(v.size()) + " values of " + what + " for " +
                               std::to_string(channels) + " channels (give one, or one per channel)");
        return v.size() == 1 ? v[0] : v[c];
    };
    affine_channels out;
    for (std::size_t c = 0; c < channels; ++c) {
        const float m = pick(n.mean, 0.0f, "mean", c);
        const float s = pick(n.stddev, 1.0f, "stddev", c);
        if (!(s > 0.0f))
            throw loader_error("normalization: stddev " + std::to_string(s) + " of channel " + std::to_string(c) +
                               " (must be > 0)");
        out.a.push_back(scale / s);
        out.b.push_back(-m / s);
    }
    return out;
}

/// The arithmetic of normalize(), with the per-channel coefficients already prepared.
template <PixelValue In, NormalizedValue Out>
void apply_affine(std::span<const In> in, sample_shape shape, const affine_channels& affine, std::span<Out> out) noexcept {
    const std::size_t per_sample = shape.size();
    const std::size_t plane = shape.height * shape.width;
    for (std::size_t base = 0; base < in.size(); base += per_sample)
        for (std::size_t c = 0; c < shape.channels; ++c) {
            const float a = affine.a[c], b = affine.b[c];
            const std::size_t first = base + c * plane;
            for (std::size_t k = first; k < first + plane; ++k)
                out[k] = static_cast<Out>(std::fma(static_cast<float>(in[k]), a, b));  // fused: one rounding, no contraction differences
        }
}

}  // namespace detail

/// Normalises whole samples (CHW, `shape`) from `in` into `out`: out = (in * scale - mean[c]) / stddev[c],
/// computed in float, then stored as Out. `in.size()` must equal `out.size()` and be a multiple of
/// shape.size() (any number of samples, e.g. a whole batch).
/// @code
///   data::normalize<std::uint8_t, tessera::half>(batch.images(), shape, {.mean = {0.5f}, .stddev = {0.25f}}, device_buffer);
/// @endcode
template <PixelValue In, NormalizedValue Out>
void normalize(std::span<const In> in, sample_shape shape, const normalization& n, std::span<Out> out) {
    const std::size_t per_sample = shape.size();
    if (in.size() != out.size() || per_sample == 0 || in.size() % per_sample != 0)
        throw shape_error("normalize", 0,
                          std::to_string(in.size()) + " input and " + std::to_string(out.size()) + " output values",
                          "equal sizes, a whole number of " + to_string(shape) + " samples");
    detail::apply_affine<In, Out>(in, shape, detail::prepare<In>(n, shape.channels), out);
}

}  // namespace tessera::data
