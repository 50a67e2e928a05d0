#pragma once
// synthetic_images: a deterministic image dataset with learnable class structure, computed on demand.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "tessera/data/concepts.hpp"
#include "tessera/data/error.hpp"
#include "tessera/data/random.hpp"

namespace tessera::data {

/// `size` uint8 images of `shape` in `num_classes` classes. Each class has a fixed random prototype
/// image (from the seed); sample i has label i mod num_classes and is its class prototype plus
/// integer noise uniform in [-noise, +noise], clamped to [0, 255] (integer arithmetic only, so the
/// bytes cannot depend on the compiler's floating-point contraction). A nearest-class-mean classifier separates
/// the classes, so a model can learn them; nothing is stored per sample (read() computes it), so
/// the dataset can be as large as a benchmark needs. Same seed, same bytes, on every machine.
/// @code
///   data::synthetic_images ds(4096, {3, 32, 32}, /*classes=*/10, /*seed=*/42);
/// @endcode
class synthetic_images {
public:
    using value_type = std::uint8_t;

    synthetic_images(std::size_t size, sample_shape shape, std::size_t num_classes, std::uint64_t seed,
                     unsigned noise = 64)
        : m_size(size), m_shape(shape), m_classes(num_classes), m_seed(seed), m_noise(noise) {
        if (shape.size() == 0) throw shape_error("synthetic_images", 0, "an empty sample shape " + to_string(shape), "C, H, W > 0");
        if (num_classes == 0) throw label_error("synthetic_images", 0, "0 classes", "at least one class");
        m_prototypes.resize(num_classes * shape.size());
        splitmix64 g(mix_seed(seed, 0xC1A55ull));
        for (auto& v : m_prototypes) v = static_cast<std::uint8_t>(g.below(256));
    }

    [[nodiscard]] std::size_t size() const noexcept { return m_size; }
    [[nodiscard]] sample_shape shape() const noexcept { return m_shape; }
    [[nodiscard]] std::size_t num_classes() const noexcept { return m_classes; }

    /// The label of sample i, without computing its pixels.
    [[nodiscard]] label_t label(std::size_t i) const noexcept { return static_cast<label_t>(i % m_classes); }

    /// The noise-free image of class c.
    [[nodiscard]] std::span<const std::uint8_t> prototype(std::size_t c) const {
        return std::span<const std::uint8_t>(m_prototypes).subspan(c * m_shape.size(), m_shape.size());
    }

    label_t read(std::size_t i, std::span<std::uint8_t> out) const {
        if (i >= m_size)
            throw std::out_of_range("tessera::data::synthetic_images::read: index " + std::to_string(i) + " >= size " +
                                    std::to_string(m_size));
        if (out.size() != m_shape.size())
            throw shape_error("synthetic_images", i, "a buffer of " + std::to_string(out.size()) + " values",
                              std::to_string(m_shape.size()) + " values (" + to_string(m_shape) + ")");
        const label_t y = label(i);
        const auto proto = prototype(static_cast<std::size_t>(y));
        splitmix64 g(mix_seed(m_seed, i));
        const std::uint64_t span = 2 * std::uint64_t{m_noise} + 1;
        for (std::size_t k = 0; k < out.size(); ++k) {
            const auto v = static_cast<std::int64_t>(proto[k]) + static_cast<std::int64_t>(g.below(span)) -
                           static_cast<std::int64_t>(m_noise);
            out[k] = static_cast<std::uint8_t>(std::clamp<std::int64_t>(v, 0, 255));
        }
        return y;
    }

private:
    std::size_t m_size;
    sample_shape m_shape;
    std::size_t m_classes;
    std::uint64_t m_seed;
    unsigned m_noise;
    std::vector<std::uint8_t> m_prototypes;
};

static_assert(Dataset<synthetic_images>);

}  // namespace tessera::data
