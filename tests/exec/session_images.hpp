// The small images and the 2-stage ResNet-20 configuration of the session-tools and precision tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "tessera/config.hpp"
#include "tessera/data.hpp"
#include "tessera/tensor/dense.hpp"

namespace tessera::test::session_images {

namespace cfg = tessera::config;
namespace data = tessera::data;

inline constexpr std::size_t side = 8;
inline const tessera::tensor::shape sample{1, side, side, 1};

inline data::in_memory_dataset<std::uint8_t> images(std::size_t n, std::uint64_t seed = 3) {
    const data::synthetic_images s(n, {1, side, side}, 10, seed);
    std::vector<std::uint8_t> values(n * side * side);
    std::vector<data::label_t> labels(n);
    for (std::size_t i = 0; i < n; ++i)
        labels[i] = s.read(i, std::span<std::uint8_t>(values).subspan(i * side * side, side * side));
    return {{1, side, side}, 10, std::move(values), std::move(labels), "images"};
}

template <class P>
using train_cfg = cfg::config<P, cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<3>,
                              cfg::device_iterations<2>, cfg::eight_bit_io>;
inline const data::normalization norm{.mean = {0.5f}, .stddev = {0.25f}};

}  // namespace tessera::test::session_images
