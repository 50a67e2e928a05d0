#pragma once
// ReLU forward and backward, elementwise over any storage type.
#include <cstddef>

#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/simd.hpp"
#include "tessera/kernels/storage.hpp"

namespace tessera::kernels {

/// y = max(x, 0). y may be x (in place). Large tensors are split between `threads`. Storage types
/// that load into registers directly (simd::in_register) are read and written in place.
template <Compute C, Storage T, Storage Y>
void relu_forward(const T* x, std::size_t n, Y* y, workspace<C>& ws, parallelism threads = {}) {
    if constexpr (simd::in_register<C, T> && simd::in_register<C, Y>) {  // no converted copies
        detail::parallel_ranges(threads, n, detail::elementwise_grain(threads), [&](std::size_t b, std::size_t e, std::size_t) {
            simd::relu<C>(x + b, y + b, e - b);
        });
        return;
    }
    const C* xc = load_compute<C>(x, n, ws.a, threads);
    store_compute<C, Y> dst(y, n, ws.c, threads);
    C* out = dst.target();
    detail::parallel_ranges(threads, n, detail::elementwise_grain(threads), [&](std::size_t b, std::size_t e, std::size_t) {
        simd::relu<C>(xc + b, out + b, e - b);
    });
    dst.commit();
}

/// dx = dy where the forward output y was positive, else 0 (y, not x, so the input need not be kept).
template <Compute C, Storage T, Storage D, Storage X>
void relu_backward(const T* y, const D* dy, std::size_t n, X* dx, workspace<C>& ws, parallelism threads = {}) {
    if constexpr (simd::in_register<C, T> && simd::in_register<C, D> && simd::in_register<C, X>) {
        detail::parallel_ranges(threads, n, detail::elementwise_grain(threads), [&](std::size_t b, std::size_t e, std::size_t) {
            simd::relu_backward<C>(y + b, dy + b, dx + b, e - b);
        });
        return;
    }
    const C* yc = load_compute<C>(y, n, ws.a, threads);
    const C* dyc = load_compute<C>(dy, n, ws.b, threads);
    store_compute<C, X> dst(dx, n, ws.c, threads);
    C* out = dst.target();
    detail::parallel_ranges(threads, n, detail::elementwise_grain(threads), [&](std::size_t b, std::size_t e, std::size_t) {
        simd::relu_backward<C>(yc + b, dyc + b, out + b, e - b);
    });
    dst.commit();
}

}  // namespace tessera::kernels
