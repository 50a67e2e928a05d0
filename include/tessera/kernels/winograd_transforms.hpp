#pragma once
// The transforms of Winograd's F(2×2, 3×3) on NHWC tiles (winograd.hpp runs them around its GEMMs):
//   input V = Bᵀ d B and its adjoint dd = B dV Bᵀ, output Y = Aᵀ M A and its adjoint dM = A dY Aᵀ,
//   weights U = G g Gᵀ and its adjoint dg = Gᵀ dU G,
// with the tile geometry, the strip layout the GEMMs read in place, and the loops over tiles and
// channels they share.
#include <algorithm>
#include <cstddef>
#include <type_traits>

#include "tessera/kernels/conv_chunks.hpp"
#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/simd.hpp"
#include "tessera/kernels/storage.hpp"
#include "tessera/tensor/dense.hpp"

namespace tessera::kernels::winograd {

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

/// Applies a one-dimensional transform f(a, b, c, d) down each column of a 4×4 tile, then along each row.
template <class V, class F>
inline void transform_2d(V (&d)[4][4], F&& f) noexcept {
#pragma GCC unroll 4
    for (std::size_t q = 0; q < 4; ++q) f(d[0][q], d[1][q], d[2][q], d[3][q]);
#pragma GCC unroll 4
    for (std::size_t r = 0; r < 4; ++r) f(d[r][0], d[r][1], d[r][2], d[r][3]);
}

// A batch or a scalar of C at p (named apart from xsimd::load and xsimd::store, which
// argument-dependent lookup finds for batch arguments; xsimd::store is the aligned one).
template <class V, class C, class S>
[[nodiscard]] inline V load_lanes(const S* p) noexcept {
    if constexpr (std::is_same_v<V, C>)
        return simd::get<C>(*p);
    else
        return simd::load<C>(p);
}
/// Stores v (a batch or a scalar) at p as S: C itself, or a type that stores from registers
/// (simd::in_register), rounded to nearest.
template <class S, class V>
inline void store_lanes(S* p, const V& v) noexcept {
    if constexpr (std::is_arithmetic_v<V>)
        *p = S(v);
    else if constexpr (std::is_same_v<S, typename V::value_type>)
        v.store_unaligned(p);
    else
        simd::store<typename V::value_type>(p, v);
}

/// Hides p's value from the optimiser. An unrolled loop that stores to (or loads from) 16 addresses
/// a run-time stride apart would otherwise get one precomputed pointer per address, hoisted out of
/// the tile loop: more than the general registers, so they are parked in vector registers or on the
/// stack and moved back for every tile. Stepping one opaque pointer by the stride costs an add each.
template <class P>
inline void opaque(P*& p) noexcept {
#if defined(__GNUC__)
    asm("" : "+r"(p));
#endif
}

/// Runs f.template operator()<V>(offset) over a channel run of n: batches of the SIMD width, then scalars.
template <class C, class F>
inline void over_channels(std::size_t n, F&& f) {
    constexpr std::size_t w = simd::batch<C>::size;
    std::size_t i = 0;
    for (; i + w <= n; i += w) f.template operator()<simd::batch<C>>(i);
    for (; i < n; ++i) f.template operator()<C>(i);
}

/// Tile t's image n and tile row y and column x, advanced one tile at a time.
using tile_cursor = kernels::detail::grid_cursor;

/// Runs f(at, i) for tiles t0 + i in [t0, t1), `at` the tile's cursor.
template <class F>
void for_each_tile(const tiling& tl, std::size_t t0, std::size_t t1, F&& f) {
    tile_cursor at(t0, tl.th, tl.tw);
    for (std::size_t i = 0; i < t1 - t0; ++i, at.next(tl.th, tl.tw)) f(at, i);
}

/// Which pixels of the 4×4 input patch of the tile at `at` lie in the image: bit 4·r + q for pixel
/// (r, q) (the rest reach into the padding).
[[nodiscard]] inline unsigned patch_mask(const tensor::shape& in, const window& g, const tile_cursor& at) noexcept {
    const auto inside = [&](std::size_t first, std::size_t k, std::size_t size) {
        return first + k >= g.pad && first + k < size + g.pad;
    };
    unsigned cols = 0, mask = 0;
    for (std::size_t q = 0; q < 4; ++q) cols |= inside(2 * at.x, q, in.w) ? 1u << q : 0u;
    for (std::size_t r = 0; r < 4; ++r) mask |= inside(2 * at.y, r, in.h) ? cols << (4 * r) : 0u;
    return mask;
}

/// The top-left pixel of the 4×4 input patch of the tile at `at` when the whole patch lies inside the
/// image (its pixels then lie at fixed offsets from it), else null: most tiles of a padded image, so
/// their loads need no per-pixel test (ResNet-20's 28 × 28 layers: 144 of 196 tiles).
template <class P>
[[nodiscard]] P* interior_patch(P* x, const tensor::shape& in, const window& g, const tile_cursor& at) noexcept {
    const std::size_t y0 = 2 * at.y, x0 = 2 * at.x;
    if (y0 < g.pad || x0 < g.pad || y0 + 4 > in.h + g.pad || x0 + 4 > in.w + g.pad) return nullptr;
    return x + ((at.n * in.h + (y0 - g.pad)) * in.w + (x0 - g.pad)) * in.c;
}

/// Pixel pointers of the 2×2 output block of the tile at `at` (null past an odd output's edge).
template <class P>
void block(P* y, const tiling& tl, std::size_t cout, const tile_cursor& at, P* (&px)[2][2]) {
    for (std::size_t r = 0; r < 2; ++r)
        for (std::size_t q = 0; q < 2; ++q) {
            const std::size_t oy = 2 * at.y + r, ox = 2 * at.x + q;
            px[r][q] = oy < tl.oh && ox < tl.ow ? y + ((at.n * tl.oh + oy) * tl.ow + ox) * cout : nullptr;
        }
}

/// Runs f(pixel, inside) for the tile at `at`, pixel(r, q) the address of the patch's pixel (r, q),
/// null in the padding: at fixed offsets from one pointer when the whole patch lies inside the image
/// (inside is std::true_type: no pixel is null, nothing to test), else from its offset and patch_mask.
template <class P, class F>
void with_patch(P* x, const tensor::shape& in, const window& g, const tile_cursor& at, F&& f) {
    if (P* base = interior_patch(x, in, g, at)) {
        const std::size_t row = in.w * in.c, c = in.c;
        f([base, row, c](std::size_t r, std::size_t q) { return base + r * row + q * c; }, std::true_type{});
        return;
    }
    // A patch at the image's edge: its pixels' offsets from pixel (0, 0)'s place (outside the image,
    // so only an offset), and which of them exist. Five values where 16 pointers would not fit the
    // general registers (they were parked in vector registers and moved back for every load).
    const auto origin = static_cast<std::ptrdiff_t>((at.n * in.h + 2 * at.y) * in.w + 2 * at.x) * static_cast<std::ptrdiff_t>(in.c) -
                        static_cast<std::ptrdiff_t>(g.pad * (in.w + 1) * in.c);
    const auto row = static_cast<std::ptrdiff_t>(in.w * in.c), c = static_cast<std::ptrdiff_t>(in.c);
    const unsigned mask = patch_mask(in, g, at);
    f([x, origin, row, c, mask](std::size_t r, std::size_t q) -> P* {
        return (mask >> (4 * r + q) & 1u) != 0 ? x + (origin + static_cast<std::ptrdiff_t>(r) * row + static_cast<std::ptrdiff_t>(q) * c)
                                                : nullptr;
    }, std::false_type{});
}

/// The 16 positions of a tile's transformed values for one run of channels, `stride` apart from p
/// (the strip layout of transform_input's v and the GEMMs' products), into d or from d.
template <class V, class C>
inline void load_positions(const C* p, std::size_t stride, V (&d)[4][4]) noexcept {
#pragma GCC unroll 4
    for (std::size_t r = 0; r < 4; ++r)
#pragma GCC unroll 4
        for (std::size_t q = 0; q < 4; ++q) {
            d[r][q] = load_lanes<V, C>(p);
            p += stride;
            opaque(p);
        }
}
template <class C, class V>
inline void store_positions(C* p, std::size_t stride, const V (&d)[4][4]) noexcept {
#pragma GCC unroll 4
    for (std::size_t r = 0; r < 4; ++r)
#pragma GCC unroll 4
        for (std::size_t q = 0; q < 4; ++q) {
            store_lanes(p, d[r][q]);
            p += stride;
            opaque(p);
        }
}

/// Runs f(p, r, q) for each pixel (r, q) of a tile's 4×4 patch that lies in the image, p the address
/// of its channel ci (pixel and inside as with_patch gives them): for a patch inside the image by one
/// pointer stepped along rows and pixels (see opaque), else through pixel(r, q), skipping the padding.
template <class P, class Pixel, class Inside, class F>
inline void for_each_patch_pixel(const Pixel& pixel, Inside, const tensor::shape& in, std::size_t ci, F&& f) {
    if constexpr (Inside::value) {
        P* row = pixel(0, 0) + ci;
#pragma GCC unroll 4
        for (std::size_t r = 0; r < 4; ++r) {
            P* p = row;
#pragma GCC unroll 4
            for (std::size_t q = 0; q < 4; ++q) {
                f(p, r, q);
                p += in.c;
                opaque(p);
            }
            row += in.w * in.c;
            opaque(row);
        }
    } else {
#pragma GCC unroll 4
        for (std::size_t r = 0; r < 4; ++r)
#pragma GCC unroll 4
            for (std::size_t q = 0; q < 4; ++q)
                if (P* p = pixel(r, q)) f(p + ci, r, q);
    }
}

/// V = Bᵀ d B for tiles [t0, t1): v[ξ][t - t0][ci] (positions nt·c apart).
template <class C, class S>
void transform_input(const S* x, const tensor::shape& in, const window& g, const tiling& tl, std::size_t t0,
                     std::size_t t1, C* v) {
    const std::size_t c = in.c, stride = (t1 - t0) * c;
    for_each_tile(tl, t0, t1, [&](const tile_cursor& at, std::size_t i) {
        C* dst = v + i * c;
        with_patch(x, in, g, at, [&](auto pixel, auto inside) {
            over_channels<C>(c, [&]<class V>(std::size_t ci) {
                V d[4][4];
                if constexpr (!decltype(inside)::value)  // the padding reads as zeros
                    for (auto& row : d)
                        for (auto& e : row) e = V(C(0));
                for_each_patch_pixel<const S>(pixel, inside, in, ci,
                                              [&](const S* p, std::size_t r, std::size_t q) { d[r][q] = load_lanes<V, C>(p); });
                transform_2d(d, input_1d<V>);
                store_positions(dst + ci, stride, d);
            });
        });
    });
}

/// Whether the tile at `at` is the first, in the tiles' order, to reach the pixel at (r, q) of its
/// 4×4 patch. A tile's patch shares its first two rows with the patch of the tile above and its first
/// two columns with the patch of the tile to its left (tiles step 2 pixels), and reaches its last two
/// rows and columns first; every pixel of an image lies in some patch.
[[nodiscard]] inline bool first_to_reach(const tile_cursor& at, std::size_t r, std::size_t q) noexcept {
    return (r >= 2 || at.y == 0) && (q >= 2 || at.x == 0);
}

/// dx = B dV Bᵀ summed over tiles [t0, t1) (dv laid out as transform_input's v), whole images in
/// the tiles' order: the first tile to reach a pixel (first_to_reach) writes it, the tiles after it
/// add to it (patches overlap by two pixels), so dx needs no zeroing beforehand.
template <class C>
void add_input_gradient(const C* dv, const tensor::shape& in, const window& g, const tiling& tl, std::size_t t0,
                        std::size_t t1, C* dx) {
    const std::size_t c = in.c, stride = (t1 - t0) * c;
    for_each_tile(tl, t0, t1, [&](const tile_cursor& at, std::size_t i) {
        const C* src = dv + i * c;
        // d into the pixel at p: written by the first tile to reach it, added to after.
        const auto put = [&at]<class V>(C* p, std::size_t r, std::size_t q, const V& d) {
            store_lanes(p, first_to_reach(at, r, q) ? d : load_lanes<V, C>(p) + d);
        };
        with_patch(dx, in, g, at, [&](auto pixel, auto inside) {
            over_channels<C>(c, [&]<class V>(std::size_t ci) {
                V d[4][4];
                load_positions(src + ci, stride, d);
                transform_2d(d, input_1d_adjoint<V>);
                for_each_patch_pixel<C>(pixel, inside, in, ci, [&](C* p, std::size_t r, std::size_t q) { put(p, r, q, d[r][q]); });
            });
        });
    });
}

/// y = Aᵀ M A for tiles [t0, t1) (m[ξ][t - t0][co]), written where the output exists, as C or as a
/// type that stores from registers (rounded to nearest).
template <class C, class Y>
void transform_output(const C* m, const tiling& tl, std::size_t cout, std::size_t t0, std::size_t t1, Y* y) {
    const std::size_t stride = (t1 - t0) * cout;
    for_each_tile(tl, t0, t1, [&](const tile_cursor& at, std::size_t i) {
        Y* px[2][2];
        block(y, tl, cout, at, px);
        const C* src = m + i * cout;
        over_channels<C>(cout, [&]<class V>(std::size_t co) {
            V d[4][4];
            load_positions(src + co, stride, d);
            V s[2][4];
#pragma GCC unroll 4
            for (std::size_t q = 0; q < 4; ++q) {
                s[0][q] = d[0][q] + d[1][q] + d[2][q];
                s[1][q] = d[1][q] - d[2][q] - d[3][q];
            }
#pragma GCC unroll 4
            for (std::size_t r = 0; r < 2; ++r) {
                if (px[r][0]) store_lanes(px[r][0] + co, s[r][0] + s[r][1] + s[r][2]);
                if (px[r][1]) store_lanes(px[r][1] + co, s[r][1] - s[r][2] - s[r][3]);
            }
        });
    });
}

/// dM = A dY Aᵀ for tiles [t0, t1): dm[ξ] an nt × cout matrix in strips of `width` columns (a multiple
/// of the SIMD width, or cout), positions nt·cout apart; zeros past an odd output's edge.
template <class C, class S>
void transform_output_gradient(const S* dy, const tiling& tl, std::size_t cout, std::size_t t0, std::size_t t1,
                               std::size_t width, C* dm) {
    const std::size_t nt = t1 - t0, stride = nt * cout;
    for_each_tile(tl, t0, t1, [&](const tile_cursor& at, std::size_t i) {
        const S* px[2][2];
        block(dy, tl, cout, at, px);
        over_channels<C>(cout, [&]<class V>(std::size_t co) {
            C* dst = dm + strip_index(i, co, nt, width) - co;  // + co below: vectors never straddle strips
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
            C* out = dst + co;
            const auto put = [&](const V& value) {
                store_lanes(out, value);
                out += stride;
                opaque(out);
            };
#pragma GCC unroll 4
            for (std::size_t r = 0; r < 4; ++r) {
                put(e[r][0]);
                put(e[r][0] + e[r][1]);
                put(e[r][0] - e[r][1]);
                put(-e[r][1]);
            }
        });
    });
}

/// Runs f(b, e) over [0, n) in blocks of a fixed size (a multiple of every SIMD width), the blocks
/// split between threads: where vectors end and scalar tails begin does not depend on the thread
/// count, so neither does any rounding (the compiler may contract a multiply and an add in one
/// path and not in the other).
inline constexpr std::size_t weight_block = std::size_t{1} << 10;
template <class F>
void for_each_block(parallelism par, std::size_t n, F&& f) {
    kernels::detail::parallel_ranges(par, (n + weight_block - 1) / weight_block, 1,
                                     [&](std::size_t b, std::size_t e, std::size_t) {
                                         for (std::size_t k = b; k < e; ++k)
                                             f(k * weight_block, std::min(n, (k + 1) * weight_block));
                                     });
}

/// U = G g Gᵀ for every channel pair: u[ξ] = U_ξ, cin × cout, from w [3][3][cin][cout]; or, when
/// `transposed`, u[ξ] = U_ξᵀ, cout × cin. Each in strips of strip_width columns.
template <class C, class W>
void transform_weights(const W* w, std::size_t cin, std::size_t cout, bool transposed, C* rows, C* u, parallelism par) {
    const std::size_t plane = cin * cout;
    // Row-major U_ξ first, vectorised over the contiguous channel pairs.
    for_each_block(par, plane, [&](std::size_t b, std::size_t e) {
        over_channels<C>(e - b, [&]<class V>(std::size_t k) {
            const std::size_t i = b + k;
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
    });
    // Then into strips: strip j0 of U_ξ holds rows ci, columns co in [j0, j0 + width); of U_ξᵀ rows co,
    // columns ci in [j0, j0 + width).
    const std::size_t width = strip_width<C>(transposed ? cin : cout);
    kernels::detail::parallel_ranges(par, positions, std::max<std::size_t>(1, weight_block / std::max<std::size_t>(plane, 1)),
                                     [&](std::size_t b, std::size_t e, std::size_t) {
        for (std::size_t xi = b; xi < e; ++xi) {
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
    });
}

/// dw += Gᵀ dU G for every channel pair (du laid out as transform_weights' u, not in strips).
template <class C>
void add_weight_gradient(const C* du, std::size_t cin, std::size_t cout, C* dw, parallelism par) {
    const std::size_t plane = cin * cout;
    for_each_block(par, plane, [&](std::size_t b, std::size_t e) {
        over_channels<C>(e - b, [&]<class V>(std::size_t k) {
            const std::size_t i = b + k;
            // Gᵀ·u: (u0 + (u1 + u2)/2, (u1 − u2)/2, (u1 + u2)/2 + u3)
            const auto adjoint = [](V u0, V u1, V u2, V u3, V(&out)[3]) {
                out[0] = u0 + (u1 + u2) * V(C(0.5));
                out[1] = (u1 - u2) * V(C(0.5));
                out[2] = (u1 + u2) * V(C(0.5)) + u3;
            };
            V h[4][3];
            for (std::size_t r = 0; r < 4; ++r)
                adjoint(load_lanes<V, C>(du + (r * 4) * plane + i), load_lanes<V, C>(du + (r * 4 + 1) * plane + i),
                        load_lanes<V, C>(du + (r * 4 + 2) * plane + i), load_lanes<V, C>(du + (r * 4 + 3) * plane + i), h[r]);
            for (std::size_t kx = 0; kx < 3; ++kx) {
                V col[3];
                adjoint(h[0][kx], h[1][kx], h[2][kx], h[3][kx], col);
                for (std::size_t ky = 0; ky < 3; ++ky) {
                    C* p = dw + (ky * 3 + kx) * plane + i;
                    store_lanes(p, load_lanes<V, C>(p) + col[ky]);
                }
            }
        });
    });
}

}  // namespace detail

}  // namespace tessera::kernels::winograd
