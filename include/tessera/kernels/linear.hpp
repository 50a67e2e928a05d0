#pragma once
// Fully connected layer kernels: y = x·Wᵀ + b with W stored (out × in), as PyTorch stores it.
#include <cstddef>

#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/storage.hpp"

namespace tessera::kernels {

/// x: batch × in, w: out × in, b: out (may be null), y: batch × out.
template <Compute C, Storage T, Storage W, Storage Y>
void linear_forward(const T* x, std::size_t batch, std::size_t in, const W* w, const W* b, std::size_t out, Y* y,
                    workspace<C>& ws, gemm_options opt = {}, const tensor::rounding& rounding = {}) {
    store_compute<C, Y> dst(y, batch * out, ws.c, {}, rounding);
    C* yo = dst.target();
    gemm(trans::no, trans::yes, batch, out, in, C(1), x, in, w, in, C(0), yo, out, opt);
    if (b != nullptr)
        for (std::size_t r = 0; r < batch; ++r)
            for (std::size_t o = 0; o < out; ++o) yo[r * out + o] += detail::load_as<C>(b[o]);
    dst.commit();
}

/// dx = dy·W (overwritten).
template <Compute C, Storage D, Storage W, Storage X>
void linear_backward_data(const D* dy, std::size_t batch, std::size_t in, const W* w, std::size_t out, X* dx,
                          workspace<C>& ws, gemm_options opt = {}, const tensor::rounding& rounding = {}) {
    store_compute<C, X> dst(dx, batch * in, ws.c, {}, rounding);
    gemm(trans::no, trans::no, batch, in, out, C(1), dy, out, w, in, C(0), dst.target(), in, opt);
    dst.commit();
}

/// dw += dyᵀ·x, db += Σ dy (skipped when db is null).
template <Compute C, Storage T, Storage D>
void linear_backward_weights(const T* x, const D* dy, std::size_t batch, std::size_t in, std::size_t out, C* dw, C* db,
                             workspace<C>& ws, gemm_options opt = {}) {
    gemm(trans::yes, trans::no, out, in, batch, C(1), dy, out, x, in, C(1), dw, in, opt);
    if (db != nullptr) {
        const C* dyc = load_compute<C>(dy, batch * out, ws.b);
        for (std::size_t r = 0; r < batch; ++r)
            for (std::size_t o = 0; o < out; ++o) db[o] += dyc[r * out + o];
    }
}

/// dx = dy·W (overwritten; skipped when dx is null), dw += dyᵀ·x, db += Σ dy (skipped when null).
template <Compute C, Storage T, Storage D, Storage W, Storage X>
void linear_backward(const T* x, const D* dy, std::size_t batch, std::size_t in, const W* w, std::size_t out, X* dx,
                     C* dw, C* db, workspace<C>& ws, gemm_options opt = {}, const tensor::rounding& rounding = {}) {
    if (dx != nullptr) linear_backward_data(dy, batch, in, w, out, dx, ws, opt, rounding);
    linear_backward_weights(x, dy, batch, in, out, dw, db, ws, opt);
}

}  // namespace tessera::kernels
