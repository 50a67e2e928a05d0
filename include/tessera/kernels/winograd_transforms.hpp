#pragma once
// The transforms of Winograd's F(m×m, 3×3) on NHWC tiles, m = 2 or 4 (winograd.hpp runs them around its
// GEMMs): input V = Bᵀ d B and its adjoint dd = B dV Bᵀ, output Y = Aᵀ M A and its adjoint dM = A dY Aᵀ,
// weights U = G g Gᵀ and its adjoint dg = Gᵀ dU G, on (m + 2) × (m + 2) transformed tiles, with the tile
// geometry, the strip layout the GEMMs read in place, and the loops over tiles and channels they share.
// The matrices are Lavin and Gray's (2016): F(2×2, 3×3) interpolates at 0, ±1 and ∞, F(4×4, 3×3) at 0,
// ±1, ±2 and ∞.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tessera/kernels/conv_chunks.hpp"
#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/inline_lambda.hpp"
#include "tessera/kernels/affine_map.hpp"
#include "tessera/kernels/batch_norm_rows.hpp"
#include "tessera/kernels/simd.hpp"
#include "tessera/kernels/storage.hpp"
#include "tessera/tensor/dense.hpp"

namespace tessera::kernels::winograd {

namespace detail {

/// Whether the transforms implement F(m×m, 3×3): m = 2 or 4.
[[nodiscard]] constexpr bool supported_tile(std::size_t m) noexcept { return m == 2 || m == 4; }
/// The side of an m × m output tile's input patch and transformed tile, and its positions.
template <std::size_t M>
inline constexpr std::size_t patch = M + 2;
template <std::size_t M>
inline constexpr std::size_t positions = patch<M> * patch<M>;

/// m × m output tiles over the output; the last row or column of tiles is cut off where the output
/// size is not a multiple of m.
template <std::size_t M>
struct tiling {
    static_assert(supported_tile(M), "Winograd's transforms are F(2x2, 3x3) and F(4x4, 3x3): the output tile is 2 or 4");
    std::size_t oh, ow, th, tw, per_image;
    tiling(const tensor::shape& in, const window& g)
        : oh(g.out_h(in.h)), ow(g.out_w(in.w)), th((oh + M - 1) / M), tw((ow + M - 1) / M), per_image(th * tw) {}
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
/// Values from one position's matrix of nt transformed tiles of c channels to the next position's:
/// nt·c rounded up to an odd number of 64-byte cache lines. A tile's (m + 2)² values lie a position
/// apart, and at a stride of a power of two bytes (F(4×4, 3×3)'s blocks of 16 or 32 tiles: 2 or 4
/// KiB) all 36 fall in the same few sets of the level-1 cache, which holds 8 lines a set: on a 2-vCPU
/// AMD EPYC (Zen 4), the input transform in blocks took 1.4× (16 channels on 28 × 28, 32 tiles a
/// block) to 1.9× (64 channels on 7 × 7, 16 tiles) as long as with the stride padded. An odd number
/// of lines puts the positions in different sets; the values within a position keep their layout.
template <class C>
[[nodiscard]] constexpr std::size_t position_stride(std::size_t nt, std::size_t c) noexcept {
    constexpr std::size_t line = 64 / sizeof(C);
    return ((nt * c + line - 1) / line | 1) * line;
}
/// Values from one position's cin × cout matrix of transformed weights (or their gradient) to the
/// next's: cin·cout padded as position_stride pads (16, 32 and 64 channels a side make planes of 1,
/// 4 and 16 KiB, and the weight transform's 36 stores for a vector of channel pairs fell in one set
/// of the level-1 cache). The padding is never read.
template <class C>
[[nodiscard]] constexpr std::size_t plane_stride(std::size_t cin, std::size_t cout) noexcept {
    return position_stride<C>(cin, cout);
}

/// Where column j of row i of a rows × n matrix in strips of `width` lies.
[[nodiscard]] constexpr std::size_t strip_index(std::size_t i, std::size_t j, std::size_t rows, std::size_t width) noexcept {
    return j / width * rows * width + i * width + j % width;
}

/// x as a V: a batch of x in every lane, or the scalar.
template <class V>
[[nodiscard]] inline V splat(double x) noexcept {
    if constexpr (std::is_arithmetic_v<V>)
        return V(x);
    else
        return V(static_cast<typename V::value_type>(x));
}

// The one-dimensional transforms on the m + 2 values of a column or row of a tile (a vector of
// channels or one channel each). F(2×2, 3×3)'s in the order of operations its results were first
// computed with, so that they keep their bits. Always inlined: a call takes its arrays through
// memory, and GCC left F(4×4, 3×3)'s Bᵀ·d a call (3 % of a ResNet-20 step, under perf).
/// Bᵀ·d, in place.
template <std::size_t M, class V>
[[gnu::always_inline]] inline void input_1d(V (&d)[M + 2]) noexcept {
    if constexpr (M == 2) {
        const V t0 = d[0] - d[2], t1 = d[1] + d[2], t2 = d[2] - d[1], t3 = d[1] - d[3];
        d[0] = t0, d[1] = t1, d[2] = t2, d[3] = t3;
    } else {
        const V two = splat<V>(2), four = splat<V>(4);
        const V e = d[4] - d[2], f = d[3] - d[1];
        const V t0 = four * (d[0] - d[2]) + e, t1 = (d[3] + d[4]) - four * (d[1] + d[2]);
        const V t2 = (d[4] - d[3]) + four * (d[1] - d[2]), t3 = e + two * f, t4 = e - two * f;
        const V t5 = four * (d[1] - d[3]) + (d[5] - d[3]);
        d[0] = t0, d[1] = t1, d[2] = t2, d[3] = t3, d[4] = t4, d[5] = t5;
    }
}
/// B·u, the adjoint of Bᵀ·d, in place.
template <std::size_t M, class V>
[[gnu::always_inline]] inline void input_1d_adjoint(V (&u)[M + 2]) noexcept {
    if constexpr (M == 2) {
        const V t0 = u[0], t1 = u[1] - u[2] + u[3], t2 = u[1] + u[2] - u[0], t3 = -u[3];
        u[0] = t0, u[1] = t1, u[2] = t2, u[3] = t3;
    } else {
        const V two = splat<V>(2), four = splat<V>(4), five = splat<V>(5);
        const V t0 = four * u[0], t1 = four * (u[2] - u[1] + u[5]) + two * (u[4] - u[3]);
        const V t2 = -(four * (u[0] + u[1] + u[2]) + (u[0] + u[3] + u[4]));
        const V t3 = (u[1] - u[2]) + two * (u[3] - u[4]) - five * u[5];
        const V t4 = u[0] + u[1] + u[2] + u[3] + u[4];
        u[0] = t0, u[1] = t1, u[2] = t2, u[3] = t3, u[4] = t4;  // u[5] stays
    }
}
/// y = Aᵀ·d: m outputs from m + 2 transformed values.
template <std::size_t M, class V>
[[gnu::always_inline]] inline void output_1d(const V (&d)[M + 2], V (&y)[M]) noexcept {
    if constexpr (M == 2) {
        y[0] = d[0] + d[1] + d[2];
        y[1] = d[1] - d[2] - d[3];
    } else {
        const V t1 = d[1] + d[2], t2 = d[1] - d[2], t3 = d[3] + d[4], t4 = d[3] - d[4];
        y[0] = d[0] + t1 + t3;
        y[1] = t2 + splat<V>(2) * t4;
        y[2] = t1 + splat<V>(4) * t3;
        y[3] = t2 + splat<V>(8) * t4 + d[5];
    }
}
/// e = A·y, the adjoint of Aᵀ·d: m + 2 values from m.
template <std::size_t M, class V>
[[gnu::always_inline]] inline void output_1d_adjoint(const V (&y)[M], V (&e)[M + 2]) noexcept {
    if constexpr (M == 2) {
        e[0] = y[0];
        e[1] = y[0] + y[1];
        e[2] = y[0] - y[1];
        e[3] = -y[1];
    } else {
        const V a = y[0] + y[2], b = y[1] + y[3], c = y[0] + splat<V>(4) * y[2], d = splat<V>(2) * (y[1] + splat<V>(4) * y[3]);
        e[0] = y[0];
        e[1] = a + b;
        e[2] = a - b;
        e[3] = c + d;
        e[4] = c - d;
        e[5] = y[3];
    }
}
/// u = G·g: m + 2 values from a column or row of three weights.
template <std::size_t M, class V>
[[gnu::always_inline]] inline void weight_1d(const V (&g)[3], V (&u)[M + 2]) noexcept {
    if constexpr (M == 2) {
        u[0] = g[0];
        u[1] = (g[0] + g[1] + g[2]) * splat<V>(0.5);
        u[2] = (g[0] - g[1] + g[2]) * splat<V>(0.5);
        u[3] = g[2];
    } else {
        const V s = g[0] + g[2], p = (g[0] + splat<V>(4) * g[2]) * splat<V>(1.0 / 24), q = g[1] * splat<V>(1.0 / 12);
        u[0] = g[0] * splat<V>(0.25);
        u[1] = (s + g[1]) * splat<V>(-1.0 / 6);
        u[2] = (s - g[1]) * splat<V>(-1.0 / 6);
        u[3] = p + q;
        u[4] = p - q;
        u[5] = g[2];
    }
}
/// g = Gᵀ·u, the adjoint of G·g: three values from m + 2.
template <std::size_t M, class V>
[[gnu::always_inline]] inline void weight_1d_adjoint(const V (&u)[M + 2], V (&g)[3]) noexcept {
    if constexpr (M == 2) {
        g[0] = u[0] + (u[1] + u[2]) * splat<V>(0.5);
        g[1] = (u[1] - u[2]) * splat<V>(0.5);
        g[2] = (u[1] + u[2]) * splat<V>(0.5) + u[3];
    } else {
        const V s = u[1] + u[2], t = u[3] + u[4];
        g[0] = u[0] * splat<V>(0.25) - s * splat<V>(1.0 / 6) + t * splat<V>(1.0 / 24);
        g[1] = (u[2] - u[1]) * splat<V>(1.0 / 6) + (u[3] - u[4]) * splat<V>(1.0 / 12);
        g[2] = (t - s) * splat<V>(1.0 / 6) + u[5];
    }
}

/// Applies a one-dimensional transform f(values), in place, down each column of a p × p tile, then
/// along each row.
template <std::size_t P, class V, class F>
[[gnu::always_inline]] inline void transform_2d(V (&d)[P][P], F&& f) noexcept {
#pragma GCC unroll 8
    for (std::size_t q = 0; q < P; ++q) {
        V column[P];
#pragma GCC unroll 8
        for (std::size_t r = 0; r < P; ++r) column[r] = d[r][q];
        f(column);
#pragma GCC unroll 8
        for (std::size_t r = 0; r < P; ++r) d[r][q] = column[r];
    }
#pragma GCC unroll 8
    for (std::size_t r = 0; r < P; ++r) f(d[r]);
}

using simd::load_lanes;
using simd::over_channels;
using simd::store_lanes;

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


/// Tile t's image n and tile row y and column x, advanced one tile at a time.
using tile_cursor = kernels::detail::grid_cursor;

/// Runs f(at, i) for tiles t0 + i in [t0, t1), `at` the tile's cursor.
template <std::size_t M, class F>
void for_each_tile(const tiling<M>& tl, std::size_t t0, std::size_t t1, F&& f) {
    tile_cursor at(t0, tl.th, tl.tw);
    for (std::size_t i = 0; i < t1 - t0; ++i, at.next(tl.th, tl.tw)) f(at, i);
}

/// Tiles ahead of the one being transformed whose pixels the input transform asks the memory system
/// for (prefetch_patch). A transform of a 16-channel tile takes about as long as a line
/// takes to arrive from memory, and a block's or chunk's transforms alternate with GEMMs that read
/// no activations, so the hardware's own prefetchers, which follow a running stream, start each block
/// from memory.
inline constexpr std::size_t prefetch_tiles = 4;

/// Asks for the cache lines of [p, p + bytes) in the level-2 cache (for writing when Write), a hint
/// with no effect on any result.
template <bool Write = false>
inline void prefetch_span(const void* p, std::size_t bytes) noexcept {
    const char* b = static_cast<const char*>(p);
    for (std::size_t o = 0; o < bytes; o += 64) __builtin_prefetch(b + o, Write ? 1 : 0, 2);
}

/// Prefetches the pixels of an NHWC tensor x (an input or its gradient) that the tile at `at` reaches
/// first (first_to_reach: its patch's last m rows and columns, all of them on the image's first row
/// or column of tiles), in the image.
template <bool Write, std::size_t M, class S>
void prefetch_patch(const S* x, const tensor::shape& in, const window& g, const tile_cursor& at) noexcept {
    const auto clip = [](std::ptrdiff_t v, std::size_t size) {
        return std::clamp<std::ptrdiff_t>(v, 0, static_cast<std::ptrdiff_t>(size));
    };
    const auto pad = static_cast<std::ptrdiff_t>(g.pad);
    const std::ptrdiff_t y = static_cast<std::ptrdiff_t>(M * at.y) - pad, x0 = static_cast<std::ptrdiff_t>(M * at.x) - pad;
    const std::ptrdiff_t r0 = clip(y + (at.y == 0 ? 0 : 2), in.h), r1 = clip(y + static_cast<std::ptrdiff_t>(patch<M>), in.h);
    const std::ptrdiff_t q0 = clip(x0 + (at.x == 0 ? 0 : 2), in.w), q1 = clip(x0 + static_cast<std::ptrdiff_t>(patch<M>), in.w);
    if (q1 <= q0) return;
    for (std::ptrdiff_t r = r0; r < r1; ++r)
        prefetch_span<Write>(x + ((at.n * in.h + static_cast<std::size_t>(r)) * in.w + static_cast<std::size_t>(q0)) * in.c,
                             static_cast<std::size_t>(q1 - q0) * in.c * sizeof(S));
}

/// Runs f(at, i) for tiles t0 + i in [t0, t1), and ahead(cursor) for the tile prefetch_tiles ahead
/// of each while there is one in the tensor (up to `tiles`).
template <std::size_t M, class F, class Ahead>
void for_each_tile_ahead(const tiling<M>& tl, std::size_t t0, std::size_t t1, std::size_t tiles, F&& f, Ahead&& ahead) {
    tile_cursor at(t0, tl.th, tl.tw), next(std::min(t0 + prefetch_tiles, tiles), tl.th, tl.tw);
    for (std::size_t i = 0; i < t1 - t0; ++i, at.next(tl.th, tl.tw)) {
        if (t0 + i + prefetch_tiles < tiles) {
            ahead(next);
            next.next(tl.th, tl.tw);
        }
        f(at, i);
    }
}

/// Which pixels of the (m + 2)² input patch of the tile at `at` lie in the image: bit (m + 2)·r + q
/// for pixel (r, q) (the rest reach into the padding).
template <std::size_t M>
[[nodiscard]] std::uint64_t patch_mask(const tensor::shape& in, const window& g, const tile_cursor& at) noexcept {
    constexpr std::size_t p = patch<M>;
    const auto inside = [&](std::size_t first, std::size_t k, std::size_t size) {
        return first + k >= g.pad && first + k < size + g.pad;
    };
    std::uint64_t cols = 0, mask = 0;
    for (std::size_t q = 0; q < p; ++q) cols |= inside(M * at.x, q, in.w) ? std::uint64_t{1} << q : 0u;
    for (std::size_t r = 0; r < p; ++r) mask |= inside(M * at.y, r, in.h) ? cols << (p * r) : 0u;
    return mask;
}

/// The top-left pixel of the input patch of the tile at `at` when the whole patch lies inside the
/// image (its pixels then lie at fixed offsets from it), else null: most tiles of a padded image, so
/// their loads need no per-pixel test (ResNet-20's 28 × 28 layers: 144 of 196 2×2 tiles, 25 of 49 4×4).
template <std::size_t M, class P>
[[nodiscard]] P* interior_patch(P* x, const tensor::shape& in, const window& g, const tile_cursor& at) noexcept {
    const std::size_t y0 = M * at.y, x0 = M * at.x;
    if (y0 < g.pad || x0 < g.pad || y0 + patch<M> > in.h + g.pad || x0 + patch<M> > in.w + g.pad) return nullptr;
    return x + ((at.n * in.h + (y0 - g.pad)) * in.w + (x0 - g.pad)) * in.c;
}

/// Pixel pointers of the m × m output block of the tile at `at` (null past the output's edge).
template <std::size_t M, class P>
void block(P* y, const tiling<M>& tl, std::size_t cout, const tile_cursor& at, P* (&px)[M][M]) {
    for (std::size_t r = 0; r < M; ++r)
        for (std::size_t q = 0; q < M; ++q) {
            const std::size_t oy = M * at.y + r, ox = M * at.x + q;
            px[r][q] = oy < tl.oh && ox < tl.ow ? y + ((at.n * tl.oh + oy) * tl.ow + ox) * cout : nullptr;
        }
}

/// Runs f(pixel, inside) for the tile at `at`, pixel(r, q) the address of the patch's pixel (r, q),
/// null in the padding: at fixed offsets from one pointer when the whole patch lies inside the image
/// (inside is std::true_type: no pixel is null, nothing to test), else from its offset and patch_mask.
template <std::size_t M, class P, class F>
void with_patch(P* x, const tensor::shape& in, const window& g, const tile_cursor& at, F&& f) {
    if (P* base = interior_patch<M>(x, in, g, at)) {
        const std::size_t row = in.w * in.c, c = in.c;
        f([base, row, c](std::size_t r, std::size_t q) { return base + r * row + q * c; }, std::true_type{});
        return;
    }
    // A patch at the image's edge: its pixels' offsets from pixel (0, 0)'s place (outside the image,
    // so only an offset), and which of them exist. Five values where one pointer a pixel would not
    // fit the general registers (they were parked in vector registers and moved back for every load).
    const auto origin = static_cast<std::ptrdiff_t>((at.n * in.h + M * at.y) * in.w + M * at.x) * static_cast<std::ptrdiff_t>(in.c) -
                        static_cast<std::ptrdiff_t>(g.pad * (in.w + 1) * in.c);
    const auto row = static_cast<std::ptrdiff_t>(in.w * in.c), c = static_cast<std::ptrdiff_t>(in.c);
    const std::uint64_t mask = patch_mask<M>(in, g, at);
    f([x, origin, row, c, mask](std::size_t r, std::size_t q) -> P* {
        return (mask >> (patch<M> * r + q) & 1u) != 0
                   ? x + (origin + static_cast<std::ptrdiff_t>(r) * row + static_cast<std::ptrdiff_t>(q) * c)
                   : nullptr;
    }, std::false_type{});
}

/// The positions of a tile's transformed values for one run of channels, `stride` apart from p (the
/// strip layout of transform_input's v and the GEMMs' products), into d or from d.
template <class V, class C, std::size_t P>
inline void load_positions(const C* p, std::size_t stride, V (&d)[P][P]) noexcept {
#pragma GCC unroll 8
    for (std::size_t r = 0; r < P; ++r)
#pragma GCC unroll 8
        for (std::size_t q = 0; q < P; ++q) {
            d[r][q] = load_lanes<V, C>(p);
            p += stride;
            opaque(p);
        }
}
template <class C, class V, std::size_t P>
inline void store_positions(C* p, std::size_t stride, const V (&d)[P][P]) noexcept {
#pragma GCC unroll 8
    for (std::size_t r = 0; r < P; ++r)
#pragma GCC unroll 8
        for (std::size_t q = 0; q < P; ++q) {
            store_lanes(p, d[r][q]);
            p += stride;
            opaque(p);
        }
}

/// Runs f(p, r, q) for each pixel (r, q) of a tile's patch (m + 2 pixels square) that lies in the
/// image, p the address of its channel ci (pixel and inside as with_patch gives them): for a patch
/// inside the image by one pointer stepped along rows and pixels (see opaque), else through
/// pixel(r, q), skipping the padding.
template <std::size_t M, class P, class Pixel, class Inside, class F>
inline void for_each_patch_pixel(const Pixel& pixel, Inside, const tensor::shape& in, std::size_t ci, F&& f) {
    if constexpr (Inside::value) {
        P* row = pixel(0, 0) + ci;
#pragma GCC unroll 8
        for (std::size_t r = 0; r < patch<M>; ++r) {
            P* p = row;
#pragma GCC unroll 8
            for (std::size_t q = 0; q < patch<M>; ++q) {
                f(p, r, q);
                p += in.c;
                opaque(p);
            }
            row += in.w * in.c;
            opaque(row);
        }
    } else {
#pragma GCC unroll 8
        for (std::size_t r = 0; r < patch<M>; ++r)
#pragma GCC unroll 8
            for (std::size_t q = 0; q < patch<M>; ++q)
                if (P* p = pixel(r, q)) f(p + ci, r, q);
    }
}

/// V = Bᵀ d B for tiles [t0, t1): v[ξ][t - t0][ci] (positions position_stride(nt, c) apart). With `map` (Mapped), d is
/// not x but the ReLU of x's affine map (simd::relu_of_affine_value, rounded through S as a stored
/// activation would be): the batch norm and ReLU before the convolution, applied as the patches load;
/// the padding stays zero.
template <bool Mapped, std::size_t M, class C, class S>
void transform_input_as(const S* x, const tensor::shape& in, const window& g, const tiling<M>& tl, std::size_t t0,
                     std::size_t t1, C* v, const simd::relu_of_affine<C>* map) {
    const std::size_t c = in.c, stride = position_stride<C>(t1 - t0, c);
    for_each_tile_ahead(tl, t0, t1, in.n * tl.per_image, [&](const tile_cursor& at, std::size_t i) {
        C* dst = v + i * c;
        with_patch<M>(x, in, g, at, [&](auto pixel, auto inside) {
            over_channels<C>(c, [&]<class V>(std::size_t ci) {
                // The map's scale and shift for channels [ci, ci + width), loaded once a tile (batches only).
                const auto lanes = [&] {
                    if constexpr (Mapped && !std::is_arithmetic_v<V>)
                        return simd::relu_of_affine_lanes<C>(*map, ci);
                    else
                        return nullptr;
                }();
                V d[patch<M>][patch<M>];
                if constexpr (!decltype(inside)::value) {  // the padding reads as zeros
                    // Unrolled, so that -O2 stores the zeros from a register instead of calling memset
                    // for the 36 vectors (1.2 % of a ResNet-20 step in a -O2 build under perf).
#pragma GCC unroll 8
                    for (std::size_t r = 0; r < patch<M>; ++r)
#pragma GCC unroll 8
                        for (std::size_t q = 0; q < patch<M>; ++q) d[r][q] = V(C(0));
                }
                for_each_patch_pixel<M, const S>(pixel, inside, in, ci, [&](const S* p, std::size_t r, std::size_t q) {
                    if constexpr (Mapped && std::is_arithmetic_v<V>)
                        d[r][q] = simd::relu_of_affine_value<S>(*map, load_lanes<V, C>(p), ci);
                    else if constexpr (Mapped)
                        d[r][q] = lanes.template value<S>(load_lanes<V, C>(p));
                    else
                        d[r][q] = load_lanes<V, C>(p);
                });
                transform_2d(d, [](V(&values)[patch<M>]) TESSERA_INLINE_LAMBDA { input_1d<M>(values); });
                store_positions(dst + ci, stride, d);
            });
        });
    }, [&](const tile_cursor& ahead) { prefetch_patch<false, M>(x, in, g, ahead); });
}
template <std::size_t M, class C, class S>
void transform_input(const S* x, const tensor::shape& in, const window& g, const tiling<M>& tl, std::size_t t0,
                     std::size_t t1, C* v, const simd::relu_of_affine<C>* map = nullptr) {
    if (map != nullptr) return transform_input_as<true>(x, in, g, tl, t0, t1, v, map);
    transform_input_as<false>(x, in, g, tl, t0, t1, v, map);
}

/// Whether the tile at `at` is the first, in the tiles' order, to reach the pixel at (r, q) of its
/// patch. A tile's patch shares its first two rows with the patch of the tile above and its first two
/// columns with the patch of the tile to its left (tiles step m pixels, patches are m + 2 wide), and
/// reaches its other rows and columns first; every pixel of an image lies in some patch.
[[nodiscard]] inline bool first_to_reach(const tile_cursor& at, std::size_t r, std::size_t q) noexcept {
    return (r >= 2 || at.y == 0) && (q >= 2 || at.x == 0);
}

/// dx = B dV Bᵀ summed over tiles [t0, t1) (dv laid out as transform_input's v), whole images in
/// the tiles' order: the first tile to reach a pixel (first_to_reach) writes it, the tiles after it
/// add to it (patches overlap by two pixels), so dx needs no zeroing beforehand.
template <std::size_t M, class C>
void add_input_gradient(const C* dv, const tensor::shape& in, const window& g, const tiling<M>& tl, std::size_t t0,
                        std::size_t t1, C* dx) {
    const std::size_t c = in.c, stride = position_stride<C>(t1 - t0, c);
    for_each_tile(tl, t0, t1, [&](const tile_cursor& at, std::size_t i) {
        const C* src = dv + i * c;
        // d into the pixel at p: written by the first tile to reach it, added to after.
        const auto put = [&at]<class V>(C* p, std::size_t r, std::size_t q, const V& d) {
            store_lanes(p, first_to_reach(at, r, q) ? d : load_lanes<V, C>(p) + d);
        };
        with_patch<M>(dx, in, g, at, [&](auto pixel, auto inside) {
            over_channels<C>(c, [&]<class V>(std::size_t ci) {
                V d[patch<M>][patch<M>];
                load_positions(src + ci, stride, d);
                transform_2d(d, [](V(&values)[patch<M>]) TESSERA_INLINE_LAMBDA { input_1d_adjoint<M>(values); });
                for_each_patch_pixel<M, C>(pixel, inside, in, ci, [&](C* p, std::size_t r, std::size_t q) { put(p, r, q, d[r][q]); });
            });
        });
    });
}

/// y = Aᵀ M A for tiles [t0, t1) (m[ξ][t - t0][co]), written where the output exists, as C or as a
/// type that stores from registers (rounded to nearest).
template <std::size_t M, class C, class Y>
void transform_output(const C* m, const tiling<M>& tl, std::size_t cout, std::size_t t0, std::size_t t1, Y* y) {
    constexpr std::size_t p = patch<M>;
    const std::size_t stride = position_stride<C>(t1 - t0, cout);
    for_each_tile(tl, t0, t1, [&](const tile_cursor& at, std::size_t i) {
        Y* px[M][M];
        block(y, tl, cout, at, px);
        const C* src = m + i * cout;
        over_channels<C>(cout, [&]<class V>(std::size_t co) {
            V d[p][p];
            load_positions(src + co, stride, d);
            V s[M][p];  // Aᵀ·M down each column
#pragma GCC unroll 8
            for (std::size_t q = 0; q < p; ++q) {
                V column[p], out[M];
#pragma GCC unroll 8
                for (std::size_t r = 0; r < p; ++r) column[r] = d[r][q];
                output_1d<M>(column, out);
#pragma GCC unroll 4
                for (std::size_t r = 0; r < M; ++r) s[r][q] = out[r];
            }
#pragma GCC unroll 4
            for (std::size_t r = 0; r < M; ++r) {
                V out[M];
                output_1d<M>(s[r], out);
#pragma GCC unroll 4
                for (std::size_t q = 0; q < M; ++q)
                    if (px[r][q]) store_lanes(px[r][q] + co, out[q]);
            }
        });
    });
}

/// dM = A dY Aᵀ for tiles [t0, t1): dm[ξ] an nt × cout matrix in strips of `width` columns (a multiple
/// of the SIMD width, or cout), positions position_stride(nt, cout) apart; zeros past the output's edge.
/// With `map` (not void), dY is not dy but the input gradient of the batch norm whose output gradient
/// dy is, computed as each pixel loads (simd::batch_norm_gradient_lanes: a batch norm after this
/// convolution in forward, whose backward then writes no input gradient).
template <std::size_t M, class C, class S, class Map = void>
void transform_output_gradient(const S* dy, const tiling<M>& tl, std::size_t cout, std::size_t t0, std::size_t t1,
                               std::size_t width, C* dm, const Map* map = nullptr) {
    if constexpr (!std::is_void_v<Map>)
        if (map == nullptr) return transform_output_gradient<M, C, S, void>(dy, tl, cout, t0, t1, width, dm);
    constexpr std::size_t p = patch<M>;
    const std::size_t nt = t1 - t0, stride = position_stride<C>(nt, cout);
    for_each_tile(tl, t0, t1, [&](const tile_cursor& at, std::size_t i) {
        const S* px[M][M];
        block(dy, tl, cout, at, px);
        over_channels<C>(cout, [&]<class V>(std::size_t co) {
            // The map's operands for channels [co, co + width), loaded once a tile (batches only).
            const auto lanes = [&] {
                if constexpr (!std::is_void_v<Map> && !std::is_arithmetic_v<V>)
                    return simd::batch_norm_gradient_lanes(*map, co);
                else
                    return nullptr;
            }();
            // Channels [co, co + width) of the pixel at q.
            const auto load = [&](const S* q) __attribute__((always_inline)) {
                if constexpr (std::is_void_v<Map>)
                    return load_lanes<V, C>(q + co);
                else if constexpr (std::is_arithmetic_v<V>)
                    return simd::batch_norm_gradient_value_one(*map, dy, static_cast<std::size_t>(q - dy) + co, co);
                else
                    return lanes(map->x + (q - dy) + co, q + co);
            };
            C* dst = dm + strip_index(i, co, nt, width) - co;  // + co below: vectors never straddle strips
            V e[p][M];  // A·dY down each column
#pragma GCC unroll 4
            for (std::size_t q = 0; q < M; ++q) {
                V column[M], out[p];
#pragma GCC unroll 4
                for (std::size_t r = 0; r < M; ++r) column[r] = px[r][q] ? load(px[r][q]) : V(C(0));
                output_1d_adjoint<M>(column, out);
#pragma GCC unroll 8
                for (std::size_t r = 0; r < p; ++r) e[r][q] = out[r];
            }
            C* out = dst + co;
#pragma GCC unroll 8
            for (std::size_t r = 0; r < p; ++r) {
                V row[p];
                output_1d_adjoint<M>(e[r], row);
#pragma GCC unroll 8
                for (std::size_t q = 0; q < p; ++q) {
                    store_lanes(out, row[q]);
                    out += stride;
                    opaque(out);
                }
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
/// `transposed`, u[ξ] = U_ξᵀ, cout × cin; plane_stride apart. Each in strips of strip_width columns, written where they
/// belong as each vector of channel pairs is transformed. U_ξᵀ is U_ξ of the weights with their
/// channels swapped, which `scratch` (9·cin·cout values) then holds: the transform is vectorised
/// along the output's rows either way (it was a scalar transpose of all 36 matrices afterwards,
/// 4.5 % of a ResNet-20 step under perf on a 2-vCPU AMD EPYC, Zen 4).
template <std::size_t M, class C, class W>
void transform_weights(const W* w, std::size_t cin, std::size_t cout, bool transposed, C* scratch, C* u, parallelism par) {
    const std::size_t plane = cin * cout;
    if (transposed) {
        // Row co of tap k of the swapped weights, from column co of w's (a copy: its split between
        // the threads changes nothing).
        kernels::detail::parallel_ranges(par, 9 * cout, std::max<std::size_t>(1, weight_block / std::max<std::size_t>(cin, 1)),
                                         [&](std::size_t b, std::size_t e, std::size_t) {
            for (std::size_t row = b; row < e; ++row) {
                const W* from = w + row / cout * plane + row % cout;
                C* to = scratch + row * cin;
                for (std::size_t ci = 0; ci < cin; ++ci) to[ci] = kernels::detail::load_as<C>(from[ci * cout]);
            }
        });
        return transform_weights<M>(static_cast<const C*>(scratch), cout, cin, false, static_cast<C*>(nullptr), u, par);
    }
    constexpr std::size_t p = patch<M>;
    const std::size_t width = strip_width<C>(cout), ps = plane_stride<C>(cin, cout);
    // Vectors of channel pairs start at multiples of the SIMD width: within a strip where there are
    // several (cout then a multiple of their width), and the one strip is the row-major matrix.
    for_each_block(par, plane, [&](std::size_t b, std::size_t e) {
        over_channels<C>(e - b, [&]<class V>(std::size_t k) {
            const std::size_t i = b + k, ci = i / cout, co = i % cout;
            const std::size_t at = co / width * width * cin + ci * width + co % width;
            V h[p][3];  // G·g down each column
            for (std::size_t kx = 0; kx < 3; ++kx) {
                const V column[3] = {load_lanes<V, C>(w + kx * plane + i), load_lanes<V, C>(w + (3 + kx) * plane + i),
                                     load_lanes<V, C>(w + (6 + kx) * plane + i)};
                V out[p];
                weight_1d<M>(column, out);
                for (std::size_t r = 0; r < p; ++r) h[r][kx] = out[r];
            }
            for (std::size_t r = 0; r < p; ++r) {
                V out[p];
                weight_1d<M>(h[r], out);
                for (std::size_t q = 0; q < p; ++q) store_lanes(u + (r * p + q) * ps + at, out[q]);
            }
        });
    });
}

/// dw += Gᵀ dU G for every channel pair (du laid out as transform_weights' u, plane_stride apart, not
/// in strips).
template <std::size_t M, class C>
void add_weight_gradient(const C* du, std::size_t cin, std::size_t cout, C* dw, parallelism par) {
    constexpr std::size_t p = patch<M>;
    const std::size_t plane = cin * cout, ps = plane_stride<C>(cin, cout);
    for_each_block(par, plane, [&](std::size_t b, std::size_t e) {
        over_channels<C>(e - b, [&]<class V>(std::size_t k) {
            const std::size_t i = b + k;
            V h[p][3];  // Gᵀ along each row
            for (std::size_t r = 0; r < p; ++r) {
                V row[p];
                for (std::size_t q = 0; q < p; ++q) row[q] = load_lanes<V, C>(du + (r * p + q) * ps + i);
                weight_1d_adjoint<M>(row, h[r]);
            }
            for (std::size_t kx = 0; kx < 3; ++kx) {
                V column[p], out[3];
                for (std::size_t r = 0; r < p; ++r) column[r] = h[r][kx];
                weight_1d_adjoint<M>(column, out);
                for (std::size_t ky = 0; ky < 3; ++ky) {
                    C* q = dw + (ky * 3 + kx) * plane + i;
                    store_lanes(q, load_lanes<V, C>(q) + out[ky]);
                }
            }
        });
    });
}

}  // namespace detail

}  // namespace tessera::kernels::winograd
