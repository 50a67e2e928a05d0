#pragma once
// Matrix multiply C = alpha·op(A)·op(B) + beta·C: cache-blocked, packed panels, xsimd micro-kernel.
#include <algorithm>
#include <bit>
#include <cstddef>
#include <exception>
#include <new>
#include <optional>
#include <tuple>
#include <utility>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <xsimd/xsimd.hpp>

#include "tessera/kernels/inline_lambda.hpp"
#include "tessera/kernels/storage.hpp"
#include "tessera/kernels/thread_pool.hpp"

namespace tessera::kernels {

/// Whether an operand is used as stored or transposed (row-major storage throughout).
enum class trans : bool { no = false, yes = true };

namespace detail {

template <class C>
using simd = xsimd::batch<C>;

/// Register tile of NV SIMD vectors' width (nr) by mr rows, chosen so that mr·NV accumulators, NV
/// B vectors and one broadcast fit the register file: AVX-512 (32 zmm) 14×2 or 28×1 vectors,
/// AVX2 (16 ymm) 6×2 or 12×1. The one-vector tile serves narrow outputs (16 channels in fp32 with
/// AVX-512) without wasting half of every tile. MR overrides the rows (short tiles, see short_rows).
template <class C, std::size_t NV>
inline constexpr std::size_t default_mr = NV == 2 ? (sizeof(C) * xsimd::batch<C>::size >= 64 ? 14 : 6)
                                                  : (sizeof(C) * xsimd::batch<C>::size >= 64 ? 28 : 12);
template <class C, std::size_t NV, std::size_t MR = default_mr<C, NV>>
struct tile {
    static constexpr std::size_t width = simd<C>::size;
    static constexpr std::size_t nv = NV;
    static constexpr std::size_t nr = NV * width;
    static constexpr std::size_t mr = MR;
    static constexpr std::size_t kc = 256;                        // B micro-panel kc·nr stays in L1
    static constexpr std::size_t mc = mr * (sizeof(C) == 4 ? 24 : 12) * (3 - NV);  // A block mc·kc in L2
    static constexpr std::size_t nc = nr * 128 / NV;              // B panel kc·nc in L2
};

/// Rows of the short tile: the largest power of two below the default (AVX-512 fp32: 16 rows by one
/// vector, 8 by two). For a few rows of C (m = 16, 32 or 64 input channels in a convolution's weight
/// gradient) the default tile pads the last strip with up to mr - 1 zero rows (m = 16 in 28-row
/// tiles computes 1.75× the FLOPs, and packs A to do so); short tiles fit such m exactly and read A
/// in place.
template <class C, std::size_t NV>
inline constexpr std::size_t short_mr = std::bit_floor(default_mr<C, NV> - 1);

/// Whether m rows, at most eight default tiles, waste fewer padded rows in short tiles than in default
/// ones (many rows stay in the default tiles, whose loads per FMA are fewer). Up to eight: a 64-channel
/// Winograd layer's weight gradient (m = 64 input channels by two vectors of output channels, 70 rows
/// in default tiles, the last strip packed) in tiles of 8 rows took ResNet-20's 64-channel 7 × 7 layer's
/// backward from 0.96-1.01 to 0.86-0.90 ms (bench_layer_passes --benchmark_filter='passes/fp32/conv
/// 64>64', the builds taking turns three times, one thread of a 2-vCPU AMD EPYC, Zen 4); at most four,
/// it had kept the default tiles. Both tiles sum each element over the same kc block in the same
/// order: the choice never changes a result.
template <class C, std::size_t NV>
[[nodiscard]] constexpr bool short_rows(std::size_t m) noexcept {
    constexpr std::size_t d = default_mr<C, NV>, s = short_mr<C, NV>;
    return m <= 8 * d && (m + s - 1) / s * s < (m + d - 1) / d * d;
}

/// Converts a stored element (float, double, half, bfloat16) to the computation type.
template <class C, class T>
[[nodiscard]] inline C load_as(const T& v) noexcept {
    if constexpr (std::is_same_v<C, T>)
        return v;
    else if constexpr (std::is_arithmetic_v<T>)
        return static_cast<C>(v);
    else
        return static_cast<C>(static_cast<float>(v));
}

/// Converts a computed value to a storage type (through float for the 16-bit types).
template <class T, class C>
[[nodiscard]] inline T store_as(C v) noexcept {
    if constexpr (std::is_arithmetic_v<T>)
        return static_cast<T>(v);
    else
        return T(static_cast<float>(v));
}

/// Whether an operand stored as T (not C) loads into registers as C (half for float, with F16C):
/// gemm then widens its runs with vector conversions (simd::copy) instead of element by element.
template <class C, class T>
inline constexpr bool widens = !std::is_same_v<C, T> && kernels::simd::in_register<C, T>;

/// Packs rows [i0, i0+mc) × columns [p0, p0+kc) of op(A) into strips of mr rows: strip s holds
/// element (i, p) at s·mr·kc + p·mr + i. Rows past the matrix are zero.
template <class Tile, class C, class TA>
void pack_a(trans ta, const TA* a, std::size_t lda, std::size_t i0, std::size_t mc, std::size_t p0,
            std::size_t kc, C* out) {
    constexpr std::size_t mr = Tile::mr;
    for (std::size_t s = 0; s < mc; s += mr) {
        const std::size_t rows = std::min(mr, mc - s);
        C* dst = out + s * kc;
        if (ta == trans::no) {
            for (std::size_t i = 0; i < rows; ++i) {
                const TA* src = a + (i0 + s + i) * lda + p0;
                for (std::size_t p = 0; p < kc; ++p) dst[p * mr + i] = load_as<C>(src[p]);
            }
        } else {
            for (std::size_t p = 0; p < kc; ++p) {
                const TA* src = a + (p0 + p) * lda + i0 + s;
                for (std::size_t i = 0; i < rows; ++i) dst[p * mr + i] = load_as<C>(src[i]);
            }
        }
        if (rows < mr)
            for (std::size_t p = 0; p < kc; ++p)
                for (std::size_t i = rows; i < mr; ++i) dst[p * mr + i] = C(0);
    }
}

/// Packs rows [p0, p0+kc) × columns [j0, j0+nc) of op(B) into strips of nr columns: strip s holds
/// element (p, j) at s·nr·kc + p·nr + j. Columns past the matrix are zero.
template <class Tile, class C, class TB>
void pack_b(trans tb, const TB* b, std::size_t ldb, std::size_t p0, std::size_t kc, std::size_t j0,
            std::size_t nc, C* out) {
    constexpr std::size_t nr = Tile::nr;
    for (std::size_t s = 0; s < nc; s += nr) {
        const std::size_t cols = std::min(nr, nc - s);
        C* dst = out + s * kc;
        if (tb == trans::no) {
            for (std::size_t p = 0; p < kc; ++p) {
                const TB* src = b + (p0 + p) * ldb + j0 + s;
                C* row = dst + p * nr;
                if constexpr (widens<C, TB>)
                    kernels::simd::copy(src, row, cols);  // a row's run in vector conversions
                else
                    for (std::size_t j = 0; j < cols; ++j) row[j] = load_as<C>(src[j]);
                for (std::size_t j = cols; j < nr; ++j) row[j] = C(0);
            }
        } else {
            for (std::size_t j = 0; j < cols; ++j) {
                const TB* src = b + (j0 + s + j) * ldb + p0;
                for (std::size_t p = 0; p < kc; ++p) dst[p * nr + j] = load_as<C>(src[p]);
            }
            for (std::size_t p = 0; p < kc; ++p)
                for (std::size_t j = cols; j < nr; ++j) dst[p * nr + j] = C(0);
        }
    }
}

/// The register-tiled kernel: an mr × nr block of C from packed strips a (kc·mr) and b (kc·nr).
/// Full tiles update C in place; edge tiles go through a small buffer. beta == 0 never reads C.
/// Where the micro-kernel finds A's element (i, p): packed (a[p·mr + i]), column-strided
/// (a[p·lda + i], an unpacked transposed A) or row-strided (a[i·lda + p], an unpacked A).
enum class a_layout { packed, k_strided, row_strided };

/// LDA, when not 0, is lda known at compile time: a row-strided A's rows then lie at constant offsets
/// from one pointer, where a run-time lda makes the compiler keep a pointer per row (more than the
/// general registers: it parks them in vector registers and moves them back on the FMA ports).
template <class Tile, a_layout AL = a_layout::packed, std::size_t LDA = 0, class C>
void micro_kernel(std::size_t kc, const C* __restrict a, std::size_t lda_run_time, const C* __restrict b, C* c,
                  std::size_t ldc, std::size_t rows, std::size_t cols, C alpha, C beta) noexcept {
    const std::size_t lda = LDA != 0 ? LDA : lda_run_time;
    using B = simd<C>;
    constexpr std::size_t mr = Tile::mr, nr = Tile::nr, w = Tile::width, nv = Tile::nv;
    B acc[mr][nv];
#pragma GCC unroll 32
    for (std::size_t i = 0; i < mr; ++i)
#pragma GCC unroll 2
        for (std::size_t v = 0; v < nv; ++v) acc[i][v] = B(C(0));
    for (std::size_t p = 0; p < kc; ++p) {
        B bv[nv];
#pragma GCC unroll 2
        for (std::size_t v = 0; v < nv; ++v) bv[v] = B::load_unaligned(b + p * nr + v * w);  // B may be read in place
        const C* ap = AL == a_layout::packed ? a + p * mr : AL == a_layout::k_strided ? a + p * lda : a + p;
#pragma GCC unroll 32
        for (std::size_t i = 0; i < mr; ++i) {
            const B ai(AL == a_layout::row_strided ? ap[i * lda] : ap[i]);
#pragma GCC unroll 2
            for (std::size_t v = 0; v < nv; ++v) acc[i][v] = kernels::simd::fused_multiply_add(ai, bv[v], acc[i][v]);
        }
    }
    const B va(alpha), vb(beta);
    if (rows == mr && cols == nr) {
        // The whole tile, each vector through value(sums, its place in C), unrolled as above.
        const auto store_tile = [&](auto&& value) TESSERA_INLINE_LAMBDA {
#pragma GCC unroll 32
            for (std::size_t i = 0; i < mr; ++i)
#pragma GCC unroll 2
                for (std::size_t v = 0; v < nv; ++v) {
                    C* ci = c + i * ldc + v * w;
                    value(acc[i][v], ci).store_unaligned(ci);
                }
        };
        // alpha 1 (every Winograd GEMM's) stores the sums as they are, and beta 1 adds C to them: the
        // bits of the general forms (x·1 is x; fma(x, 1, y·1) is x + y rounded once), without their
        // multiplies, which take the FMA ports for mr·nv of every kc·mr·nv operations (1/16 at kc 16).
        if (alpha == C(1) && beta == C(0))
            store_tile([](const B& sums, const C*) TESSERA_INLINE_LAMBDA { return sums; });
        else if (alpha == C(1) && beta == C(1))
            store_tile([](const B& sums, const C* ci) TESSERA_INLINE_LAMBDA { return sums + B::load_unaligned(ci); });
        else if (beta == C(0))
            store_tile([&](const B& sums, const C*) TESSERA_INLINE_LAMBDA { return sums * va; });
        else
            store_tile([&](const B& sums, const C* ci) TESSERA_INLINE_LAMBDA {
                return kernels::simd::fused_multiply_add(sums, va, B::load_unaligned(ci) * vb);
            });
        return;
    }
    alignas(64) C buf[mr * nr];
    // Unrolled like the loops above: an accumulator indexed at run time would keep them all in memory.
#pragma GCC unroll 32
    for (std::size_t i = 0; i < mr; ++i)
#pragma GCC unroll 2
        for (std::size_t v = 0; v < nv; ++v) acc[i][v].store_aligned(buf + i * nr + v * w);
    for (std::size_t i = 0; i < rows; ++i)
        for (std::size_t j = 0; j < cols; ++j) {
            C& dst = c[i * ldc + j];
            dst = beta == C(0) ? alpha * buf[i * nr + j] : alpha * buf[i * nr + j] + beta * dst;
        }
}

/// micro_kernel on a row-strided A, with lda as a constant where it is 16, 32 or 64 (the channels of
/// narrow convolution layers, as Winograd's GEMMs read them): see micro_kernel's LDA.
template <class Tile, class C>
void row_strided_kernel(std::size_t kc, const C* a, std::size_t lda, const C* b, C* c, std::size_t ldc,
                        std::size_t rows, std::size_t cols, C alpha, C beta) noexcept {
    switch (lda) {
        case 16: return micro_kernel<Tile, a_layout::row_strided, 16>(kc, a, lda, b, c, ldc, rows, cols, alpha, beta);
        case 32: return micro_kernel<Tile, a_layout::row_strided, 32>(kc, a, lda, b, c, ldc, rows, cols, alpha, beta);
        case 64: return micro_kernel<Tile, a_layout::row_strided, 64>(kc, a, lda, b, c, ldc, rows, cols, alpha, beta);
        default: return micro_kernel<Tile, a_layout::row_strided>(kc, a, lda, b, c, ldc, rows, cols, alpha, beta);
    }
}

/// micro_kernel on the first `rows` rows (at most mr) of a strip of an A read in place (row- or
/// k-strided): in place where they are mr rows; else the rows (row-strided) or the runs of rows
/// (k-strided) are first copied into a small panel padded with zero rows, because the register tile
/// reads all mr rows and in place that would read past the strip's last row. A row-strided A's
/// leading dimension is a constant where it is 16, 32 or 64 (row_strided_kernel) when ConstantLd, else
/// read at run time: each constant is one more instantiation of the kernel, which the tiles of a few
/// rows (strip_kernel's cut ones) and gemm's widened 16-bit operands do without.
template <class Tile, a_layout AL, bool ConstantLd = true, class C>
void padded_strip(std::size_t kc, const C* a, std::size_t lda, const C* b, C* c, std::size_t ldc, std::size_t rows,
                  std::size_t cols, C alpha, C beta) noexcept {
    constexpr std::size_t mr = Tile::mr;
    const auto row_strided = [&](const C* from, std::size_t ld) {
        if constexpr (ConstantLd)
            row_strided_kernel<Tile>(kc, from, ld, b, c, ldc, rows, cols, alpha, beta);
        else
            micro_kernel<Tile, a_layout::row_strided>(kc, from, ld, b, c, ldc, rows, cols, alpha, beta);
    };
    if (rows == mr) {
        if constexpr (AL == a_layout::row_strided)
            row_strided(a, lda);
        else
            micro_kernel<Tile, AL>(kc, a, lda, b, c, ldc, rows, cols, alpha, beta);
        return;
    }
    alignas(64) C panel[Tile::kc * mr];
    if constexpr (AL == a_layout::row_strided) {  // mr rows of kc, the cut ones zero
        for (std::size_t i = 0; i < mr; ++i)
            if (i < rows)
                std::copy_n(a + i * lda, kc, panel + i * kc);
            else
                std::fill_n(panel + i * kc, kc, C(0));
        row_strided(panel, kc);
    } else {  // packed: kc runs of mr, each the strip's rows then zeros
        for (std::size_t p = 0; p < kc; ++p) {
            std::copy_n(a + p * lda, rows, panel + p * mr);
            std::fill_n(panel + p * mr + rows, mr - rows, C(0));
        }
        micro_kernel<Tile>(kc, panel, 0, b, c, ldc, rows, cols, alpha, beta);
    }
}

/// micro_kernel on the first `rows` rows of an mr-row strip of an A read in place (row- or
/// k-strided), for callers that hand it strips cut short. A strip cut to at most a quarter or a half
/// of mr rows (the last of a block or chunk whose rows are no multiple of mr: 98 tiles in blocks of
/// 16 leave 2) runs in a tile of that many rows, padded (padded_strip), instead of padding it to mr:
/// each element is the same chain of multiply-adds whichever tile computes it, so the same sums.
/// kc at most Tile::kc.
template <class Tile, a_layout AL, class C>
void strip_kernel(std::size_t kc, const C* a, std::size_t lda, const C* b, C* c, std::size_t ldc, std::size_t rows,
                  std::size_t cols, C alpha, C beta) noexcept {
    static_assert(AL != a_layout::packed, "tessera::kernels::detail::strip_kernel: A is read in place");
    constexpr std::size_t mr = Tile::mr;
    if constexpr (mr / 4 >= 2) {
        if (rows <= mr / 4)
            return padded_strip<tile<C, Tile::nv, mr / 4>, AL, false>(kc, a, lda, b, c, ldc, rows, cols, alpha, beta);
        if (rows <= mr / 2)
            return padded_strip<tile<C, Tile::nv, mr / 2>, AL, false>(kc, a, lda, b, c, ldc, rows, cols, alpha, beta);
    }
    padded_strip<Tile, AL>(kc, a, lda, b, c, ldc, rows, cols, alpha, beta);
}

/// An uninitialised 64-byte aligned buffer (packing overwrites it; zero-filling would cost as much).
template <class C>
class scratch {
public:
    explicit scratch(std::size_t n) : m_data(static_cast<C*>(xsimd::aligned_malloc(std::max<std::size_t>(n, 1) * sizeof(C), 64))) {
        if (m_data == nullptr) throw std::bad_alloc();
    }
    ~scratch() { xsimd::aligned_free(m_data); }
    scratch(const scratch&) = delete;
    scratch& operator=(const scratch&) = delete;
    [[nodiscard]] C* data() const noexcept { return m_data; }

private:
    C* m_data;
};

/// How gemm_blocked shares C between threads: bands of whole register tiles, of rows or of columns.
struct thread_split {
    std::size_t threads, rows_per_thread, cols_per_thread;
    bool by_columns;
};
/// Rows while each thread gets at least four strips of mr rows (then each packs B for its rows
/// only once per four strips); columns when the rows are too few for that and the columns give at
/// least as many threads a band of nr-wide strips: with a few rows (a deep convolution on small
/// images, m = 32 rows of 9·512 columns by 512), a split by rows would hand the threads unequal
/// strips and make each pack all of B. Whole tiles either way: each element is computed by the same
/// micro-kernel call sequence whatever the thread count.
[[nodiscard]] constexpr thread_split split_threads(std::size_t max_threads, std::size_t m, std::size_t n,
                                                   std::size_t mr, std::size_t nr) noexcept {
    const std::size_t row_strips = (m + mr - 1) / mr, col_strips = (n + nr - 1) / nr;
    const std::size_t wanted = std::max<std::size_t>(1, max_threads);
    const std::size_t by_rows = std::min(wanted, row_strips), by_columns = std::min(wanted, col_strips);
    if (by_columns > 1 && row_strips < 4 * wanted && by_columns >= by_rows) {
        const std::size_t per = (col_strips + by_columns - 1) / by_columns;
        return {(col_strips + per - 1) / per, row_strips * mr, per * nr, true};
    }
    const std::size_t per = (row_strips + by_rows - 1) / by_rows;
    return {(row_strips + per - 1) / per, per * mr, n, false};
}

/// The blocked loops (BLIS order: jc, pc, ic, jr, ir) for one register tile; threads split rows or
/// columns (split_threads).
template <class tl, class C, class TA, class TB>
void gemm_blocked(trans ta, trans tb, std::size_t m, std::size_t n, std::size_t k, C alpha, const TA* a,
                  std::size_t lda, const TB* b, std::size_t ldb, C beta, C* c, std::size_t ldc,
                  std::size_t max_threads, gemm_buffers* buffers, thread_pool* workers) {
    const thread_split split = split_threads(max_threads, m, n, tl::mr, tl::nr);
    const std::size_t threads = split.threads;
    const std::size_t nc_max = std::min(tl::nc, (std::min(n, split.cols_per_thread) + tl::nr - 1) / tl::nr * tl::nr);
    const std::size_t kc_max = std::min(tl::kc, k);
    const std::size_t mc_max = std::min(tl::mc, split.rows_per_thread);
    // A is read in place (its rows or columns straight from memory, no copy) unless its leading
    // dimension is a multiple of 4 KiB: then every row of a strip maps to the same L1 set and packing
    // into a contiguous panel avoids the conflict misses. Measured: in place is 5-50 % faster up to
    // 512² and on every ResNet-20 shape, where packing costs as much as the arithmetic (n = 16..64
    // reuses each A element only n times). An A stored as a type that widens in registers (half) is
    // first copied block by block, widened, in the layout it is stored in (whole runs in vector
    // conversions) and read in place from that copy; other stored types are packed element by element.
    constexpr bool widen_a = widens<C, TA>;
    const bool pack_a_block = !widen_a && (!std::is_same_v<TA, C> || (lda * sizeof(C)) % 4096 == 0);
    // A row-major B exactly one tile wide (n == ldb == nr: 16 or 32 channels in fp32) is already laid out
    // as its packed panel: the kernel reads it in place.
    const bool b_in_place = std::is_same_v<TB, C> && tb == trans::no && n == tl::nr && ldb == tl::nr;
    // Each thread owns a band of rows (and packs its own copy of B: packing B costs k·n per thread
    // against m·n·k/threads of arithmetic) or of columns; the threads never wait for one another.
    run_parallel(parallelism{threads, workers}, [&](std::size_t t) {
        const std::size_t row_begin = split.by_columns ? 0 : std::min(m, t * split.rows_per_thread);
        const std::size_t row_end = std::min(m, row_begin + split.rows_per_thread);
        const std::size_t col_begin = split.by_columns ? std::min(n, t * split.cols_per_thread) : 0;
        const std::size_t col_end = std::min(n, col_begin + split.cols_per_thread);
        if (row_begin >= row_end || col_begin >= col_end) return;
        const std::size_t a_size = widen_a        ? (mc_max + tl::width) * (kc_max + tl::width)
                                   : pack_a_block ? mc_max * kc_max
                                                  : kc_max * tl::mr;
        const std::size_t b_size = kc_max * nc_max;
        std::optional<scratch<C>> own_a, own_b;
        C* a_buf = nullptr;
        C* b_buf = nullptr;
        if (buffers != nullptr) {
            std::tie(a_buf, b_buf) = buffers[t].get<C>(a_size, b_size);
        } else {
            a_buf = own_a.emplace(a_size).data();
            b_buf = own_b.emplace(b_size).data();
        }
        struct view {
            C* p;
            C* data() const noexcept { return p; }
        } apack{a_buf}, bpack{b_buf};
        for (std::size_t jc = col_begin; jc < col_end; jc += tl::nc) {
            const std::size_t nc = std::min(tl::nc, col_end - jc);
            for (std::size_t pc = 0; pc < k; pc += tl::kc) {
                const std::size_t kc = std::min(tl::kc, k - pc);
                const C beta_block = pc == 0 ? beta : C(1);
                if (!b_in_place) pack_b<tl>(tb, b, ldb, pc, kc, jc, nc, bpack.data());
                for (std::size_t ic = row_begin; ic < row_end; ic += tl::mc) {
                    const std::size_t mc = std::min(tl::mc, row_end - ic);
                    // The widened block: mc rows of kc (trans::no) or kc runs of mc (trans::yes), a
                    // run padded where its length is a multiple of 4 KiB (the L1 conflicts above).
                    const std::size_t run = ta == trans::no ? kc : mc;
                    const std::size_t ldw = (run * sizeof(C)) % 4096 == 0 ? run + tl::width : run;
                    if constexpr (widen_a) {
                        if (ta == trans::no)
                            for (std::size_t i = 0; i < mc; ++i)
                                kernels::simd::copy(a + (ic + i) * lda + pc, apack.data() + i * ldw, kc);
                        else
                            for (std::size_t p = 0; p < kc; ++p)
                                kernels::simd::copy(a + (pc + p) * lda + ic, apack.data() + p * ldw, mc);
                    }
                    const std::size_t full = pack_a_block || widen_a ? 0 : mc / tl::mr * tl::mr;  // strips read in place
                    if (!widen_a && full < mc) pack_a<tl>(ta, a, lda, ic + full, mc - full, pc, kc, apack.data());
                    for (std::size_t jr = 0; jr < nc; jr += tl::nr) {
                        const std::size_t cols = std::min(tl::nr, nc - jr);
                        const C* bp = b_in_place ? reinterpret_cast<const C*>(b) + pc * ldb : bpack.data() + jr * kc;
                        for (std::size_t ir = 0; ir < mc; ir += tl::mr) {
                            C* cp = c + (ic + ir) * ldc + jc + jr;
                            const std::size_t rows = std::min(tl::mr, mc - ir);
                            if constexpr (widen_a) {
                                // In place from the widened block, a short strip padded; one kernel a
                                // layout (the leading dimension read at run time): a kernel for each
                                // constant in every 16-bit GEMM cost programs/train_half.cpp 36.0 s to
                                // compile against 33.5 s.
                                const C* aw = apack.data();
                                if (ta == trans::no)
                                    padded_strip<tl, a_layout::row_strided, false>(kc, aw + ir * ldw, ldw, bp, cp, ldc,
                                                                                  rows, cols, alpha, beta_block);
                                else
                                    padded_strip<tl, a_layout::k_strided, false>(kc, aw + ir, ldw, bp, cp, ldc, rows,
                                                                                cols, alpha, beta_block);
                                continue;
                            }
                            if constexpr (std::is_same_v<TA, C>) {
                                if (ir < full) {
                                    if (ta == trans::no)
                                        row_strided_kernel<tl>(kc, a + (ic + ir) * lda + pc, lda, bp, cp, ldc, rows, cols,
                                                               alpha, beta_block);
                                    else
                                        micro_kernel<tl, a_layout::k_strided>(kc, a + pc * lda + ic + ir, lda, bp, cp, ldc,
                                                                              rows, cols, alpha, beta_block);
                                    continue;
                                }
                            }
                            micro_kernel<tl>(kc, apack.data() + (ir - full) * kc, 0, bp, cp, ldc, rows, cols, alpha,
                                             beta_block);
                        }
                    }
                }
            }
        }
    });
}

}  // namespace detail

/// Options of one GEMM call: threads split the rows or the columns of C (each thread packs its own
/// panels); buffers, when given, point at one gemm_buffers per thread (`threads` of them), which hold
/// the packed panels between calls.
struct gemm_options {
    std::size_t threads = 1;
    gemm_buffers* buffers = nullptr;  ///< threads of them, or none: each call allocates its panels
    thread_pool* pool = nullptr;  ///< workers for threads > 1 (none: threads started per call)
};

/// C (m×n, leading dimension ldc) = alpha · op(A) · op(B) + beta · C, all row-major.
/// op(A) is m×k: A[i·lda + p], or A[p·lda + i] when ta == trans::yes; op(B) is k×n likewise.
/// A and B may be stored as float, double, half or bfloat16; they are converted while packing and
/// the product accumulates in C's type. beta == 0 overwrites C without reading it.
/// @code
///   gemm(trans::no, trans::yes, m, n, k, 1.0f, x, k, w, k, 0.0f, y, n);   // y = x · wᵀ
/// @endcode
template <class C, class TA, class TB>
void gemm(trans ta, trans tb, std::size_t m, std::size_t n, std::size_t k, C alpha, const TA* a,
          std::size_t lda, const TB* b, std::size_t ldb, C beta, C* c, std::size_t ldc,
          gemm_options options = {}) {
    static_assert(std::is_same_v<C, float> || std::is_same_v<C, double>,
                  "tessera::kernels::gemm: the accumulation type C must be float or double");
    if (m == 0 || n == 0) return;
    if (ldc < n || lda < (ta == trans::no ? k : m) || ldb < (tb == trans::no ? n : k))
        throw std::invalid_argument("tessera::kernels::gemm: leading dimension too small (m=" + std::to_string(m) +
                                    ", n=" + std::to_string(n) + ", k=" + std::to_string(k) + ", lda=" +
                                    std::to_string(lda) + ", ldb=" + std::to_string(ldb) + ", ldc=" +
                                    std::to_string(ldc) + ")");
    if (k == 0) {
        for (std::size_t i = 0; i < m; ++i)
            for (std::size_t j = 0; j < n; ++j) c[i * ldc + j] = beta == C(0) ? C(0) : beta * c[i * ldc + j];
        return;
    }
    const auto run = [&]<class Tile>(Tile) {
        detail::gemm_blocked<Tile>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, options.threads, options.buffers,
                                   options.pool);
    };
    // Short tiles only where A is read in place (stored as C, or widened into a copy read in place):
    // they exist to avoid packing A. B is packed or read in place either way.
    constexpr bool may_shorten = std::is_same_v<TA, C> || detail::widens<C, TA>;
    if (n <= detail::tile<C, 1>::nr) {
        if constexpr (may_shorten)
            if (detail::short_rows<C, 1>(m)) return run(detail::tile<C, 1, detail::short_mr<C, 1>>{});
        run(detail::tile<C, 1>{});
    } else {
        if constexpr (may_shorten)
            if (detail::short_rows<C, 2>(m)) return run(detail::tile<C, 2, detail::short_mr<C, 2>>{});
        run(detail::tile<C, 2>{});
    }
}

/// The textbook triple loop, accumulating in double: the reference the tests compare gemm against.
template <class C, class TA, class TB>
void gemm_reference(trans ta, trans tb, std::size_t m, std::size_t n, std::size_t k, C alpha, const TA* a,
                    std::size_t lda, const TB* b, std::size_t ldb, C beta, C* c, std::size_t ldc) {
    for (std::size_t i = 0; i < m; ++i)
        for (std::size_t j = 0; j < n; ++j) {
            double s = 0;
            for (std::size_t p = 0; p < k; ++p) {
                const double x = detail::load_as<double>(ta == trans::no ? a[i * lda + p] : a[p * lda + i]);
                const double y = detail::load_as<double>(tb == trans::no ? b[p * ldb + j] : b[j * ldb + p]);
                s += x * y;
            }
            C& dst = c[i * ldc + j];
            dst = static_cast<C>(alpha * s + (beta == C(0) ? 0.0 : beta * static_cast<double>(dst)));
        }
}

}  // namespace tessera::kernels
