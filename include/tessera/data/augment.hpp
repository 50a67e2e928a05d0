#pragma once
// Seeded host-side augmentation of image samples: random crop with zero padding, horizontal flip,
// composed with operator|.
#include <algorithm>
#include <cstddef>
#include <span>
#include <variant>
#include <vector>

#include "tessera/data/concepts.hpp"
#include "tessera/data/random.hpp"

namespace tessera::data {

/// Pads the image with `padding` zeros on every side, then crops an H x W window at a uniformly
/// random offset (the CIFAR-10 recipe: padding 4).
struct random_crop {
    std::size_t padding = 4;
};

/// Mirrors the image left to right with the given probability.
struct horizontal_flip {
    float probability = 0.5f;
};

/// An ordered list of augmentation steps. Applied to one sample with a generator seeded from
/// (loader seed, epoch, sample index), so the result does not depend on which worker loads it.
/// @code
///   data::augmentation aug = data::random_crop{4} | data::horizontal_flip{};
/// @endcode
class augmentation {
public:
    using step = std::variant<random_crop, horizontal_flip>;

    augmentation() = default;
    augmentation(random_crop s) : m_steps{s} {}      // NOLINT: implicit, so steps compose with |
    augmentation(horizontal_flip s) : m_steps{s} {}  // NOLINT

    /// This augmentation's steps followed by those of `then`.
    [[nodiscard]] augmentation then(const augmentation& next) const {
        augmentation out = *this;
        out.m_steps.insert(out.m_steps.end(), next.m_steps.begin(), next.m_steps.end());
        return out;
    }

    [[nodiscard]] bool empty() const noexcept { return m_steps.empty(); }
    [[nodiscard]] const std::vector<step>& steps() const noexcept { return m_steps; }

    /// Applies every step in order to `sample` (CHW, `shape`); `scratch` must hold shape.size() values.
    template <PixelValue T>
    void operator()(std::span<T> sample, sample_shape shape, splitmix64& g, std::span<T> scratch) const {
        for (const auto& s : m_steps) {
            if (const auto* crop = std::get_if<random_crop>(&s))
                apply(*crop, sample, shape, g, scratch);
            else
                apply(std::get<horizontal_flip>(s), sample, shape, g);
        }
    }

private:
    template <class T>
    static void apply(const random_crop& crop, std::span<T> sample, sample_shape shape, splitmix64& g, std::span<T> scratch) {
        const std::size_t p = crop.padding;
        // Offsets into the padded image, in [0, 2p]; the source pixel of (y, x) is (y + dy - p, x + dx - p).
        const auto dy = static_cast<std::ptrdiff_t>(g.below(2 * p + 1)) - static_cast<std::ptrdiff_t>(p);
        const auto dx = static_cast<std::ptrdiff_t>(g.below(2 * p + 1)) - static_cast<std::ptrdiff_t>(p);
        std::copy(sample.begin(), sample.end(), scratch.begin());
        const auto h = static_cast<std::ptrdiff_t>(shape.height), w = static_cast<std::ptrdiff_t>(shape.width);
        for (std::size_t c = 0; c < shape.channels; ++c) {
            const std::size_t plane = c * shape.height * shape.width;
            for (std::ptrdiff_t y = 0; y < h; ++y)
                for (std::ptrdiff_t x = 0; x < w; ++x) {
                    const std::ptrdiff_t sy = y + dy, sx = x + dx;
                    sample[plane + static_cast<std::size_t>(y * w + x)] =
                        (sy >= 0 && sy < h && sx >= 0 && sx < w) ? scratch[plane + static_cast<std::size_t>(sy * w + sx)] : T{0};
                }
        }
    }

    template <class T>
    static void apply(const horizontal_flip& flip, std::span<T> sample, sample_shape shape, splitmix64& g) {
        if (!(g.unit_float() < flip.probability)) return;
        for (std::size_t row = 0; row < shape.channels * shape.height; ++row) {
            auto first = sample.begin() + static_cast<std::ptrdiff_t>(row * shape.width);
            std::reverse(first, first + static_cast<std::ptrdiff_t>(shape.width));
        }
    }

    std::vector<step> m_steps;
};

/// Composition: `a | b` applies a, then b. A free function, so `random_crop{4} | horizontal_flip{}`
/// finds it by argument-dependent lookup and converts both steps.
[[nodiscard]] inline augmentation operator|(const augmentation& first, const augmentation& then) { return first.then(then); }

}  // namespace tessera::data
