#pragma once
// Initial weights: random draws stored in a weight type. Not arithmetic, but as heavy as a kernel
// where a network has tens of millions of weights (each a normal draw: two engine calls, a log and a
// square root), so kernels/instances.hpp compiles them once with the kernels.
#include <random>
#include <span>

#include "tessera/kernels/gemm.hpp"  // detail::store_as
#include "tessera/kernels/storage.hpp"

namespace tessera::kernels {

/// Fills `values` with normal(0, stddev) draws from `rng`, stored in the weight type (rounded to nearest).
template <Storage W>
void fill_normal(std::span<W> values, double stddev, std::mt19937_64& rng) {
    std::normal_distribution<double> dist(0.0, stddev);
    for (auto& v : values) v = detail::store_as<W>(dist(rng));
}

/// Fills `values` with uniform(-bound, bound) draws from `rng`, stored in the weight type.
template <Storage W>
void fill_uniform(std::span<W> values, double bound, std::mt19937_64& rng) {
    std::uniform_real_distribution<double> dist(-bound, bound);
    for (auto& v : values) v = detail::store_as<W>(dist(rng));
}

}  // namespace tessera::kernels
