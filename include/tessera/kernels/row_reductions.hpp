#pragma once
// Sums, dot products and maxima over one row, in lanes: the sums' order is fixed by the row's length
// and the lane count alone, whatever the storage type, so a row reduces to the same bits wherever it
// is reduced (any thread, any range of rows).
#include <algorithm>
#include <cstddef>
#include <limits>

#include "tessera/kernels/simd.hpp"

namespace tessera::kernels::simd {

/// The batch<C>::size elements at p as a batch<C>, whatever T: in registers where T loads into them
/// (in_register), else one by one, to the same values.
template <class C, class T>
[[nodiscard]] inline batch<C> load_widened(const T* p) noexcept {
    if constexpr (in_register<C, T>) {
        return load<C>(p);
    } else {
        alignas(64) C lanes[batch<C>::size];
        for (std::size_t k = 0; k < batch<C>::size; ++k) lanes[k] = get<C>(p[k]);
        return batch<C>::load_aligned(lanes);
    }
}

/// The last n < batch<C>::size elements at p as a batch<C>, the lanes beyond them `fill`.
template <class C, class T>
[[nodiscard]] inline batch<C> load_tail(const T* p, std::size_t n, C fill) noexcept {
    alignas(64) C lanes[batch<C>::size];
    for (std::size_t k = 0; k < batch<C>::size; ++k) lanes[k] = k < n ? get<C>(p[k]) : fill;
    return batch<C>::load_aligned(lanes);
}

/// The lanes of v added in lane order.
template <class C>
[[nodiscard]] inline C add_lanes(const batch<C>& v) noexcept {
    alignas(64) C lanes[batch<C>::size];
    v.store_aligned(lanes);
    C sum = 0;
    for (std::size_t k = 0; k < batch<C>::size; ++k) sum += lanes[k];
    return sum;
}

/// Runs f(v, i) over the n elements of a row as batches v (the tail padded with `fill`), i the offset.
template <class C, class T, class F>
inline void over_batches(const T* x, std::size_t n, C fill, F&& f) {
    constexpr std::size_t w = batch<C>::size;
    std::size_t i = 0;
    for (; i + w <= n; i += w) f(load_widened<C>(x + i), i);
    if (i < n) f(load_tail<C>(x + i, n - i, fill), i);
}

/// Σ f(x[i]) over a row: lane k adds the elements k, k + w, … (w lanes; the tail padded with zeros,
/// whose f must be 0), then the lanes are added in order.
template <class C, class T, class F>
[[nodiscard]] inline C sum_of(const T* x, std::size_t n, F&& f) noexcept {
    batch<C> acc(C(0));
    over_batches<C>(x, n, C(0), [&](const batch<C>& v, std::size_t) { acc += f(v); });
    return add_lanes(acc);
}

/// Σ x[i] over a row, in sum_of's order.
template <class C, class T>
[[nodiscard]] inline C sum(const T* x, std::size_t n) noexcept {
    return sum_of<C>(x, n, [](const batch<C>& v) { return v; });
}

/// Σ a[i]·b[i] over a row, each product fused into its lane's sum (lane k: elements k, k + w, …),
/// the lanes then added in order.
template <class C, class A, class B>
[[nodiscard]] inline C dot(const A* a, const B* b, std::size_t n) noexcept {
    constexpr std::size_t w = batch<C>::size;
    batch<C> acc(C(0));
    std::size_t i = 0;
    for (; i + w <= n; i += w) acc = fused_multiply_add<C>(load_widened<C>(a + i), load_widened<C>(b + i), acc);
    if (i < n) acc = fused_multiply_add<C>(load_tail<C>(a + i, n - i, C(0)), load_tail<C>(b + i, n - i, C(0)), acc);
    return add_lanes(acc);
}

/// The largest of x[0..n) (−∞ for n = 0); exact, so its order does not matter.
template <class C>
[[nodiscard]] inline C max(const C* x, std::size_t n) noexcept {
    constexpr C lowest = -std::numeric_limits<C>::infinity();
    batch<C> top(lowest);
    over_batches<C>(x, n, lowest, [&](const batch<C>& v, std::size_t) { top = xsimd::max(top, v); });
    alignas(64) C lanes[batch<C>::size];
    top.store_aligned(lanes);
    return *std::max_element(lanes, lanes + batch<C>::size);
}

}  // namespace tessera::kernels::simd
