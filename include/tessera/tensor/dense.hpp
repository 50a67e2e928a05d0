#pragma once
// Dense tensors (xtensor containers) and the activation shape used by every kernel: NHWC.
#include <cstddef>
#include <stdexcept>
#include <string>

#include <xtensor/xtensor.hpp>

#include "tessera/tensor/half.hpp"
#include "tessera/tensor/page_allocator.hpp"

namespace tessera::tensor {

/// A row-major dense tensor of rank N (xtensor container; works with float, double, half, bfloat16),
/// its buffer from page_allocator.
template <class T, std::size_t N>
using dense = xt::xtensor<T, N, xt::layout_type::row_major, page_allocator<T>>;

/// Activation shape, NHWC: batch, height, width, channels. Feature vectors are n × 1 × 1 × c.
/// Why NHWC: a convolution over a whole micro-batch is one GEMM with M = n·h·w (tall, so the blocked
/// GEMM runs full tiles even on 7×7 maps), 1×1 convolutions need no im2col at all, and batch norm and
/// the epilogues vectorise across the contiguous channel dimension.
struct shape {
    std::size_t n = 1, h = 1, w = 1, c = 1;

    [[nodiscard]] constexpr std::size_t size() const noexcept { return n * h * w * c; }
    [[nodiscard]] constexpr std::size_t per_sample() const noexcept { return h * w * c; }
    [[nodiscard]] constexpr std::size_t pixels() const noexcept { return n * h * w; }
    [[nodiscard]] constexpr shape with_batch(std::size_t b) const noexcept { return {b, h, w, c}; }
    friend constexpr bool operator==(const shape&, const shape&) = default;

    [[nodiscard]] std::string str() const {
        return "(n=" + std::to_string(n) + ", h=" + std::to_string(h) + ", w=" + std::to_string(w) +
               ", c=" + std::to_string(c) + ")";
    }
};

/// Thrown when a tensor's shape does not fit an operation; what() names both shapes.
class shape_error : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

/// Allocates an NHWC tensor of the given shape (values uninitialised for arithmetic types).
template <class T>
[[nodiscard]] dense<T, 4> make_nhwc(const shape& s) {
    return dense<T, 4>::from_shape({s.n, s.h, s.w, s.c});
}

/// The NHWC shape of a rank-4 tensor.
template <class T>
[[nodiscard]] shape shape_of(const dense<T, 4>& t) noexcept {
    return {t.shape()[0], t.shape()[1], t.shape()[2], t.shape()[3]};
}

}  // namespace tessera::tensor
