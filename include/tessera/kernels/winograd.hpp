#pragma once
// 3×3 stride-1 convolutions by Winograd's minimal filtering F(m×m, 3×3), m = 2 or 4 (Lavin and Gray,
// 2016), forward and both gradients, on NHWC tensors.
//
// Each m × m block of outputs (a tile) is computed from the (m + 2)² input patch under it:
//   Y = Aᵀ [U ⊙ V] A,   U = G g Gᵀ (per input/output channel pair),   V = Bᵀ d B (per input channel),
// and the sum over input channels of U ⊙ V is, for each of the (m + 2)² positions ξ of the transformed
// tile, one GEMM of (tiles × cin) by (cin × cout). F(2×2, 3×3): 16 multiplies per 4 outputs and
// channel pair where im2col + GEMM does 36, 2.25× fewer; F(4×4, 3×3): 36 per 16 outputs, 4× fewer,
// with larger transforms and rounding errors (its matrices hold 4, 5 and 8, and 1/6 and 1/24).
// The gradients are the adjoints of the same linear maps:
//   dM = A dY Aᵀ,   dV_ξ = dM_ξ U_ξᵀ,   dd = B dV Bᵀ (summed into dx over the overlapping tiles),
//   dU_ξ = Σ_tiles V_ξᵀ dM_ξ,   dg = Gᵀ dU G (added into dw).
// Chunks hold whole images, as in im2col + GEMM, so results do not depend on the thread count.
// Memory: a layer's workspace keeps the transformed weights and their gradient, 2·(m + 2)²·cin·cout
// values (3.6× the weights for m = 2, 8× for m = 4), beside the per-thread transformed tiles of one
// chunk (about 1 MiB each).
// The transforms themselves are in winograd_transforms.hpp; this header runs them around the GEMMs.
#include <algorithm>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <utility>

#include "tessera/kernels/cache_size.hpp"
#include "tessera/kernels/conv_chunks.hpp"
#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/affine_map.hpp"
#include "tessera/kernels/batch_norm_rows.hpp"
#include "tessera/kernels/simd.hpp"
#include "tessera/kernels/storage.hpp"
#include "tessera/kernels/winograd_transforms.hpp"
#include "tessera/tensor/dense.hpp"

namespace tessera::kernels::winograd {

/// Whether F(m×m, 3×3) computes a convolution with this window: 3×3 at stride 1, any padding.
[[nodiscard]] constexpr bool fits(const window& g) noexcept { return g.kh == 3 && g.kw == 3 && g.stride == 1; }

namespace detail {

/// x as an array kernels can load from in registers: x itself, or a converted copy in scratch.
template <class C, class T>
[[nodiscard]] auto registers_view(const T* x, std::size_t n, aligned_vector<C>& scratch, parallelism par) {
    if constexpr (simd::in_register<C, T>)
        return x;
    else
        return load_compute<C>(x, n, scratch, par);
}

/// Runs item(i, options) for the independent GEMMs i in [0, count): in order with o itself, or, when o
/// offers several threads (a chunk that has the threads to itself), split between them, each GEMM on
/// one thread with that thread's buffers. The GEMMs of one chunk are many and thin ((m + 2)² positions ×
/// strips of 32 columns): splitting the calls keeps the threads busy without a hand-over per call.
template <class F>
void for_each_gemm(std::size_t count, const gemm_options& o, F&& item) {
    if (o.threads <= 1) {
        for (std::size_t i = 0; i < count; ++i) item(i, o);
        return;
    }
    kernels::detail::parallel_ranges(parallelism{o.threads, o.pool}, count, 1,
                                     [&](std::size_t begin, std::size_t end, std::size_t t) {
                                         const gemm_options one{1, o.buffers == nullptr ? nullptr : o.buffers + t};
                                         for (std::size_t i = begin; i < end; ++i) item(i, one);
                                     });
}

// The GEMMs of one chunk of nt tiles, one per position ξ (operands position_stride apart as the
// transforms lay them out), each cut into strips of columns.
/// M_ξ = V_ξ U_ξ (u in strips over cout).
template <std::size_t M, class C>
void forward_gemms(std::size_t nt, std::size_t cin, std::size_t cout, const C* v, const C* u, C* m, const gemm_options& o) {
    const std::size_t ps = plane_stride<C>(cin, cout), width = strip_width<C>(cout), strips = cout / width;
    const std::size_t sv = position_stride<C>(nt, cin), sm = position_stride<C>(nt, cout);
    for_each_gemm(positions<M> * strips, o, [&](std::size_t i, const gemm_options& one) {
        const std::size_t xi = i / strips, j = i % strips * width;
        gemm(trans::no, trans::no, nt, width, cin, C(1), v + xi * sv, cin, u + xi * ps + j * cin, width, C(0),
             m + xi * sm + j, cout, one);
    });
}
/// dV_ξ = dM_ξ U_ξᵀ (dm in strips over cout, each a slice of the sum over cout; ut in strips over cin).
template <std::size_t M, class C>
void data_gemms(std::size_t nt, std::size_t cin, std::size_t cout, const C* dm, const C* ut, C* dv, const gemm_options& o) {
    const std::size_t ps = plane_stride<C>(cin, cout), width_in = strip_width<C>(cin), width_out = strip_width<C>(cout);
    const std::size_t strips = cin / width_in, sm = position_stride<C>(nt, cout), sv = position_stride<C>(nt, cin);
    for_each_gemm(positions<M> * strips, o, [&](std::size_t i, const gemm_options& one) {
        const std::size_t xi = i / strips, j = i % strips * width_in;
        for (std::size_t s = 0; s < cout; s += width_out)
            gemm(trans::no, trans::no, nt, width_in, width_out, C(1), dm + xi * sm + s * nt, width_out,
                 ut + xi * ps + j * cout + s * width_in, width_in, s == 0 ? C(0) : C(1), dv + xi * sv + j, cin, one);
    });
}
/// dU_ξ = beta·dU_ξ + V_ξᵀ dM_ξ (dm in strips over cout), summing the tiles `kblock` at a time (0: all
/// at once) as the fused backward does (see sum_block_tiles).
template <std::size_t M, class C>
void weight_gemms(std::size_t nt, std::size_t cin, std::size_t cout, const C* v, const C* dm, C beta, C* du,
                  const gemm_options& o, std::size_t kblock = 0) {
    const std::size_t ps = plane_stride<C>(cin, cout), width = strip_width<C>(cout), strips = cout / width;
    const std::size_t kb = kblock == 0 ? nt : kblock;
    const std::size_t sv = position_stride<C>(nt, cin), sm = position_stride<C>(nt, cout);
    for_each_gemm(positions<M> * strips, o, [&](std::size_t i, const gemm_options& one) {
        const std::size_t xi = i / strips, j = i % strips * width;
        for (std::size_t k0 = 0; k0 < nt; k0 += kb)
            gemm(trans::yes, trans::no, cin, width, std::min(kb, nt - k0), C(1), v + xi * sv + k0 * cin, cin,
                 dm + xi * sm + j * nt + k0 * width, width, k0 == 0 ? beta : C(1), du + xi * ps + j, cout, one);
    });
}

/// Runs f(Tile{}) with the register tile whose width is `width` columns (one or two SIMD vectors) and
/// whose rows are the short tile's (the fused forward's blocks are a few tiles long); false when no
/// tile is that wide (the strips are the whole matrix: forward_gemms serves them).
template <class C, class F>
bool with_strip_tile(std::size_t width, F&& f) {
    using one = kernels::detail::tile<C, 1, kernels::detail::short_mr<C, 1>>;
    using two = kernels::detail::tile<C, 2, kernels::detail::short_mr<C, 2>>;
    if (width == one::nr) return f(one{}), true;
    if (width == two::nr) return f(two{}), true;
    return false;
}

/// Tiles per block of a fused pass (transforms and GEMMs a few tiles at a time) whose products have
/// n channels and sum over k, `per_call` of them in each GEMM call of the unfused pass (all k in the
/// forward, a strip of k in the input gradient): whole strips of the register tile's rows whose
/// transformed tiles ((m + 2)²·(k + n) values per tile) fit the level-1 data cache; where not one strip fits
/// (64 channels and more in fp32), two strips, whose tiles stay in L2 between the transforms and
/// the GEMMs (on a 2-vCPU Intel Xeon, bench_winograd_blocks: the forward in 0.73–0.80 of the unfused
/// pass's time at 64 channels on 7×7 and 128 on 8×8 and 16×16, 0.93–1.04 at 64 on 14×14 and 256 on
/// 4×4); 0 where no register tile is n's strips' width, or where gemm would split a call's sum (above
/// its kc): the fused pass then could not make the same sums.
template <std::size_t M, class C>
[[nodiscard]] std::size_t fused_block_tiles(std::size_t n, std::size_t k, std::size_t per_call, std::size_t l1_bytes) noexcept {
    std::size_t mr = 0;
    if (!with_strip_tile<C>(strip_width<C>(n), [&]<class Tile>(Tile) { mr = Tile::mr; })) return 0;
    if (per_call > kernels::detail::tile<C, 1>::kc) return 0;
    const std::size_t rows = l1_bytes / (positions<M> * (k + n) * sizeof(C));
    return rows >= mr ? rows / mr * mr : 2 * mr;
}

/// M_ξ = V_ξ U_ξ for a block of nb tiles (v and m laid out as forward_gemms' for nt = nb), calling the
/// register tile directly: a block's GEMMs are a few hundred multiply-adds each, less than a gemm
/// call's set-up. Each element is the same chain of multiply-adds over the input channels as gemm's
/// (A read in place, or packed where a strip is cut short, as gemm packs it; alpha 1, beta 0), so the
/// results are gemm's bit for bit.
template <std::size_t M, class C>
void block_gemms(std::size_t nb, std::size_t cin, std::size_t cout, const C* v, const C* u, C* m) {
    const std::size_t ps = plane_stride<C>(cin, cout), width = strip_width<C>(cout);
    const std::size_t sv = position_stride<C>(nb, cin), sm = position_stride<C>(nb, cout);
    with_strip_tile<C>(width, [&]<class Tile>(Tile) {
        for (std::size_t xi = 0; xi < positions<M>; ++xi)
            for (std::size_t j = 0; j < cout; j += width)
                for (std::size_t r = 0; r < nb; r += Tile::mr)
                    kernels::detail::strip_kernel<Tile, kernels::detail::a_layout::row_strided>(
                        cin, v + xi * sv + r * cin, cin, u + xi * ps + j * cin, m + xi * sm + r * cout + j,
                        cout, std::min(Tile::mr, nb - r), width, C(1), C(0));
    });
}

/// Tiles per block of the sum over tiles of a weight gradient in the fused backward, or 0 where it
/// sums a chunk's tiles at once. Results depend on it, so it follows from the shapes alone, never
/// from the machine's caches: blocks whose transformed tiles ((m + 2)²·(cin + cout) values each) fit 32 KiB,
/// the smallest level-1 data cache of the CPUs this runs on (AMD Zen 3's), and only where that is
/// at least 16 tiles (fewer would make each block's update of dU, a load and a store of every
/// element, cost more than the multiply-adds it saves moving).
inline constexpr std::size_t sum_block_bytes = std::size_t{32} << 10;
template <std::size_t M, class C>
[[nodiscard]] constexpr std::size_t sum_block_tiles(std::size_t cin, std::size_t cout) noexcept {
    const std::size_t tiles = sum_block_bytes / (positions<M> * (cin + cout) * sizeof(C));
    // At most gemm's kc: the unfused path's calls then sum a block without splitting it either.
    return tiles >= 16 ? std::min(tiles, kernels::detail::tile<C, 1>::kc) : 0;
}

/// dU_ξ = beta·dU_ξ + V_ξᵀ dM_ξ for a block of nb tiles (v and dm laid out as weight_gemms' for
/// nt = nb): weight_gemms' register-tile calls for one block, bit for bit.
template <std::size_t M, class C>
void block_weight_gemms(std::size_t nb, std::size_t cin, std::size_t cout, const C* v, const C* dm, C beta, C* du) {
    const std::size_t ps = plane_stride<C>(cin, cout), width = strip_width<C>(cout);
    const std::size_t sv = position_stride<C>(nb, cin), sm = position_stride<C>(nb, cout);
    with_strip_tile<C>(width, [&]<class Tile>(Tile) {
        for (std::size_t xi = 0; xi < positions<M>; ++xi)
            for (std::size_t j = 0; j < cout; j += width)
                for (std::size_t r = 0; r < cin; r += Tile::mr)
                    kernels::detail::strip_kernel<Tile, kernels::detail::a_layout::k_strided>(
                        nb, v + xi * sv + r, cin, dm + xi * sm + j * nb, du + xi * ps + r * cout + j, cout,
                        std::min(Tile::mr, cin - r), width, C(1), beta);
    });
}

/// dV_ξ = dM_ξ U_ξᵀ for the nb tiles from row r0 of a chunk of nt (dm and ut as data_gemms'), into
/// dv laid out for nb tiles: data_gemms' register-tile calls for those rows, bit for bit (the same
/// sums over cout's strips, each call's alpha 1 and beta 0 then 1).
template <std::size_t M, class C>
void block_data_gemms(std::size_t nt, std::size_t r0, std::size_t nb, std::size_t cin, std::size_t cout, const C* dm,
                      const C* ut, C* dv) {
    const std::size_t ps = plane_stride<C>(cin, cout), width_in = strip_width<C>(cin), width_out = strip_width<C>(cout);
    const std::size_t sm = position_stride<C>(nt, cout), sv = position_stride<C>(nb, cin);
    with_strip_tile<C>(width_in, [&]<class Tile>(Tile) {
        for (std::size_t xi = 0; xi < positions<M>; ++xi)
            for (std::size_t j = 0; j < cin; j += width_in)
                for (std::size_t s = 0; s < cout; s += width_out)
                    for (std::size_t r = 0; r < nb; r += Tile::mr)
                        kernels::detail::strip_kernel<Tile, kernels::detail::a_layout::row_strided>(
                            width_out, dm + xi * sm + s * nt + (r0 + r) * width_out, width_out,
                            ut + xi * ps + j * cout + s * width_in, dv + xi * sv + r * cin + j, cin,
                            std::min(Tile::mr, nb - r), width_in, C(1), s == 0 ? C(0) : C(1));
    });
}

/// A map (the batch norm and ReLU before the layer, applied as x loads) rounds through x's storage
/// type as the activation it stands for was stored: x must load into registers as it is stored.
template <class C, class T>
void check_map(const simd::relu_of_affine<C>* map) {
    if constexpr (!simd::in_register<C, T>)
        if (map != nullptr)
            throw std::invalid_argument("tessera::kernels::winograd: an input given through a batch norm's map must be "
                                        "stored in a type that loads into registers");
}

/// A map from a batch norm's output gradient (simd::batch_norm_gradient_map) stands for its input
/// gradient as stored: dy must load into registers as it is stored.
template <class C, class D>
void check_gradient_map(const simd::batch_norm_gradient_map<C, D>* map) {
    if constexpr (!simd::in_register<C, D>)
        if (map != nullptr)
            throw std::invalid_argument("tessera::kernels::winograd: an output gradient given through a batch norm's map "
                                        "must be stored in a type that loads into registers");
}

/// What the drivers share: the tiling, the chunks of whole images and their per-thread buffers.
template <std::size_t M, class C>
struct plan {
    tiling<M> tl;
    // chunk: tiles per chunk, whole images whose transformed tiles ((m + 2)²·(cin + cout) values per tile)
    // are about as large as im2col's chunks.
    std::size_t cin, cout, plane, tiles, chunk, chunks;
    // block, data_block: tiles per block of the fused forward and of the fused input gradient
    // (fused_block_tiles), 0 where they do not run; sum_block: of the weight gradient's sums
    // (sum_block_tiles), and fused_backward: whether both gradients run a block at a time.
    std::size_t block, data_block, sum_block;
    bool fused_backward;
    plan(const tensor::shape& in, std::size_t out_channels, const window& g) : plan(in, out_channels, g, l1_data_bytes()) {}
    plan(const tensor::shape& in, std::size_t out_channels, const window& g, std::size_t l1_bytes)
        : tl(in, g), cin(in.c), cout(out_channels), plane(cin * cout), tiles(in.n * tl.per_image),
          chunk(kernels::detail::conv_chunk_rows(positions<M> * (cin + cout), tl.per_image, in.n, sizeof(C))),
          chunks((tiles + chunk - 1) / chunk), block(fused_block_tiles<M, C>(cout, cin, cin, l1_bytes)),
          data_block(fused_block_tiles<M, C>(cin, cout, strip_width<C>(cout), l1_bytes)),
          sum_block(sum_block_tiles<M, C>(cin, cout)),
          fused_backward(sum_block != 0 && with_strip_tile<C>(strip_width<C>(cout), [](auto) {}) &&
                         with_strip_tile<C>(strip_width<C>(cin), [](auto) {}) &&
                         strip_width<C>(cout) <= kernels::detail::tile<C, 1>::kc) {}
    [[nodiscard]] std::pair<std::size_t, std::size_t> range(std::size_t c) const noexcept {
        return {c * chunk, std::min(tiles, (c + 1) * chunk)};
    }
    /// The elements of chunk c's whole images in a tensor of `per_image` elements an image.
    [[nodiscard]] std::pair<std::size_t, std::size_t> elements(std::size_t c, std::size_t per_image) const noexcept {
        const auto [t0, t1] = range(c);
        return {t0 / tl.per_image * per_image, t1 / tl.per_image * per_image};
    }
    /// Transformed inputs (cols) and outputs (tiles), one buffer each per thread.
    std::pair<C*, C*> buffers(workspace<C>& ws, std::size_t t) const noexcept { return {ws.cols[t].data(), ws.tiles[t].data()}; }
    /// Makes the buffers hold `most` tiles (a chunk's by default; a block of the whole batch's can be more).
    void reserve(workspace<C>& ws, std::size_t threads, const gemm_options& opt, std::size_t most = 0) const {
        const std::size_t n = most == 0 ? chunk : most;
        kernels::detail::thread_columns(ws, threads, positions<M> * position_stride<C>(n, cin), opt);
        kernels::detail::thread_buffers(ws.tiles, threads, positions<M> * position_stride<C>(n, cout));
    }
    /// dx over tiles [t0, t1) from their transformed output gradients dm (the chunk's, in strips) and
    /// Uᵀ: a block of data_block tiles at a time when the GEMMs run on this thread alone, else the
    /// chunk's GEMMs on o's threads; dv is scratch for dV (V's buffer, no longer needed). The same
    /// sums either way. dx holds the images from tile `origin`'s (a chunk's part, dx_part).
    void input_gradient(const tensor::shape& in, const window& g, std::size_t t0, std::size_t t1, const C* dm,
                        const C* ut, C* dv, C* dx, const gemm_options& o, std::size_t origin) const {
        if (data_block != 0 && o.threads <= 1) {
            for (std::size_t b0 = t0; b0 < t1; b0 += data_block) {
                const std::size_t b1 = std::min(t1, b0 + data_block);
                block_data_gemms<M>(t1 - t0, b0 - t0, b1 - b0, cin, cout, dm, ut, dv);
                add_input_gradient(dv, in, g, tl, b0 - origin, b1 - origin, dx);
            }
            return;
        }
        data_gemms<M>(t1 - t0, cin, cout, dm, ut, dv, o);
        add_input_gradient(dv, in, g, tl, t0 - origin, t1 - origin, dx);
    }
    /// Where chunk c on thread t sums its images of dx in C, from the chunk's first image (whose first
    /// tile is range(c).first): the whole buffer `acc` at that image, or, where dx is stored in
    /// another type, a buffer of the thread's own (staging::parts: in cache while the chunk adds
    /// into it and commits it, store_compute::commit_part).
    template <class X>
    C* dx_part(workspace<C>& ws, std::size_t t, std::size_t c, C* acc, std::size_t image) const noexcept {
        if constexpr (std::is_same_v<C, X>)
            return acc + range(c).first / tl.per_image * image;
        else
            return ws.parts[t].data();
    }
    /// Reserves staging::parts' buffers (a chunk's images of dx in C) for `threads` threads.
    template <class X>
    void reserve_parts(workspace<C>& ws, std::size_t threads, const tensor::shape& in) const {
        if constexpr (!std::is_same_v<C, X>) kernels::detail::thread_buffers(ws.parts, threads, chunk / tl.per_image * in.h * in.w * in.c);
    }
    /// The transformed weights, U or Uᵀ in strips (plane_stride apart), after as many values of scratch.
    template <class W>
    C* weights(const W* w, bool transposed, workspace<C>& ws, parallelism par) const {
        const auto* wr = registers_view<C>(w, 9 * plane, ws.col, par);
        const std::size_t size = positions<M> * plane_stride<C>(cin, cout);
        if (ws.filters.size() < 2 * size) ws.filters.resize(2 * size);
        C* u = ws.filters.data() + size;
        transform_weights<M>(wr, cin, cout, transposed, ws.filters.data(), u, par);
        return u;
    }
};

}  // namespace detail

/// y = conv(x, w) for a window that fits (3×3, stride 1), by F(M×M, 3×3): as kernels::conv2d_forward.
template <std::size_t M, Compute C, Storage T, Storage W, Storage Y>
void conv2d_forward(const T* x, const tensor::shape& in, const W* w, std::size_t cout, const window& g, Y* y,
                    workspace<C>& ws, gemm_options opt = {}, const tensor::rounding& rounding = {},
                    const simd::relu_of_affine<C>* map = nullptr) {
    detail::check_map<C, T>(map);
    const detail::plan<M, C> p(in, cout, g);
    const parallelism par{opt.threads, opt.pool};
    const auto* xs = detail::registers_view<C>(x, in.size(), ws.a, par);
    const C* u = p.weights(w, false, ws, par);
    // Transforms tiles [b0, b1), multiplies and transforms back into out, a block with v and m in L1.
    const auto fused_block = [&](C* v, C* m, std::size_t b0, std::size_t b1, auto* out) {
        detail::transform_input(xs, in, g, p.tl, b0, b1, v, map);
        detail::block_gemms<M>(b1 - b0, p.cin, cout, v, u, m);
        detail::transform_output(m, p.tl, cout, b0, b1, out);
    };
    // Runs the chunks into out (y itself, or C scratch), then done(chunk, its gemm_options).
    const auto run = [&](auto* out, auto&& done) {
        const std::size_t threads = kernels::detail::chunk_threads(opt, p.chunks);
        p.reserve(ws, threads, opt);
        kernels::detail::for_each_chunk(p.chunks, threads, opt.pool, [&](std::size_t t, std::size_t c) {
            const auto [t0, t1] = p.range(c);
            const auto [v, m] = p.buffers(ws, t);
            const gemm_options o = kernels::detail::chunk_gemm(opt, threads, ws, t);
            if (p.block != 0 && (threads > 1 || opt.threads <= 1)) {  // a chunk's GEMMs on one thread
                // Transform, multiply and transform back a few tiles at a time: what the transforms write,
                // the GEMMs and the output transform read from L1 instead of L2.
                for (std::size_t b0 = t0; b0 < t1; b0 += p.block) fused_block(v, m, b0, std::min(t1, b0 + p.block), out);
            } else {
                detail::transform_input(xs, in, g, p.tl, t0, t1, v, map);
                detail::forward_gemms<M>(t1 - t0, p.cin, cout, v, u, m, o);
                detail::transform_output(m, p.tl, cout, t0, t1, out);
            }
            done(c, o);
        });
    };
    if constexpr (simd::in_register<C, Y>) {
        // Rounded to nearest from the registers; a stochastic rounding draws in commit().
        if (!rounds_stochastically<C, Y>(rounding)) {
            if (p.block == 0) return run(y, [](std::size_t, const gemm_options&) {});
            // Nothing to commit: the threads take the blocks themselves, one at a time, rather than
            // chunks of whole images. No chunk then ends in a short block (ResNet-20's 28 × 28 layers:
            // chunks of 98 tiles, blocks of 32, the last of 2 tiles costing a whole register tile's
            // rows), and a thread that falls behind holds the other up for a block at most.
            // bench_winograd_blocks' forward_pieces: 16 channels 0.90× the chunks' time on one and on
            // two threads, 32 and 64 channels unchanged (2-vCPU AMD EPYC, Zen 4). Each tile's output is
            // the same whichever block computes it.
            const std::size_t blocks = (p.tiles + p.block - 1) / p.block;
            const std::size_t block_threads = std::max<std::size_t>(1, std::min(opt.threads, blocks));
            p.reserve(ws, block_threads, opt, std::min(p.block, p.tiles));
            kernels::detail::for_each_chunk(blocks, block_threads, opt.pool, [&](std::size_t t, std::size_t b) {
                const auto [v, m] = p.buffers(ws, t);
                fused_block(v, m, b * p.block, std::min(p.tiles, (b + 1) * p.block), y);
            });
            return;
        }
    }
    store_compute<C, Y> dst(y, g.output(in, cout).size(), ws.c, par, rounding);
    const std::size_t image = p.tl.oh * p.tl.ow * cout;
    run(dst.target(), [&](std::size_t c, const gemm_options& o) {
        const auto [e0, e1] = p.elements(c, image);
        dst.commit(e0, e1, {o.threads, o.pool});  // the chunk's images, while they are in cache
    });
}

/// dx = the gradient of conv2d_forward with respect to its input (overwrites dx), plus addend when
/// given, kept where mask is positive when given (store_compute::mask_by).
template <std::size_t M, Compute C, Storage D, Storage W, Storage X>
void conv2d_backward_data(const D* dy, const tensor::shape& in, const W* w, std::size_t cout, const window& g, X* dx,
                          workspace<C>& ws, gemm_options opt = {}, const tensor::rounding& rounding = {},
                          const X* addend = nullptr, const X* mask = nullptr,
                          const simd::batch_norm_gradient_map<C, D>* dymap = nullptr) {
    detail::check_gradient_map(dymap);
    const detail::plan<M, C> p(in, cout, g);
    const parallelism par{opt.threads, opt.pool};
    const auto* dys = detail::registers_view<C>(dy, g.output(in, cout).size(), ws.b, par);
    constexpr staging where = std::is_same_v<C, X> ? staging::whole : staging::parts;
    store_compute<C, X> dst(dx, in.size(), ws.c, par, rounding, addend, where);
    dst.mask_by(mask);
    const C* ut = p.weights(w, true, ws, par);
    const std::size_t threads = kernels::detail::chunk_threads(opt, p.chunks);
    p.reserve(ws, threads, opt);
    p.template reserve_parts<X>(ws, threads, in);
    C* acc = where == staging::whole ? dst.target() : nullptr;
    const std::size_t image = in.h * in.w * in.c;
    kernels::detail::for_each_chunk(p.chunks, threads, opt.pool, [&](std::size_t t, std::size_t c) {
        const auto [t0, t1] = p.range(c);
        const auto [v, m] = p.buffers(ws, t);
        detail::transform_output_gradient(dys, p.tl, cout, t0, t1, detail::strip_width<C>(cout), m, dymap);
        const gemm_options o = kernels::detail::chunk_gemm(opt, threads, ws, t);
        C* part = p.template dx_part<X>(ws, t, c, acc, image);
        p.input_gradient(in, g, t0, t1, m, ut, v, part, o, t0);
        const auto [e0, e1] = p.elements(c, image);
        dst.commit_part(part, e0, e1, {o.threads, o.pool});  // the chunk's images of dx are final, in cache
    });
}

/// dw += the gradient of conv2d_forward with respect to its weights ([3][3][cin][cout], in C) and, when
/// dx is not null, dx = the gradient with respect to its input (plus addend when given, kept where
/// mask is positive when given): conv2d_backward_weight and conv2d_backward_data in one pass over
/// the chunks, each output gradient transformed once.
template <std::size_t M, Compute C, Storage T, Storage D, Storage W, Storage X>
void conv2d_backward(const T* x, const tensor::shape& in, const D* dy, const W* w, std::size_t cout, const window& g,
                     C* dw, X* dx, workspace<C>& ws, gemm_options opt = {}, const tensor::rounding& rounding = {},
                     const simd::relu_of_affine<C>* map = nullptr, const X* addend = nullptr, const X* mask = nullptr,
                     const simd::batch_norm_gradient_map<C, D>* dymap = nullptr) {
    detail::check_map<C, T>(map);
    detail::check_gradient_map(dymap);
    const detail::plan<M, C> p(in, cout, g);
    const parallelism par{opt.threads, opt.pool};
    const auto* xs = detail::registers_view<C>(x, in.size(), ws.a, par);
    const auto* dys = detail::registers_view<C>(dy, g.output(in, cout).size(), ws.b, par);
    constexpr staging where = std::is_same_v<C, X> ? staging::whole : staging::parts;
    std::optional<store_compute<C, X>> dst;
    const C* ut = nullptr;
    if (dx != nullptr) {
        dst.emplace(dx, in.size(), ws.c, par, rounding, addend, where);
        dst->mask_by(mask);
        ut = p.weights(w, true, ws, par);  // its scratch half then holds dU
    }
    const std::size_t size = detail::positions<M> * detail::plane_stride<C>(p.cin, cout);  // dU's
    if (ws.filters.size() < size) ws.filters.resize(size);
    C* du = ws.filters.data();
    C* acc = dst && where == staging::whole ? dst->target() : nullptr;
    const std::size_t image = in.h * in.w * in.c;
    // Chunk c's images of dx are final once its input gradient is added: committed then, in cache.
    const auto commit = [&](std::size_t c, C* part, const gemm_options& o) {
        const auto [e0, e1] = p.elements(c, image);
        dst->commit_part(part, e0, e1, {o.threads, o.pool});
    };
    const kernels::detail::lane_plan lanes = kernels::detail::plan_lanes(p.chunks, size, sizeof(C), opt);
    p.reserve(ws, lanes.threads, opt);
    if (dst) p.template reserve_parts<X>(ws, lanes.threads, in);
    kernels::detail::sum_in_lanes(lanes, p.chunks, du, true, size, ws, opt,
                                  [&](std::size_t t, std::size_t c, C* target, C beta, const gemm_options& o) {
        const auto [t0, t1] = p.range(c);
        const auto [v, m] = p.buffers(ws, t);
        C* part = dst ? p.template dx_part<X>(ws, t, c, acc, image) : nullptr;  // its images of dx, from tile t0's
        if (p.fused_backward && o.threads <= 1) {
            // Both gradients a block of tiles at a time: what the transforms write stays in L1 for
            // the GEMMs, and dV takes V's place.
            for (std::size_t b0 = t0; b0 < t1; b0 += p.sum_block) {
                const std::size_t b1 = std::min(t1, b0 + p.sum_block), nb = b1 - b0;
                detail::transform_input(xs, in, g, p.tl, b0, b1, v, map);
                detail::transform_output_gradient(dys, p.tl, cout, b0, b1, detail::strip_width<C>(cout), m, dymap);
                detail::block_weight_gemms<M>(nb, p.cin, cout, v, m, b0 == t0 ? beta : C(1), target);
                if (!dst) continue;
                detail::block_data_gemms<M>(nb, 0, nb, p.cin, cout, m, ut, v);
                detail::add_input_gradient(v, in, g, p.tl, b0 - t0, b1 - t0, part);
            }
            if (dst) commit(c, part, o);
            return;
        }
        detail::transform_input(xs, in, g, p.tl, t0, t1, v, map);
        detail::transform_output_gradient(dys, p.tl, cout, t0, t1, detail::strip_width<C>(cout), m, dymap);
        detail::weight_gemms<M>(t1 - t0, p.cin, cout, v, m, beta, target, o, p.sum_block);
        if (!dst) return;
        p.input_gradient(in, g, t0, t1, m, ut, v, part, o, t0);  // V is no longer needed: dV takes its place
        commit(c, part, o);
    });
    detail::add_weight_gradient<M>(du, p.cin, cout, dw, par);
}

/// dw += the gradient of conv2d_forward with respect to its weights ([3][3][cin][cout], in C).
template <std::size_t M, Compute C, Storage T, Storage D>
void conv2d_backward_weight(const T* x, const tensor::shape& in, const D* dy, std::size_t cout, const window& g, C* dw,
                            workspace<C>& ws, gemm_options opt = {}, const simd::relu_of_affine<C>* map = nullptr,
                            const simd::batch_norm_gradient_map<C, D>* dymap = nullptr) {
    winograd::conv2d_backward<M>(x, in, dy, static_cast<const C*>(nullptr), cout, g, dw, static_cast<C*>(nullptr), ws, opt,
                                 {}, map, static_cast<const C*>(nullptr), static_cast<const C*>(nullptr), dymap);
}

}  // namespace tessera::kernels::winograd
