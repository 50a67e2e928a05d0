#pragma once
// 3×3 stride-1 convolutions by Winograd's minimal filtering F(2×2, 3×3) (Lavin and Gray, 2016),
// forward and both gradients, on NHWC tensors.
//
// Each 2×2 block of outputs (a tile) is computed from the 4×4 input patch under it:
//   Y = Aᵀ [U ⊙ V] A,   U = G g Gᵀ (per input/output channel pair),   V = Bᵀ d B (per input channel),
// and the sum over input channels of U ⊙ V is, for each of the 16 positions ξ of the 4×4 tile, one
// GEMM of (tiles × cin) by (cin × cout). That is 16 multiplies per tile and channel pair where
// im2col + GEMM does 36: 2.25× fewer. The gradients are the adjoints of the same linear maps:
//   dM = A dY Aᵀ,   dV_ξ = dM_ξ U_ξᵀ,   dd = B dV Bᵀ (added into dx),
//   dU_ξ = Σ_tiles V_ξᵀ dM_ξ,   dg = Gᵀ dU G (added into dw).
// Chunks hold whole images, as in im2col + GEMM, so results do not depend on the thread count.
#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "tessera/kernels/conv_chunks.hpp"
#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/simd.hpp"
#include "tessera/kernels/storage.hpp"
#include "tessera/tensor/dense.hpp"

namespace tessera::kernels::winograd {

/// Whether F(2×2, 3×3) computes a convolution with this window: 3×3 at stride 1, any padding.
[[nodiscard]] constexpr bool fits(const window& g) noexcept { return g.kh == 3 && g.kw == 3 && g.stride == 1; }

namespace detail {

inline constexpr std::size_t positions = 16;  // the 4×4 transformed tile

/// 2×2 output tiles over the output; the last row or column of tiles is cut off when the output
/// size is odd.
struct tiling {
    std::size_t oh, ow, th, tw, per_image;
    tiling(const tensor::shape& in, const window& g)
        : oh(g.out_h(in.h)), ow(g.out_w(in.w)), th((oh + 1) / 2), tw((ow + 1) / 2), per_image(th * tw) {}
};

/// Columns per strip of a K × N GEMM operand stored as strips (strip s: K rows of `width` columns,
/// contiguous): two or one SIMD vectors' width where N is a multiple, so that the GEMM reads each
/// strip in place as its packed panel (see gemm's B in place); else N itself: one strip, the plain
/// row-major matrix. Operands the convolution makes itself (transformed weights, output gradients)
/// are laid out this way so that no GEMM call packs them (with few tiles per chunk, packing B cost
/// as much as the multiplies).
template <class C>
[[nodiscard]] constexpr std::size_t strip_width(std::size_t n) noexcept {
    constexpr std::size_t one = kernels::detail::tile<C, 1>::nr, two = kernels::detail::tile<C, 2>::nr;
    return n % two == 0 ? two : n % one == 0 ? one : n;
}
/// Where column j of row i of a rows × n matrix in strips of `width` lies.
[[nodiscard]] constexpr std::size_t strip_index(std::size_t i, std::size_t j, std::size_t rows, std::size_t width) noexcept {
    return j / width * rows * width + i * width + j % width;
}

// The one-dimensional transforms, in place on four values (a vector of channels or one channel).
/// Bᵀ·d
template <class V>
inline void input_1d(V& a, V& b, V& c, V& d) noexcept {
    const V t0 = a - c, t1 = b + c, t2 = c - b, t3 = b - d;
    a = t0, b = t1, c = t2, d = t3;
}
/// B·u, the adjoint of Bᵀ·d
template <class V>
inline void input_1d_adjoint(V& a, V& b, V& c, V& d) noexcept {
    const V t0 = a, t1 = b - c + d, t2 = b + c - a, t3 = -d;
    a = t0, b = t1, c = t2, d = t3;
}

template <class V, class C, class S>
[[nodiscard]] inline V load_lanes(const S* p) noexcept {
    if constexpr (std::is_same_v<V, C>)
        return simd::get<C>(*p);
    else
        return simd::load<C>(p);
}
template <class C, class V>
inline void store_lanes(C* p, const V& v) noexcept {
    if constexpr (std::is_same_v<V, C>)
        *p = v;
    else
        v.store_unaligned(p);
}

/// Runs f.template operator()<V>(offset) over a channel run of n: batches of the SIMD width, then scalars.
template <class C, class F>
inline void over_channels(std::size_t n, F&& f) {
    constexpr std::size_t w = simd::batch<C>::size;
    std::size_t i = 0;
    for (; i + w <= n; i += w) f.template operator()<simd::batch<C>>(i);
    for (; i < n; ++i) f.template operator()<C>(i);
}

/// Tile t's image and tile row and column, advanced one tile at a time (no divisions per tile).
struct tile_cursor {
    std::size_t n, ty, tx;
    tile_cursor(const tiling& tl, std::size_t t) noexcept : n(t / tl.per_image), ty((t / tl.tw) % tl.th), tx(t % tl.tw) {}
    void next(const tiling& tl) noexcept {
        if (++tx < tl.tw) return;
        tx = 0;
        if (++ty < tl.th) return;
        ty = 0;
        ++n;
    }
};

/// Pixel pointers of the 4×4 input patch of the tile at `at` (null where it reaches into the padding).
template <class P>
void patch(P* x, const tensor::shape& in, const window& g, const tile_cursor& at, P* (&px)[4][4]) {
    for (std::size_t r = 0; r < 4; ++r) {
        const std::ptrdiff_t iy = static_cast<std::ptrdiff_t>(2 * at.ty + r) - static_cast<std::ptrdiff_t>(g.pad);
        for (std::size_t q = 0; q < 4; ++q) {
            const std::ptrdiff_t ix = static_cast<std::ptrdiff_t>(2 * at.tx + q) - static_cast<std::ptrdiff_t>(g.pad);
            const bool inside = iy >= 0 && ix >= 0 && iy < static_cast<std::ptrdiff_t>(in.h) && ix < static_cast<std::ptrdiff_t>(in.w);
            px[r][q] = inside ? x + ((at.n * in.h + static_cast<std::size_t>(iy)) * in.w + static_cast<std::size_t>(ix)) * in.c
                              : nullptr;
        }
    }
}

/// Pixel pointers of the 2×2 output block of the tile at `at` (null past an odd output's edge).
template <class P>
void block(P* y, const tiling& tl, std::size_t cout, const tile_cursor& at, P* (&px)[2][2]) {
    for (std::size_t r = 0; r < 2; ++r)
        for (std::size_t q = 0; q < 2; ++q) {
            const std::size_t oy = 2 * at.ty + r, ox = 2 * at.tx + q;
            px[r][q] = oy < tl.oh && ox < tl.ow ? y + ((at.n * tl.oh + oy) * tl.ow + ox) * cout : nullptr;
        }
}

/// V = Bᵀ d B for tiles [t0, t1): v[ξ][t - t0][ci] (positions nt·c apart).
template <class C, class S>
void transform_input(const S* x, const tensor::shape& in, const window& g, const tiling& tl, std::size_t t0,
                     std::size_t t1, C* v) {
    const std::size_t c = in.c, stride = (t1 - t0) * c;
    tile_cursor at(tl, t0);
    for (std::size_t t = t0; t < t1; ++t, at.next(tl)) {
        const S* px[4][4];
        patch(x, in, g, at, px);
        C* dst = v + (t - t0) * c;
        over_channels<C>(c, [&]<class V>(std::size_t ci) {
            V d[4][4];
            #pragma GCC unroll 4
            for (std::size_t r = 0; r < 4; ++r)
                #pragma GCC unroll 4
                for (std::size_t q = 0; q < 4; ++q) d[r][q] = px[r][q] ? load_lanes<V, C>(px[r][q] + ci) : V(C(0));
            #pragma GCC unroll 4
            for (std::size_t q = 0; q < 4; ++q) input_1d(d[0][q], d[1][q], d[2][q], d[3][q]);
            #pragma GCC unroll 4
            for (std::size_t r = 0; r < 4; ++r) input_1d(d[r][0], d[r][1], d[r][2], d[r][3]);
            #pragma GCC unroll 4
            for (std::size_t r = 0; r < 4; ++r)
                #pragma GCC unroll 4
                for (std::size_t q = 0; q < 4; ++q) store_lanes(dst + (r * 4 + q) * stride + ci, d[r][q]);
        });
    }
}

/// dx += B dV Bᵀ for tiles [t0, t1) (dv laid out as transform_input's v); tiles overlap by two pixels.
template <class C>
void add_input_gradient(const C* dv, const tensor::shape& in, const window& g, const tiling& tl, std::size_t t0,
                        std::size_t t1, C* dx) {
    const std::size_t c = in.c, stride = (t1 - t0) * c;
    tile_cursor at(tl, t0);
    for (std::size_t t = t0; t < t1; ++t, at.next(tl)) {
        C* px[4][4];
        patch(dx, in, g, at, px);
        const C* src = dv + (t - t0) * c;
        over_channels<C>(c, [&]<class V>(std::size_t ci) {
            V d[4][4];
            #pragma GCC unroll 4
            for (std::size_t r = 0; r < 4; ++r)
                #pragma GCC unroll 4
                for (std::size_t q = 0; q < 4; ++q) d[r][q] = load_lanes<V, C>(src + (r * 4 + q) * stride + ci);
            #pragma GCC unroll 4
            for (std::size_t q = 0; q < 4; ++q) input_1d_adjoint(d[0][q], d[1][q], d[2][q], d[3][q]);
            #pragma GCC unroll 4
            for (std::size_t r = 0; r < 4; ++r) input_1d_adjoint(d[r][0], d[r][1], d[r][2], d[r][3]);
            #pragma GCC unroll 4
            for (std::size_t r = 0; r < 4; ++r)
                #pragma GCC unroll 4
                for (std::size_t q = 0; q < 4; ++q)
                    if (px[r][q]) store_lanes(px[r][q] + ci, load_lanes<V, C>(px[r][q] + ci) + d[r][q]);
        });
    }
}

/// y = Aᵀ M A for tiles [t0, t1) (m[ξ][t - t0][co]), written where the output exists.
template <class C>
void transform_output(const C* m, const tiling& tl, std::size_t cout, std::size_t t0, std::size_t t1, C* y) {
    const std::size_t stride = (t1 - t0) * cout;
    tile_cursor at(tl, t0);
    for (std::size_t t = t0; t < t1; ++t, at.next(tl)) {
        C* px[2][2];
        block(y, tl, cout, at, px);
        const C* src = m + (t - t0) * cout;
        over_channels<C>(cout, [&]<class V>(std::size_t co) {
            V s[2][4];
            #pragma GCC unroll 4
            for (std::size_t q = 0; q < 4; ++q) {
                const V m0 = load_lanes<V, C>(src + q * stride + co), m1 = load_lanes<V, C>(src + (4 + q) * stride + co);
                const V m2 = load_lanes<V, C>(src + (8 + q) * stride + co), m3 = load_lanes<V, C>(src + (12 + q) * stride + co);
                s[0][q] = m0 + m1 + m2;
                s[1][q] = m1 - m2 - m3;
            }
            #pragma GCC unroll 4
            for (std::size_t r = 0; r < 2; ++r) {
                if (px[r][0]) store_lanes(px[r][0] + co, s[r][0] + s[r][1] + s[r][2]);
                if (px[r][1]) store_lanes(px[r][1] + co, s[r][1] - s[r][2] - s[r][3]);
            }
        });
    }
}

/// dM = A dY Aᵀ for tiles [t0, t1): dm[ξ] an nt × cout matrix in strips of `width` columns (a multiple
/// of the SIMD width, or cout), positions nt·cout apart; zeros past an odd output's edge.
template <class C, class S>
void transform_output_gradient(const S* dy, const tiling& tl, std::size_t cout, std::size_t t0, std::size_t t1,
                               std::size_t width, C* dm) {
    const std::size_t nt = t1 - t0, stride = nt * cout;
    tile_cursor at(tl, t0);
    for (std::size_t t = t0; t < t1; ++t, at.next(tl)) {
        const S* px[2][2];
        block(dy, tl, cout, at, px);
        over_channels<C>(cout, [&]<class V>(std::size_t co) {
            C* dst = dm + strip_index(t - t0, co, nt, width) - co;  // + co below: vectors never straddle strips
            V d[2][2];
            #pragma GCC unroll 4
            for (std::size_t r = 0; r < 2; ++r)
                #pragma GCC unroll 4
                for (std::size_t q = 0; q < 2; ++q) d[r][q] = px[r][q] ? load_lanes<V, C>(px[r][q] + co) : V(C(0));
            V e[4][2];  // A·dY: (v0, v0 + v1, v0 − v1, −v1) down each column
            #pragma GCC unroll 4
            for (std::size_t q = 0; q < 2; ++q) {
                e[0][q] = d[0][q];
                e[1][q] = d[0][q] + d[1][q];
                e[2][q] = d[0][q] - d[1][q];
                e[3][q] = -d[1][q];
            }
            #pragma GCC unroll 4
            for (std::size_t r = 0; r < 4; ++r) {
                C* row = dst + r * 4 * stride + co;
                store_lanes(row, e[r][0]);
                store_lanes(row + stride, e[r][0] + e[r][1]);
                store_lanes(row + 2 * stride, e[r][0] - e[r][1]);
                store_lanes(row + 3 * stride, -e[r][1]);
            }
        });
    }
}

/// U = G g Gᵀ for every channel pair: u[ξ] = U_ξ, cin × cout, from w [3][3][cin][cout]; or, when
/// `transposed`, u[ξ] = U_ξᵀ, cout × cin. Each in strips of strip_width columns.
template <class C, class W>
void transform_weights(const W* w, std::size_t cin, std::size_t cout, bool transposed, C* rows, C* u) {
    const std::size_t plane = cin * cout;
    // Row-major U_ξ first, vectorised over the contiguous channel pairs.
    over_channels<C>(plane, [&]<class V>(std::size_t i) {
        V h[4][3];  // G·g: (g0, (g0 + g1 + g2)/2, (g0 − g1 + g2)/2, g2) down each column
        for (std::size_t kx = 0; kx < 3; ++kx) {
            const V g0 = load_lanes<V, C>(w + kx * plane + i), g1 = load_lanes<V, C>(w + (3 + kx) * plane + i);
            const V g2 = load_lanes<V, C>(w + (6 + kx) * plane + i);
            h[0][kx] = g0;
            h[1][kx] = (g0 + g1 + g2) * V(C(0.5));
            h[2][kx] = (g0 - g1 + g2) * V(C(0.5));
            h[3][kx] = g2;
        }
        for (std::size_t r = 0; r < 4; ++r) {
            store_lanes(rows + (r * 4 + 0) * plane + i, h[r][0]);
            store_lanes(rows + (r * 4 + 1) * plane + i, (h[r][0] + h[r][1] + h[r][2]) * V(C(0.5)));
            store_lanes(rows + (r * 4 + 2) * plane + i, (h[r][0] - h[r][1] + h[r][2]) * V(C(0.5)));
            store_lanes(rows + (r * 4 + 3) * plane + i, h[r][2]);
        }
    });
    // Then into strips: strip j0 of U_ξ holds rows ci, columns co in [j0, j0 + width); of U_ξᵀ rows co,
    // columns ci in [j0, j0 + width).
    const std::size_t width = strip_width<C>(transposed ? cin : cout);
    for (std::size_t xi = 0; xi < positions; ++xi) {
        const C* from = rows + xi * plane;
        C* to = u + xi * plane;
        if (!transposed) {
            for (std::size_t j0 = 0; j0 < cout; j0 += width)
                for (std::size_t ci = 0; ci < cin; ++ci)
                    std::copy_n(from + ci * cout + j0, width, to + j0 * cin + ci * width);
        } else {
            for (std::size_t j0 = 0; j0 < cin; j0 += width)
                for (std::size_t co = 0; co < cout; ++co)
                    for (std::size_t j = 0; j < width; ++j) to[j0 * cout + co * width + j] = from[(j0 + j) * cout + co];
        }
    }
}

/// dw += Gᵀ dU G for every channel pair (du laid out as transform_weights' u).
template <class C>
void add_weight_gradient(const C* du, std::size_t cin, std::size_t cout, C* dw) {
    const std::size_t plane = cin * cout;
    // Gᵀ·u: (u0 + (u1 + u2)/2, (u1 − u2)/2, (u1 + u2)/2 + u3)
    const auto adjoint = [](C u0, C u1, C u2, C u3, C (&out)[3]) {
        out[0] = u0 + (u1 + u2) * C(0.5);
        out[1] = (u1 - u2) * C(0.5);
        out[2] = (u1 + u2) * C(0.5) + u3;
    };
    for (std::size_t i = 0; i < plane; ++i) {
        C h[4][3];
        for (std::size_t r = 0; r < 4; ++r)
            adjoint(du[(r * 4) * plane + i], du[(r * 4 + 1) * plane + i], du[(r * 4 + 2) * plane + i],
                    du[(r * 4 + 3) * plane + i], h[r]);
        for (std::size_t kx = 0; kx < 3; ++kx) {
            C col[3];
            adjoint(h[0][kx], h[1][kx], h[2][kx], h[3][kx], col);
            for (std::size_t ky = 0; ky < 3; ++ky) dw[(ky * 3 + kx) * plane + i] += col[ky];
        }
    }
}

/// Tiles per chunk: whole images, their transformed tiles (16 · (cin + cout) values per tile) about
/// as large as im2col's chunks.
[[nodiscard]] inline std::size_t chunk_tiles(const tiling& tl, std::size_t images, std::size_t cin, std::size_t cout,
                                             std::size_t elem) {
    return kernels::detail::conv_chunk_rows(positions * (cin + cout), tl.per_image, images, elem);
}

/// x as an array kernels can load from in registers: x itself, or a converted copy in scratch.
template <class C, class T>
[[nodiscard]] auto registers_view(const T* x, std::size_t n, aligned_vector<C>& scratch, parallelism par) {
    if constexpr (simd::in_register<C, T>)
        return x;
    else
        return load_compute<C>(x, n, scratch, par);
}

}  // namespace detail

/// y = conv(x, w) for a window that fits (3×3, stride 1): as kernels::conv2d_forward.
template <Compute C, Storage T, Storage W, Storage Y>
void conv2d_forward(const T* x, const tensor::shape& in, const W* w, std::size_t cout, const window& g, Y* y,
                    workspace<C>& ws, gemm_options opt = {}) {
    const detail::tiling tl(in, g);
    const tensor::shape out = g.output(in, cout);
    const parallelism par{opt.threads, opt.pool};
    const std::size_t cin = in.c, plane = cin * cout, tiles = in.n * tl.per_image, width = detail::strip_width<C>(cout);
    const auto* xs = detail::registers_view<C>(x, in.size(), ws.a, par);
    const auto* wr = detail::registers_view<C>(w, 9 * plane, ws.col, par);
    store_compute<C, Y> dst(y, out.size(), ws.c, par);
    if (ws.filters.size() < 2 * detail::positions * plane) ws.filters.resize(2 * detail::positions * plane);
    C* u = ws.filters.data();
    detail::transform_weights(wr, cin, cout, false, u + detail::positions * plane, u);
    const std::size_t chunk = detail::chunk_tiles(tl, in.n, cin, cout, sizeof(C));
    const std::size_t chunks = (tiles + chunk - 1) / chunk, threads = kernels::detail::chunk_threads(opt, chunks);
    auto& v = kernels::detail::thread_columns(ws, threads, detail::positions * chunk * cin);
    auto& m = kernels::detail::thread_buffers(ws.tiles, threads, detail::positions * chunk * cout);
    C* y0 = dst.target();
    kernels::detail::for_each_chunk(chunks, threads, opt.pool, [&](std::size_t t, std::size_t c) {
        const std::size_t t0 = c * chunk, t1 = std::min(tiles, t0 + chunk), nt = t1 - t0;
        detail::transform_input(xs, in, g, tl, t0, t1, v[t].data());
        for (std::size_t xi = 0; xi < detail::positions; ++xi)
            for (std::size_t j = 0; j < cout; j += width)  // M_ξ = V_ξ U_ξ, a strip of U at a time
                gemm(trans::no, trans::no, nt, width, cin, C(1), v[t].data() + xi * nt * cin, cin,
                     u + xi * plane + j * cin, width, C(0), m[t].data() + xi * nt * cout + j, cout, {1, &ws.packs[t]});
        detail::transform_output(m[t].data(), tl, cout, t0, t1, y0);
    });
    dst.commit();
}

/// dx = the gradient of conv2d_forward with respect to its input (overwrites dx).
template <Compute C, Storage D, Storage W, Storage X>
void conv2d_backward_data(const D* dy, const tensor::shape& in, const W* w, std::size_t cout, const window& g, X* dx,
                          workspace<C>& ws, gemm_options opt = {}) {
    const detail::tiling tl(in, g);
    const tensor::shape out = g.output(in, cout);
    const parallelism par{opt.threads, opt.pool};
    const std::size_t cin = in.c, plane = cin * cout, tiles = in.n * tl.per_image, width = detail::strip_width<C>(cin);
    const auto* dys = detail::registers_view<C>(dy, out.size(), ws.b, par);
    const auto* wr = detail::registers_view<C>(w, 9 * plane, ws.col, par);
    store_compute<C, X> dst(dx, in.size(), ws.c, par);
    C* acc = dst.target();
    std::fill(acc, acc + in.size(), C(0));
    if (ws.filters.size() < 2 * detail::positions * plane) ws.filters.resize(2 * detail::positions * plane);
    C* ut = ws.filters.data();
    detail::transform_weights(wr, cin, cout, true, ut + detail::positions * plane, ut);
    const std::size_t chunk = detail::chunk_tiles(tl, in.n, cin, cout, sizeof(C));
    const std::size_t chunks = (tiles + chunk - 1) / chunk, threads = kernels::detail::chunk_threads(opt, chunks);
    auto& v = kernels::detail::thread_columns(ws, threads, detail::positions * chunk * cin);
    auto& m = kernels::detail::thread_buffers(ws.tiles, threads, detail::positions * chunk * cout);
    kernels::detail::for_each_chunk(chunks, threads, opt.pool, [&](std::size_t t, std::size_t c) {
        const std::size_t t0 = c * chunk, t1 = std::min(tiles, t0 + chunk), nt = t1 - t0;
        detail::transform_output_gradient(dys, tl, cout, t0, t1, cout, m[t].data());
        for (std::size_t xi = 0; xi < detail::positions; ++xi)
            for (std::size_t j = 0; j < cin; j += width)  // dV_ξ = dM_ξ U_ξᵀ, a strip of U_ξᵀ at a time
                gemm(trans::no, trans::no, nt, width, cout, C(1), m[t].data() + xi * nt * cout, cout,
                     ut + xi * plane + j * cout, width, C(0), v[t].data() + xi * nt * cin + j, cin, {1, &ws.packs[t]});
        detail::add_input_gradient(v[t].data(), in, g, tl, t0, t1, acc);  // chunks hold whole images: no overlap
    });
    dst.commit();
}

/// dw += the gradient of conv2d_forward with respect to its weights ([3][3][cin][cout], in C).
template <Compute C, Storage T, Storage D>
void conv2d_backward_weight(const T* x, const tensor::shape& in, const D* dy, std::size_t cout, const window& g, C* dw,
                            workspace<C>& ws, gemm_options opt = {}) {
    const detail::tiling tl(in, g);
    const tensor::shape out = g.output(in, cout);
    const parallelism par{opt.threads, opt.pool};
    const auto* xs = detail::registers_view<C>(x, in.size(), ws.a, par);
    const auto* dys = detail::registers_view<C>(dy, out.size(), ws.b, par);
    const std::size_t cin = in.c, plane = cin * cout, size = detail::positions * plane, tiles = in.n * tl.per_image;
    const std::size_t width = detail::strip_width<C>(cout);
    const std::size_t chunk = detail::chunk_tiles(tl, in.n, cin, cout, sizeof(C));
    const std::size_t chunks = (tiles + chunk - 1) / chunk;
    const kernels::detail::lane_plan plan = kernels::detail::plan_lanes(chunks, size, sizeof(C), opt);
    auto& v = kernels::detail::thread_columns(ws, plan.threads, detail::positions * chunk * cin);
    auto& m = kernels::detail::thread_buffers(ws.tiles, plan.threads, detail::positions * chunk * cout);
    if (ws.filters.size() < size) ws.filters.resize(size);
    C* du = ws.filters.data();
    kernels::detail::sum_in_lanes(plan, chunks, du, true, size, ws, opt,
                                  [&](std::size_t t, std::size_t c, C* target, C beta, const gemm_options& o) {
        const std::size_t t0 = c * chunk, t1 = std::min(tiles, t0 + chunk), nt = t1 - t0;
        detail::transform_input(xs, in, g, tl, t0, t1, v[t].data());
        detail::transform_output_gradient(dys, tl, cout, t0, t1, width, m[t].data());
        for (std::size_t xi = 0; xi < detail::positions; ++xi)
            for (std::size_t j = 0; j < cout; j += width)  // dU_ξ += V_ξᵀ dM_ξ, a strip of dM_ξ at a time
                gemm(trans::yes, trans::no, cin, width, nt, C(1), v[t].data() + xi * nt * cin, cin,
                     m[t].data() + xi * nt * cout + j * nt, width, beta, target + xi * plane + j, cout, o);
    });
    detail::add_weight_gradient(du, cin, cout, dw);
}

}  // namespace tessera::kernels::winograd
