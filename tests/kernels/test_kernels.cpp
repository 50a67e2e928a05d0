// Every fast kernel against a naive reference over odd shapes, and the fp16 storage paths against fp32.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "tessera/kernels.hpp"

namespace k = tessera::kernels;
using tessera::half;
using tessera::tensor::shape;

namespace {

template <class T>
std::vector<T> random_vector(std::size_t n, std::uint32_t seed, double lo = -1, double hi = 1) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> dist(lo, hi);
    std::vector<T> v(n);
    for (auto& x : v) x = k::detail::store_as<T>(dist(gen));
    return v;
}

template <class T>
double to_d(T v) {
    return k::detail::load_as<double>(v);
}

/// max |a - b| / (1 + |b|) over two sequences.
template <class A, class B>
double max_rel_error(const A& a, const B& b) {
    REQUIRE(a.size() == b.size());
    double e = 0;
    for (std::size_t i = 0; i < a.size(); ++i) e = std::max(e, std::abs(to_d(a[i]) - to_d(b[i])) / (1 + std::abs(to_d(b[i]))));
    return e;
}

/// The value type of a register tile.
template <class Tile>
struct tile_value;
template <class C, std::size_t NV, std::size_t MR>
struct tile_value<k::detail::tile<C, NV, MR>> {
    using type = C;
};

}  // namespace

TEMPLATE_TEST_CASE("gemm matches the triple loop on odd shapes, every transpose, alpha and beta", "[kernels][gemm]",
                   float, double) {
    using C = TestType;
    struct dims {
        std::size_t m, n, k;
    };
    // 1×1×1, below one tile, not multiples of the SIMD width, k over the kc block, m over the mc block.
    // n <= 16 (fp32) or 8 (fp64) takes the one-vector-wide tile; a few rows (m = 16, 32, 64) short
    // tiles, m = 28 or 14 exactly one default tile (AVX-512 fp32).
    const std::vector<dims> cases{{1, 1, 1},    {3, 5, 7},     {13, 37, 29},  {31, 33, 300}, {350, 17, 65},
                                  {65, 129, 3}, {57, 16, 20},  {29, 8, 270},  {16, 16, 300}, {32, 64, 270},
                                  {64, 32, 33}, {28, 16, 33},  {14, 40, 9}};
    const int threads = GENERATE(1, 2);
    for (const auto [m, n, kk] : cases)
        for (const auto ta : {k::trans::no, k::trans::yes})
            for (const auto tb : {k::trans::no, k::trans::yes}) {
                CAPTURE(m, n, kk, ta == k::trans::yes, tb == k::trans::yes, threads);
                const std::size_t lda = (ta == k::trans::no ? kk : m) + 3, ldb = (tb == k::trans::no ? n : kk) + 1;
                const std::size_t ldc = n + 2;
                const auto a = random_vector<C>((ta == k::trans::no ? m : kk) * lda, 1);
                const auto b = random_vector<C>((tb == k::trans::no ? kk : n) * ldb, 2);
                auto c = random_vector<C>(m * ldc, 3);
                auto ref = c;
                k::gemm(ta, tb, m, n, kk, C(0.5), a.data(), lda, b.data(), ldb, C(-1.5), c.data(), ldc,
                        {static_cast<std::size_t>(threads)});
                k::gemm_reference(ta, tb, m, n, kk, C(0.5), a.data(), lda, b.data(), ldb, C(-1.5), ref.data(), ldc);
                REQUIRE(max_rel_error(c, ref) < (std::is_same_v<C, float> ? 1e-5 : 1e-12));
                // beta == 0 ignores what C held (even NaN).
                std::fill(c.begin(), c.end(), std::numeric_limits<C>::quiet_NaN());
                k::gemm(ta, tb, m, n, kk, C(1), a.data(), lda, b.data(), ldb, C(0), c.data(), ldc);
                k::gemm_reference(ta, tb, m, n, kk, C(1), a.data(), lda, b.data(), ldb, C(0), ref.data(), ldc);
                for (std::size_t i = 0; i < m; ++i)
                    for (std::size_t j = 0; j < n; ++j) REQUIRE(std::abs(c[i * ldc + j] - ref[i * ldc + j]) < 1e-4);
                // alpha 1 and beta 1 add the product to C with one rounding: the bits of the product
                // (beta 0, just computed) plus C's old value, where one kc block holds the whole sum.
                if (kk <= k::detail::tile<C, 1>::kc) {
                    const auto c0 = random_vector<C>(m * ldc, 4);
                    auto sum = c0;
                    k::gemm(ta, tb, m, n, kk, C(1), a.data(), lda, b.data(), ldb, C(1), sum.data(), ldc,
                            {static_cast<std::size_t>(threads)});
                    for (std::size_t i = 0; i < m; ++i)
                        for (std::size_t j = 0; j < n; ++j) {
                            const C want = c0[i * ldc + j] + c[i * ldc + j];
                            REQUIRE(sum[i * ldc + j] == want);
                        }
                }
            }
}

TEST_CASE("simd::copy copies runs of any length, widening halves, and writes nothing past them", "[kernels][simd]") {
    const auto xf = random_vector<float>(40, 90);
    const auto xh = random_vector<half>(40, 91);
    for (std::size_t n = 0; n <= 33; ++n) {
        CAPTURE(n);
        std::vector<float> yf(40, -7.0f), yh(40, -7.0f);
        k::simd::copy(xf.data() + 1, yf.data() + 1, n);  // unaligned on both sides
        k::simd::copy(xh.data() + 1, yh.data() + 1, n);
        for (std::size_t i = 0; i < 40; ++i) {
            const bool inside = i >= 1 && i <= n;
            REQUIRE(yf[i] == (inside ? xf[i] : -7.0f));
            REQUIRE(yh[i] == (inside ? static_cast<float>(xh[i]) : -7.0f));
        }
    }
}

TEST_CASE("gemm reads half operands and accumulates in fp32", "[kernels][gemm][half]") {
    const std::size_t m = 37, n = 45, kk = 519;  // k spans three kc blocks: the sum stays in fp32
    const auto a = random_vector<half>(m * kk, 4);
    const auto b = random_vector<half>(kk * n, 5);
    std::vector<float> c(m * n), ref(m * n);
    k::gemm(k::trans::no, k::trans::no, m, n, kk, 1.0f, a.data(), kk, b.data(), n, 0.0f, c.data(), n);
    k::gemm_reference(k::trans::no, k::trans::no, m, n, kk, 1.0f, a.data(), kk, b.data(), n, 0.0f, ref.data(), n);
    REQUIRE(max_rel_error(c, ref) < 1e-5);
}

TEST_CASE("gemm on half operands gives the bits of gemm on fp32 operands holding the same values", "[kernels][gemm][half]") {
    // A half A is widened into a copy read in place, a half B packed with vector conversions: every
    // element must still be the same sum in the same order. Odd shapes, k over the kc block, m over
    // the mc block, a few rows (short tiles), leading dimensions of 4 KiB (A's, and m = 1024 rows
    // widened transposed: the copy's padded runs), 1 and 2 threads.
    struct dims {
        std::size_t m, n, k, extra;  // extra: added to the leading dimensions
    };
    const std::vector<dims> cases{{1, 1, 1, 0},   {13, 37, 29, 3}, {31, 33, 300, 1}, {16, 32, 520, 0},
                                  {64, 16, 70, 0}, {28, 16, 33, 2}, {2000, 16, 32, 0}, {1024, 16, 40, 0}, {45, 50, 300, 1024}};
    k::thread_pool pool(2);
    std::vector<k::gemm_buffers> buffers(2);
    for (const std::size_t threads : {1u, 2u})
        for (const auto [m, n, kk, extra] : cases)
            for (const auto ta : {k::trans::no, k::trans::yes})
                for (const auto tb : {k::trans::no, k::trans::yes})
                    for (const float beta : {0.0f, 1.0f}) {
                        CAPTURE(m, n, kk, extra, ta == k::trans::yes, tb == k::trans::yes, beta, threads);
                        const std::size_t lda = extra == 1024 ? 1024 : (ta == k::trans::no ? kk : m) + extra;
                        const std::size_t ldb = (tb == k::trans::no ? n : kk) + extra % 1024;
                        const auto ah = random_vector<half>((ta == k::trans::no ? m : kk) * lda, 11);
                        const auto bh = random_vector<half>((tb == k::trans::no ? kk : n) * ldb, 12);
                        const std::vector<float> af(ah.begin(), ah.end()), bf(bh.begin(), bh.end());
                        const auto c0 = random_vector<float>(m * n, 13);
                        const k::gemm_options o{threads, buffers.data(), &pool};
                        auto want = c0;
                        k::gemm(ta, tb, m, n, kk, 1.0f, af.data(), lda, bf.data(), ldb, beta, want.data(), n, o);
                        auto hh = c0, hf = c0, fh = c0;
                        k::gemm(ta, tb, m, n, kk, 1.0f, ah.data(), lda, bh.data(), ldb, beta, hh.data(), n, o);
                        k::gemm(ta, tb, m, n, kk, 1.0f, ah.data(), lda, bf.data(), ldb, beta, hf.data(), n, o);
                        k::gemm(ta, tb, m, n, kk, 1.0f, af.data(), lda, bh.data(), ldb, beta, fh.data(), n, o);
                        REQUIRE(hh == want);
                        REQUIRE(hf == want);
                        REQUIRE(fh == want);
                    }
}

TEMPLATE_TEST_CASE("a strip cut short gives the bits of the whole register tile over its rows padded with zeros",
                   "[kernels][gemm]", (k::detail::tile<float, 1>), (k::detail::tile<float, 2>),
                   (k::detail::tile<float, 1, k::detail::short_mr<float, 1>>),
                   (k::detail::tile<float, 2, k::detail::short_mr<float, 2>>), (k::detail::tile<double, 2>)) {
    // strip_kernel runs a strip of at most a quarter or a half of mr rows in a tile of that many rows;
    // the reference is the whole tile on a packed panel whose rows past the strip are zeros.
    using Tile = TestType;
    using C = typename tile_value<Tile>::type;
    constexpr std::size_t mr = Tile::mr, nr = Tile::nr, kk = 37, lda = kk + 3;
    const auto a = random_vector<C>(mr * lda, 21), b = random_vector<C>(kk * nr, 22), c0 = random_vector<C>(mr * nr, 23);
    for (std::size_t rows = 1; rows <= mr; ++rows)
        for (const C beta : {C(0), C(1)}) {
            CAPTURE(mr, nr, rows, beta);
            std::vector<C> panel(kk * mr, C(0));  // packed: kk runs of mr, the strip's rows then zeros
            for (std::size_t p = 0; p < kk; ++p)
                for (std::size_t i = 0; i < rows; ++i) panel[p * mr + i] = a[i * lda + p];
            auto want = c0;
            k::detail::micro_kernel<Tile>(kk, panel.data(), 0, b.data(), want.data(), nr, rows, nr, C(1), beta);
            auto row_strided = c0;
            k::detail::strip_kernel<Tile, k::detail::a_layout::row_strided>(kk, a.data(), lda, b.data(), row_strided.data(),
                                                                           nr, rows, nr, C(1), beta);
            REQUIRE(row_strided == want);
            std::vector<C> at(kk * lda, C(0));  // the same rows transposed: k-strided
            for (std::size_t p = 0; p < kk; ++p)
                for (std::size_t i = 0; i < rows; ++i) at[p * lda + i] = a[i * lda + p];
            auto k_strided = c0;
            k::detail::strip_kernel<Tile, k::detail::a_layout::k_strided>(kk, at.data(), lda, b.data(), k_strided.data(),
                                                                         nr, rows, nr, C(1), beta);
            REQUIRE(k_strided == want);
        }
}

TEST_CASE("gemm packs A whose leading dimension is a multiple of 4 KiB, transposed or not", "[kernels][gemm]") {
    const std::size_t m = 45, n = 50, kk = 300, lda = 1024, ldb = 64;
    for (const auto ta : {k::trans::no, k::trans::yes}) {
        const auto a = random_vector<float>(lda * std::max(m, kk), 6);
        const auto b = random_vector<float>(kk * ldb, 7);
        std::vector<float> c(m * n), ref(m * n);
        k::gemm(ta, k::trans::no, m, n, kk, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), n, {2});
        k::gemm_reference(ta, k::trans::no, m, n, kk, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, ref.data(), n);
        REQUIRE(max_rel_error(c, ref) < 1e-5);
    }
}

TEST_CASE("gemm reads a B exactly one tile wide in place", "[kernels][gemm]") {
    for (const std::size_t n : {16ul, 32ul, 8ul})
        for (const std::size_t m : {1ul, 29ul, 100ul}) {
            CAPTURE(n, m);
            const std::size_t kk = 300;
            const auto a = random_vector<float>(m * kk, 8), b = random_vector<float>(kk * n, 9);
            std::vector<float> c(m * n, 1.0f), ref(m * n, 1.0f);
            k::gemm(k::trans::no, k::trans::no, m, n, kk, 1.0f, a.data(), kk, b.data(), n, 0.5f, c.data(), n);
            k::gemm_reference(k::trans::no, k::trans::no, m, n, kk, 1.0f, a.data(), kk, b.data(), n, 0.5f, ref.data(), n);
            REQUIRE(max_rel_error(c, ref) < 1e-5);
        }
}

TEST_CASE("gemm splits few rows between threads by columns, with the bits of one thread", "[kernels][gemm][threads]") {
    // 2 to 40 rows of many columns (a deep convolution on small images): threads take bands of columns.
    for (const auto [m, n, kk] : {std::array<std::size_t, 3>{2, 700, 300}, {40, 1100, 65}, {17, 96, 9}}) {
        CAPTURE(m, n, kk);
        for (const auto tb : {k::trans::no, k::trans::yes}) {
            const auto a = random_vector<float>(m * kk, 5);
            const auto b = random_vector<float>(kk * n, 6);
            const std::size_t ldb = tb == k::trans::no ? n : kk;
            std::vector<float> one(m * n), ref(m * n);
            k::gemm(k::trans::no, tb, m, n, kk, 1.0f, a.data(), kk, b.data(), ldb, 0.0f, one.data(), n, {1});
            k::gemm_reference(k::trans::no, tb, m, n, kk, 1.0f, a.data(), kk, b.data(), ldb, 0.0f, ref.data(), n);
            REQUIRE(max_rel_error(one, ref) < 1e-5);
            k::thread_pool pool(3);
            std::vector<k::gemm_buffers> buffers(3);
            for (const std::size_t threads : {2u, 3u}) {
                std::vector<float> c(m * n);
                k::gemm(k::trans::no, tb, m, n, kk, 1.0f, a.data(), kk, b.data(), ldb, 0.0f, c.data(), n,
                        {threads, buffers.data(), &pool});
                CHECK(c == one);
            }
        }
    }
    // The split itself: by columns for few rows, by rows for many; never more threads than bands.
    using k::detail::split_threads;
    CHECK(split_threads(2, 32, 512, 14, 32).by_columns);
    CHECK(split_threads(2, 32, 512, 14, 32).cols_per_thread == 256);
    CHECK_FALSE(split_threads(2, 500, 512, 14, 32).by_columns);
    CHECK_FALSE(split_threads(2, 32, 32, 14, 32).by_columns);  // one column strip: rows it is
    CHECK(split_threads(4, 14, 64, 14, 32).threads == 2);
}

TEST_CASE("gemm rejects leading dimensions smaller than the matrix", "[kernels][gemm]") {
    std::vector<float> a(6), b(6), c(4);
    REQUIRE_THROWS_AS(k::gemm(k::trans::no, k::trans::no, 2, 2, 3, 1.0f, a.data(), 2, b.data(), 2, 0.0f, c.data(), 2),
                      std::invalid_argument);
}

namespace {

struct conv_case {
    shape in;
    std::size_t cout;
    k::window g;
};

const std::vector<conv_case> conv_cases{
    {{1, 5, 7, 3}, 5, {3, 3, 1, 1}},   // batch 1, odd sizes, padding
    {{2, 7, 6, 3}, 4, {3, 3, 2, 1}},   // stride 2
    {{3, 6, 5, 4}, 7, {1, 1, 1, 0}},   // pointwise: no im2col
    {{2, 7, 7, 5}, 3, {1, 1, 2, 0}},   // 1×1 stride 2 (projection shortcut)
    {{2, 9, 8, 2}, 3, {5, 3, 2, 2}},   // rectangular kernel
    {{9, 30, 30, 8}, 8, {3, 3, 1, 1}}, // several chunks of whole images
    {{6, 16, 16, 3}, 4, {3, 3, 2, 1}}, // stride 2 (im2col) over several chunks: 64 output rows an image
    {{1, 3, 3, 17}, 33, {3, 3, 1, 0}}, // channels over the SIMD width, 1×1 output
    {{2, 7, 6, 16}, 16, {3, 3, 1, 1}}, // Winograd (automatic): odd output height, cut-off tiles
    {{2, 5, 9, 9}, 20, {3, 3, 1, 2}},  // Winograd: padding 2, channels not a multiple of the SIMD width
    {{3, 8, 8, 35}, 8, {3, 3, 1, 1}},  // Winograd: more input than output channels
    {{2, 8, 7, 16}, 16, {3, 3, 1, 0}}, // Winograd without padding: even and odd outputs, every pixel written once first
    {{1, 4, 4, 128}, 128, {3, 3, 1, 1}}, // Winograd at 128 channels a side (automatic: F(4x4, 3x3) at its widest)
    {{3, 1, 1, 8}, 16, {3, 3, 1, 1}},  // 1x1 image: only the centre tap reads it (im2col over one tap)
    {{2, 2, 2, 9}, 8, {3, 3, 2, 1}},   // 2x2 image at stride 2: kernel rows and columns 1-2 live, one GEMM per row
    {{2, 1, 4, 3}, 5, {3, 5, 1, 1}},   // every kernel column live, rows 1 only: one block of whole rows
    {{1, 1, 1, 2}, 3, {1, 1, 3, 1}},   // no tap ever reads the image: zeros
    {{2, 9, 30, 1}, 16, {3, 3, 1, 1}}, // a stem of 1 channel (automatic, fp32: direct; rows of whole and short pixel blocks)
    {{3, 10, 9, 3}, 64, {7, 7, 2, 3}}, // ResNet-18's stem: 3 channels, 7x7 at stride 2 (fp32: direct, 4 vectors, 25 passes of taps)
    {{2, 5, 6, 4}, 48, {3, 5, 1, 2}},  // 4 channels, a rectangular window, 3 vectors (fp32: direct)
};

/// Adjoints of the direct convolution, in double.
void conv_backward_reference(const std::vector<double>& x, const shape& in, const std::vector<double>& w,
                             std::size_t cout, const k::window& g, const std::vector<double>& dy,
                             std::vector<double>& dx, std::vector<double>& dw) {
    const shape out = g.output(in, cout);
    dx.assign(in.size(), 0.0);
    dw.assign(g.kh * g.kw * in.c * cout, 0.0);
    for (std::size_t n = 0; n < out.n; ++n)
        for (std::size_t oy = 0; oy < out.h; ++oy)
            for (std::size_t ox = 0; ox < out.w; ++ox)
                for (std::size_t co = 0; co < cout; ++co) {
                    const double d = dy[((n * out.h + oy) * out.w + ox) * cout + co];
                    for (std::size_t ky = 0; ky < g.kh; ++ky)
                        for (std::size_t kx = 0; kx < g.kw; ++kx) {
                            const long iy = static_cast<long>(oy * g.stride + ky) - static_cast<long>(g.pad);
                            const long ix = static_cast<long>(ox * g.stride + kx) - static_cast<long>(g.pad);
                            if (iy < 0 || ix < 0 || iy >= static_cast<long>(in.h) || ix >= static_cast<long>(in.w)) continue;
                            for (std::size_t ci = 0; ci < in.c; ++ci) {
                                const std::size_t xi = ((n * in.h + iy) * in.w + ix) * in.c + ci;
                                const std::size_t wi = ((ky * g.kw + kx) * in.c + ci) * cout + co;
                                dx[xi] += d * w[wi];
                                dw[wi] += d * x[xi];
                            }
                        }
                }
}

}  // namespace

TEMPLATE_TEST_CASE("conv2d forward and both gradients match direct loops", "[kernels][conv]", float, double) {
    using C = TestType;
    const std::size_t threads = GENERATE(1, 2);  // chunks of whole images in parallel
    // Every case by im2col + GEMM, by Winograd F(2×2, 3×3) and F(4×4, 3×3) where they fit, and by the
    // automatic choice.
    const auto algorithm = GENERATE(k::conv_algorithm::im2col, k::conv_algorithm::winograd, k::conv_algorithm::winograd_4x4,
                                    k::conv_algorithm::automatic);
    const bool forced = algorithm == k::conv_algorithm::winograd || algorithm == k::conv_algorithm::winograd_4x4;
    // fp32: the weight gradient of the largest case sums 8100 products, so allow 5e-5 relative. Winograd
    // rounds more: F(4×4, 3×3)'s transforms multiply by up to 25 (Bᵀ's 5 twice) before the sums cancel
    // (its forward's errors on these cases measured up to 3.4e-5, F(2×2, 3×3)'s 2.4e-6), so 2e-4.
    const double tol = std::is_same_v<C, float> ? (algorithm == k::conv_algorithm::im2col ? 5e-5 : 2e-4) : 1e-12;
    for (const auto& [in, cout, g] : conv_cases) {
        if (forced && !k::winograd::fits(g)) continue;
        CAPTURE(in.str(), cout, g.kh, g.kw, g.stride, g.pad, threads, static_cast<int>(algorithm));
        const shape out = g.output(in, cout);
        const auto x = random_vector<C>(in.size(), 10);
        const auto w = random_vector<C>(g.kh * g.kw * in.c * cout, 11);
        const auto dy = random_vector<C>(out.size(), 12);
        k::workspace<C> ws;
        std::vector<C> y(out.size()), dx(in.size()), dw(w.size(), C(1));
        k::conv2d_forward(x.data(), in, w.data(), cout, g, y.data(), ws, {threads}, algorithm);
        std::vector<double> yref(out.size());
        k::conv2d_reference(x.data(), in, w.data(), cout, g, yref.data());
        REQUIRE(max_rel_error(y, yref) < tol);

        k::conv2d_backward_data(dy.data(), in, w.data(), cout, g, dx.data(), ws, {threads}, algorithm);
        k::conv2d_backward_weight(x.data(), in, dy.data(), cout, g, dw.data(), ws, {threads}, algorithm);  // onto 1
        std::vector<double> dxr, dwr;
        conv_backward_reference({x.begin(), x.end()}, in, {w.begin(), w.end()}, cout, g, {dy.begin(), dy.end()}, dxr, dwr);
        for (auto& v : dwr) v += 1;
        REQUIRE(max_rel_error(dx, dxr) < tol);
        REQUIRE(max_rel_error(dw, dwr) < tol);

        // Both gradients in one call: the same bits as the two calls (dx's old contents never show).
        std::vector<C> dx2(in.size(), C(7)), dw2(w.size(), C(1));
        k::conv2d_backward(x.data(), in, dy.data(), w.data(), cout, g, dw2.data(), dx2.data(), ws, {threads}, algorithm);
        REQUIRE(dx2 == dx);
        REQUIRE(dw2 == dw);
    }
}

TEST_CASE("Winograd's fused blocks make the same sums as the unfused GEMMs, whatever the L1 cache", "[kernels][conv]") {
    namespace wd = k::winograd::detail;
    constexpr std::size_t one = k::detail::tile<float, 1>::nr, kc = k::detail::tile<float, 1>::kc;
    // Whole strips of the register tile's rows, growing with the cache; two strips where not one fits.
    const std::size_t small = wd::fused_block_tiles<2, float>(one, one, one, 32 << 10);
    const std::size_t big = wd::fused_block_tiles<2, float>(one, one, one, 1 << 20);
    const std::size_t mr = k::detail::tile<float, 1, k::detail::short_mr<float, 1>>::mr;
    CHECK(small > 0);
    CHECK(big > small);
    CHECK(small % mr == 0);
    CHECK(big % mr == 0);
    CHECK(wd::fused_block_tiles<2, float>(one, 256, 256, 32 << 10) == 2 * mr);
    // No block where gemm would split a call's sum (above kc), however large the cache.
    CHECK(wd::fused_block_tiles<2, float>(one, kc + one, kc + one, std::size_t{1} << 40) == 0);
    CHECK(wd::fused_block_tiles<2, float>(one, kc, kc, std::size_t{1} << 40) > 0);
    // Nor for outputs no register tile is as wide as (the strips are the whole matrix).
    CHECK(wd::fused_block_tiles<2, float>(one + 1, one, one, std::size_t{1} << 40) == 0);
    // The weight gradient's blocks follow from the shapes alone, at most kc tiles, none below 16.
    CHECK(wd::sum_block_tiles<2, float>(16, 16) == 16);
    CHECK(wd::sum_block_tiles<2, float>(32, 32) == 0);
    CHECK(wd::sum_block_tiles<2, float>(1, 1) <= kc);
}

TEST_CASE("conv2d gives bit-identical results on 1, 2 and 3 threads, chunks taken in any order", "[kernels][conv][threads]") {
    // Threads take chunks of whole images as they finish them; the weight gradient adds each chunk's
    // partial sum in chunk order, so neither the thread count nor which thread ran which chunk shows.
    struct layer {
        shape in;
        std::size_t cout;
        k::window g;
    };
    const auto algorithm = GENERATE(k::conv_algorithm::im2col, k::conv_algorithm::automatic, k::conv_algorithm::winograd,
                                    k::conv_algorithm::winograd_4x4);
    for (const auto& [in, cout, g] : {layer{{19, 12, 10, 6}, 9, {3, 3, 1, 1}},  // 19 images: chunks and lanes, the last short
                                      layer{{19, 11, 9, 12}, 10, {3, 3, 1, 1}},  // automatic: Winograd
                                      layer{{19, 12, 10, 6}, 9, {3, 3, 2, 1}},
                                      // a weight gradient over the partial-sum budget (1152 × 1024 floats;
                                      // Winograd's 2048 × 1024): one lane, its GEMMs split between the threads
                                      layer{{3, 3, 3, 128}, 1024, {3, 3, 1, 1}},
                                      // fewer rows than a chunk's minimum: one chunk, its GEMMs (im2col:
                                      // split by columns; Winograd: the 16 positions' GEMMs) on all the threads
                                      layer{{5, 2, 2, 64}, 96, {3, 3, 1, 1}},
                                      layer{{6, 1, 1, 48}, 160, {3, 3, 1, 1}},
                                      // Winograd's forward in blocks of a few tiles (outputs one or two SIMD
                                      // vectors wide) against its GEMMs over the whole chunk: one image is one
                                      // chunk, run in blocks on one thread and by GEMMs on all the threads
                                      layer{{1, 14, 12, 16}, 16, {3, 3, 1, 1}},
                                      layer{{1, 10, 10, 24}, 32, {3, 3, 1, 1}},
                                      layer{{19, 9, 9, 32}, 16, {3, 3, 1, 1}},
                                      // 64 channels: no strip's tiles fit L1, blocks of two strips
                                      layer{{1, 7, 7, 64}, 64, {3, 3, 1, 1}},
                                      // a stem (automatic: the direct kernels), in chunks and lanes
                                      layer{{19, 12, 10, 1}, 16, {3, 3, 1, 1}},
                                      layer{{19, 9, 11, 3}, 32, {5, 5, 2, 2}}}) {
        if ((algorithm == k::conv_algorithm::winograd || algorithm == k::conv_algorithm::winograd_4x4) &&
            !k::winograd::fits(g))
            continue;
        CAPTURE(in.str(), cout, g.stride, static_cast<int>(algorithm));
        const shape out = g.output(in, cout);
        const auto x = random_vector<float>(in.size(), 40);
        const auto w = random_vector<float>(g.kh * g.kw * in.c * cout, 41);
        const auto dy = random_vector<float>(out.size(), 42);
        std::vector<float> y1(out.size()), dx1(in.size()), dw1(w.size(), 0.5f);
        k::workspace<float> ws1;
        k::conv2d_forward(x.data(), in, w.data(), cout, g, y1.data(), ws1, {1}, algorithm);
        k::conv2d_backward_data(dy.data(), in, w.data(), cout, g, dx1.data(), ws1, {1}, algorithm);
        k::conv2d_backward_weight(x.data(), in, dy.data(), cout, g, dw1.data(), ws1, {1}, algorithm);
        k::thread_pool pool(3);
        for (const std::size_t threads : {2u, 3u}) {
            for (k::thread_pool* p : {static_cast<k::thread_pool*>(nullptr), &pool}) {
                CAPTURE(threads, p != nullptr);
                std::vector<float> y(out.size()), dx(in.size()), dw(w.size(), 0.5f);
                k::workspace<float> ws;
                k::conv2d_forward(x.data(), in, w.data(), cout, g, y.data(), ws, {threads, nullptr, p}, algorithm);
                k::conv2d_backward_data(dy.data(), in, w.data(), cout, g, dx.data(), ws, {threads, nullptr, p}, algorithm);
                k::conv2d_backward_weight(x.data(), in, dy.data(), cout, g, dw.data(), ws, {threads, nullptr, p}, algorithm);
                CHECK(y == y1);
                CHECK(dx == dx1);
                CHECK(dw == dw1);
            }
        }
    }
}

TEST_CASE("conv2d chooses Winograd for 3x3 stride-1 windows between 8 or more channels, and refuses it elsewhere",
          "[kernels][conv]") {
    const auto automatic = k::conv_algorithm::automatic;
    // F(4×4, 3×3) where it multiplies less than F(2×2, 3×3), up to 128 channels a side: ResNet-20's 28×28
    // (7×7 tiles against 14×14: 1764 multiplies against 3136), 14×14 (4×4 tiles: 576 against 784) and
    // 7×7 layers (2×2 tiles: 144 against 256).
    CHECK(k::winograd_tile(automatic, {32, 28, 28, 16}, 16, {3, 3, 1, 1}) == 4);
    CHECK(k::winograd_tile(automatic, {32, 14, 14, 32}, 32, {3, 3, 1, 1}) == 4);
    CHECK(k::winograd_tile(automatic, {32, 7, 7, 64}, 64, {3, 3, 1, 1}) == 4);
    CHECK(k::winograd_tile(automatic, {32, 8, 8, 128}, 128, {3, 3, 1, 1}) == 4);
    CHECK(k::winograd_tile(automatic, {32, 8, 8, 128}, 256, {3, 3, 1, 1}) == 2);  // past 128 channels
    CHECK(k::winograd_tile(automatic, {32, 8, 8, 256}, 128, {3, 3, 1, 1}) == 2);
    CHECK(k::winograd_tile(automatic, {32, 2, 2, 64}, 64, {3, 3, 1, 1}) == 2);    // a 2×2 image: 36 against 16
    CHECK(k::winograd_tile(automatic, {32, 2, 2, 16}, 16, {3, 3, 1, 1}) == 2);
    CHECK(k::winograd_tile(k::conv_algorithm::winograd, {32, 28, 28, 16}, 16, {3, 3, 1, 1}) == 2);
    CHECK(k::winograd_tile(k::conv_algorithm::winograd_4x4, {32, 1, 1, 512}, 512, {3, 3, 1, 1}) == 4);
    CHECK(k::winograd_tile(k::conv_algorithm::im2col, {32, 28, 28, 16}, 16, {3, 3, 1, 1}) == 0);
    CHECK(k::uses_winograd(automatic, {2, 14, 14, 16}, 16, {3, 3, 1, 1}));
    CHECK(k::uses_winograd(automatic, {2, 14, 14, 8}, 8, {3, 3, 1, 0}));
    CHECK_FALSE(k::uses_winograd(automatic, {2, 28, 28, 1}, 16, {3, 3, 1, 1}));  // the stem: k = 9 either way
    CHECK_FALSE(k::uses_winograd(automatic, {2, 14, 14, 16}, 4, {3, 3, 1, 1}));
    CHECK_FALSE(k::uses_winograd(automatic, {2, 14, 14, 16}, 32, {3, 3, 2, 1}));
    CHECK(k::uses_winograd(automatic, {32, 2, 2, 256}, 256, {3, 3, 1, 1}));      // one tile, 4 outputs: 16 < 36
    CHECK_FALSE(k::uses_winograd(automatic, {32, 1, 1, 512}, 512, {3, 3, 1, 1}));  // a quarter tile: 16 > 9
    CHECK_FALSE(k::uses_winograd(k::conv_algorithm::im2col, {2, 14, 14, 16}, 16, {3, 3, 1, 1}));
    CHECK(k::uses_winograd(k::conv_algorithm::winograd, {2, 14, 14, 1}, 1, {3, 3, 1, 1}));
    // Forced where it does not fit: a shape_error naming the window, and nothing written.
    const shape in{1, 6, 6, 8};
    const k::window strided(3, 3, 2, 1);
    std::vector<float> x(in.size(), 1.0f), w(9 * 8 * 8, 1.0f), y(strided.output(in, 8).size(), 7.0f);
    k::workspace<float> ws;
    CHECK_THROWS_WITH(k::conv2d_forward(x.data(), in, w.data(), 8, strided, y.data(), ws, {}, k::conv_algorithm::winograd),
                      Catch::Contains("3x3 window at stride 1, not 3x3 at stride 2"));
    CHECK_THROWS_WITH(k::conv2d_forward(x.data(), in, w.data(), 8, strided, y.data(), ws, {}, k::conv_algorithm::winograd_4x4),
                      Catch::Contains("F(4x4, 3x3) needs a 3x3 window at stride 1, not 3x3 at stride 2"));
    CHECK(std::all_of(y.begin(), y.end(), [](float v) { return v == 7.0f; }));
}

TEST_CASE("convolutions of 1 to 4 input channels run directly: the forward bit for bit im2col's, fp32 and half",
          "[kernels][conv]") {
    const auto automatic = k::conv_algorithm::automatic;
    constexpr std::size_t w16 = xsimd::batch<float>::size;
    CHECK(k::uses_direct<float>(automatic, {32, 28, 28, 1}, 16, {3, 3, 1, 1}));  // ResNet-20's stem
    CHECK(k::uses_direct<float>(automatic, {32, 32, 32, 3}, 64, {7, 7, 2, 3}) == (64 / w16 <= k::direct::max_vectors));
    CHECK_FALSE(k::uses_direct<float>(automatic, {32, 28, 28, 5}, 16, {3, 3, 1, 1}));        // 5 channels: im2col
    CHECK_FALSE(k::uses_direct<float>(automatic, {32, 28, 28, 1}, w16 + 1, {3, 3, 1, 1}));  // not whole vectors
    CHECK_FALSE(k::uses_direct<float>(automatic, {32, 28, 28, 1}, (k::direct::max_vectors + 1) * w16, {3, 3, 1, 1}));
    CHECK_FALSE(k::uses_direct<float>(automatic, {32, 28, 28, 2}, 16, {1, 1, 1, 0}));        // pointwise: one GEMM
    CHECK_FALSE(k::uses_direct<float>(k::conv_algorithm::im2col, {32, 28, 28, 1}, 16, {3, 3, 1, 1}));
    struct layer {
        shape in;
        std::size_t cout;
        k::window g;
    };
    for (const auto& [in, cout, g] : {layer{{3, 28, 28, 1}, 16, {3, 3, 1, 1}}, layer{{2, 15, 13, 3}, 2 * w16, {7, 7, 2, 3}},
                                      layer{{2, 6, 7, 2}, w16, {3, 3, 2, 0}}}) {
        CAPTURE(in.str(), cout, g.kh, g.stride);
        REQUIRE(k::uses_direct<float>(automatic, in, cout, g));
        const shape out = g.output(in, cout);
        const auto x = random_vector<float>(in.size(), 50);
        const auto w = random_vector<float>(g.kh * g.kw * in.c * cout, 51);
        std::vector<float> direct(out.size()), im2col(out.size());
        k::workspace<float> ws;
        k::conv2d_forward(x.data(), in, w.data(), cout, g, direct.data(), ws, {}, automatic);
        k::conv2d_forward(x.data(), in, w.data(), cout, g, im2col.data(), ws, {}, k::conv_algorithm::im2col);
        CHECK(direct == im2col);
        // Half input, weights and output: rounded once from the same fp32 sums.
        std::vector<half> xh(x.begin(), x.end()), wh(w.begin(), w.end()), yd(out.size()), yi(out.size());
        k::conv2d_forward(xh.data(), in, wh.data(), cout, g, yd.data(), ws, {}, automatic);
        k::conv2d_forward(xh.data(), in, wh.data(), cout, g, yi.data(), ws, {}, k::conv_algorithm::im2col);
        CHECK(std::equal(yd.begin(), yd.end(), yi.begin(), [](half a, half b) { return a.bits() == b.bits(); }));
        // The weight gradient from half operands: the fp32 one on the same values, within fp32 rounding.
        const auto dy = random_vector<float>(out.size(), 52);
        std::vector<half> dyh(dy.begin(), dy.end());
        std::vector<float> dwh(w.size(), 0.0f), dwf(w.size(), 0.0f);
        const std::vector<float> xr(xh.begin(), xh.end()), dyr(dyh.begin(), dyh.end());
        k::conv2d_backward_weight(xh.data(), in, dyh.data(), cout, g, dwh.data(), ws, {}, automatic);
        k::conv2d_backward_weight(xr.data(), in, dyr.data(), cout, g, dwf.data(), ws, {}, automatic);
        CHECK(dwh == dwf);
    }
}

TEST_CASE("convolution chunks hold whole images, at least 16 of them or 64 rows when the batch has that many",
          "[kernels][conv]") {
    using k::detail::conv_chunk_rows;
    // ResNet-20's 7x7 layers (49 rows an image, k = 576): 16 chunks of 2 images, 98 rows each.
    CHECK(conv_chunk_rows(576, 49, 32, 4) == 98);
    // ResNet-18's last stage on 32x32 inputs (1x1 images, k = 4,608): one chunk of the whole batch, not
    // 16 chunks of 2 rows; 2x2 images: 16 images (64 rows) a chunk.
    CHECK(conv_chunk_rows(4608, 1, 32, 4) == 32);
    CHECK(conv_chunk_rows(2304, 4, 32, 4) == 64);
    // Very deep rows (k = 65,536): the minimum gives way to 8 MiB of columns, 32 rows.
    CHECK(conv_chunk_rows(65536, 1, 100, 4) == 32);
    // An empty batch still gets a chunk of one row.
    CHECK(conv_chunk_rows(9, 4, 0, 4) == 4);
}

TEST_CASE("a convolution reading its input through a batch norm's map gives the bits of one reading the stored output",
          "[kernels][conv][batch_norm][threads]") {
    // The input is max(x·scale + shift, 0) rounded as the batch norm's output would be stored: the
    // Winograd input transform applies it as it loads (forward, and the weight gradient's transform).
    const std::size_t cin = 19, cout = 24;  // 19: three channels past the SIMD vectors take the scalar path
    const shape in{5, 9, 11, cin};
    const k::window g{3, 3, 1, 1};
    const auto scale = random_vector<float>(cin, 120, -1.5, 1.5), shift = random_vector<float>(cin, 121);
    const k::simd::relu_of_affine<float> map{scale.data(), shift.data(), 0.0f};
    const auto run = [&]<class T>(T, k::conv_algorithm algorithm, std::size_t threads) {
        const auto x = random_vector<T>(in.size(), 122, -2, 2);
        std::vector<T> z(in.size());  // the output the map stands for, as batch norm's forward stores it
        k::simd::scale_shift_rows<float, true>(x.data(), in.pixels(), cin, scale.data(), shift.data(), z.data());
        const auto w = random_vector<float>(9 * cin * cout, 123), dy = random_vector<float>(g.output(in, cout).size(), 124);
        std::vector<float> y1(dy.size()), y2(dy.size()), dw1(w.size(), 0.0f), dw2(w.size(), 0.0f), dx1(in.size()), dx2(in.size());
        k::workspace<float> ws1, ws2;
        k::conv2d_forward(z.data(), in, w.data(), cout, g, y1.data(), ws1, {threads}, algorithm);
        k::conv2d_forward(x.data(), in, w.data(), cout, g, y2.data(), ws2, {threads}, algorithm, {}, &map);
        CHECK(y2 == y1);
        k::conv2d_backward(z.data(), in, dy.data(), w.data(), cout, g, dw1.data(), dx1.data(), ws1, {threads}, algorithm);
        k::conv2d_backward(x.data(), in, dy.data(), w.data(), cout, g, dw2.data(), dx2.data(), ws2, {threads}, algorithm, {}, &map);
        CHECK(dw2 == dw1);
        CHECK(dx2 == dx1);
        std::vector<float> dw3(w.size(), 0.0f);
        k::conv2d_backward_weight(x.data(), in, dy.data(), cout, g, dw3.data(), ws2, {threads}, algorithm, &map);
        CHECK(dw3 == dw1);
        CHECK(std::count(z.begin(), z.end(), k::detail::store_as<T>(0.0)) > static_cast<std::ptrdiff_t>(z.size() / 4));
    };
    for (const auto algorithm : {k::conv_algorithm::winograd, k::conv_algorithm::winograd_4x4})
        for (const std::size_t threads : {1u, 2u}) {
            CAPTURE(static_cast<int>(algorithm), threads);
            run(0.0f, algorithm, threads);
            if constexpr (k::simd::in_register<float, half>) run(half(0.0f), algorithm, threads);
        }
    // im2col reads x as it is: a map there is an error, not a silent wrong input.
    const auto x = random_vector<float>(in.size(), 125);
    const auto w = random_vector<float>(9 * cin * cout, 126);
    std::vector<float> y(g.output(in, cout).size());
    k::workspace<float> ws;
    CHECK_THROWS_AS(k::conv2d_forward(x.data(), in, w.data(), cout, g, y.data(), ws, {1}, k::conv_algorithm::im2col, {}, &map),
                    std::invalid_argument);
}

TEST_CASE("a convolution reading its output gradient through a batch norm's map gives the bits of one reading the "
          "batch norm's stored input gradient", "[kernels][conv][batch_norm][threads]") {
    // The convolution's output feeds a batch norm (with or without its ReLU, the mask from the batch
    // norm's input); backward hands the convolution the batch norm's output gradient and the map, and
    // the Winograd output-gradient transform computes the batch norm's input gradient as it loads it.
    const std::size_t cin = 12, cout = 19;  // 19: three channels past the SIMD vectors take the scalar path
    const shape in{5, 9, 11, cin};
    const k::window g{3, 3, 1, 1};
    const shape out = g.output(in, cout);
    const auto gamma = random_vector<float>(cout, 130, 0.5, 1.5), beta = random_vector<float>(cout, 131);
    const auto run = [&]<class T>(T, k::conv_algorithm algorithm, std::size_t threads, bool relu) {
        const auto x = random_vector<T>(in.size(), 132), z = random_vector<T>(out.size(), 133, -2, 2);
        const auto w = random_vector<float>(9 * cin * cout, 134);
        const auto dy = random_vector<T>(out.size(), 135);
        const k::parallelism par{threads};
        k::workspace<float> ws;
        // The batch norm's training forward on z (the convolution's output), saving its map.
        k::batch_norm_saved<float> saved;
        std::vector<T> bn_out(out.size());
        if (relu)
            (void)k::batch_norm_train_map(z.data(), out.pixels(), cout, gamma.data(), beta.data(), 1e-5f, 0.1f,
                                          static_cast<float*>(nullptr), static_cast<float*>(nullptr), saved, ws, par);
        else
            k::batch_norm_forward_train(z.data(), out.pixels(), cout, gamma.data(), beta.data(), 1e-5f, 0.1f,
                                        static_cast<float*>(nullptr), static_cast<float*>(nullptr), saved, bn_out.data(), ws, par);
        // Stored: the batch norm's input gradient, then the convolution's backward on it.
        std::vector<T> dz(out.size()), dx1(in.size()), dx2(in.size()), dx3(in.size());
        std::vector<float> dg1(cout, 0.0f), db1(cout, 0.0f), dg2(cout, 0.0f), db2(cout, 0.0f);
        if (relu)
            k::batch_norm_relu_backward_from_input(z.data(), dy.data(), out.pixels(), cout, gamma.data(), saved, dz.data(),
                                                   dg1.data(), db1.data(), ws, par);
        else
            k::batch_norm_backward(z.data(), dy.data(), out.pixels(), cout, gamma.data(), saved, dz.data(), dg1.data(),
                                   db1.data(), ws, par);
        std::vector<float> dw1(w.size(), 0.0f), dw2(w.size(), 0.0f), dw3(w.size(), 0.0f);
        k::conv2d_backward(x.data(), in, dz.data(), w.data(), cout, g, dw1.data(), dx1.data(), ws, {threads}, algorithm);
        // Mapped: the batch norm's sums alone, then the convolution through the map.
        const auto map = k::batch_norm_backward_map<T>(z.data(), dy.data(), out.pixels(), cout, gamma.data(), saved,
                                                       dg2.data(), db2.data(), ws, par, relu);
        const T* none = nullptr;
        k::conv2d_backward(x.data(), in, dy.data(), w.data(), cout, g, dw2.data(), dx2.data(), ws, {threads}, algorithm, {},
                           static_cast<const k::simd::relu_of_affine<float>*>(nullptr), none, none, &map);
        CHECK(dg2 == dg1);
        CHECK(db2 == db1);
        CHECK(dw2 == dw1);
        CHECK(std::equal(dx2.begin(), dx2.end(), dx1.begin(), [](T a, T b) { return std::memcmp(&a, &b, sizeof(T)) == 0; }));
        // Each gradient alone, as a split backward runs them.
        k::conv2d_backward_data(dy.data(), in, w.data(), cout, g, dx3.data(), ws, {threads}, algorithm, {}, none, none, &map);
        k::conv2d_backward_weight(x.data(), in, dy.data(), cout, g, dw3.data(), ws, {threads}, algorithm,
                                  static_cast<const k::simd::relu_of_affine<float>*>(nullptr), &map);
        CHECK(std::equal(dx3.begin(), dx3.end(), dx1.begin(), [](T a, T b) { return std::memcmp(&a, &b, sizeof(T)) == 0; }));
        CHECK(dw3 == dw1);
    };
    for (const auto algorithm : {k::conv_algorithm::winograd, k::conv_algorithm::winograd_4x4})
        for (const std::size_t threads : {1u, 2u})
            for (const bool relu : {false, true}) {
                CAPTURE(static_cast<int>(algorithm), threads, relu);
                run(0.0f, algorithm, threads, relu);
                if constexpr (k::simd::in_register<float, half>) run(half(0.0f), algorithm, threads, relu);
            }
    // im2col reads dy as it is: a map there is an error, not a silent wrong gradient.
    const auto x = random_vector<float>(in.size(), 136), dy = random_vector<float>(out.size(), 137);
    const auto w = random_vector<float>(9 * cin * cout, 138);
    k::batch_norm_saved<float> saved;
    saved.mean.assign(cout, 0.0f);
    const k::simd::batch_norm_gradient_map<float, float> map{dy.data(), saved.mean.data(), saved.mean.data(),
                                                             saved.mean.data(), saved.mean.data(), nullptr};
    std::vector<float> dx(in.size()), dw(w.size(), 0.0f);
    k::workspace<float> ws;
    const float* none = nullptr;
    CHECK_THROWS_AS(k::conv2d_backward(x.data(), in, dy.data(), w.data(), cout, g, dw.data(), dx.data(), ws, {1},
                                       k::conv_algorithm::im2col, {},
                                       static_cast<const k::simd::relu_of_affine<float>*>(nullptr), none, none, &map),
                    std::invalid_argument);
}

// The cases of the tests of how a convolution commits its input gradient: 3×3 windows of stride 1
// and 2 and a 1×1 one, by im2col and both Winograds where they fit, on one and two threads.
template <class F>
void for_each_input_gradient_case(F&& f) {
    struct layer {
        shape in;
        std::size_t cout;
        k::window g;
    };
    for (const auto& [in, cout, g] : {layer{{5, 9, 11, 19}, 24, {3, 3, 1, 1}}, layer{{5, 9, 11, 12}, 16, {3, 3, 2, 1}},
                                      layer{{3, 5, 5, 12}, 8, {1, 1, 1, 0}}}) {
        for (const auto algorithm : {k::conv_algorithm::im2col, k::conv_algorithm::winograd, k::conv_algorithm::winograd_4x4}) {
            if (algorithm != k::conv_algorithm::im2col && !k::winograd::fits(g)) continue;
            for (const std::size_t threads : {1u, 2u}) {
                CAPTURE(in.str(), cout, g.kh, g.stride, static_cast<int>(algorithm), threads);
                f(in, cout, g, algorithm, threads);
            }
        }
    }
}

TEST_CASE("a convolution's input gradient masked by its input as it commits: the bits of a ReLU's backward after it",
          "[kernels][conv][threads][half]") {
    // The input is a ReLU's output (zeros in a third of it); the input gradient, plus an addend, kept
    // only where the input is positive, by every path that commits an input gradient.
    for_each_input_gradient_case([](const shape& in, std::size_t cout, const k::window& g, k::conv_algorithm algorithm,
                                    std::size_t threads) {
        const auto run = [&]<class T>(T) {
            auto x = random_vector<T>(in.size(), 160, -0.5, 1);
            for (auto& v : x) v = k::detail::load_as<float>(v) < 0 ? k::detail::store_as<T>(0.0) : v;
            const auto add = random_vector<T>(in.size(), 161), dy = random_vector<T>(g.output(in, cout).size(), 162);
            const auto w = random_vector<T>(g.kh * g.kw * in.c * cout, 163);
            k::workspace<float> ws;
            std::vector<T> dx(in.size()), masked(in.size()), expected(in.size()), both(in.size());
            std::vector<float> dw1(w.size(), 0.0f), dw2(w.size(), 0.0f);
            k::conv2d_backward_data(dy.data(), in, w.data(), cout, g, dx.data(), ws, {threads}, algorithm, {}, add.data());
            k::relu_backward(x.data(), dx.data(), dx.size(), expected.data(), ws);
            k::conv2d_backward_data(dy.data(), in, w.data(), cout, g, masked.data(), ws, {threads}, algorithm, {},
                                    add.data(), static_cast<const T*>(x.data()));
            k::conv2d_backward(x.data(), in, dy.data(), w.data(), cout, g, dw2.data(), both.data(), ws, {threads},
                               algorithm, {}, static_cast<const k::simd::relu_of_affine<float>*>(nullptr),
                               add.data(), static_cast<const T*>(x.data()));
            const auto same = [](const std::vector<T>& a, const std::vector<T>& b) {
                return std::equal(a.begin(), a.end(), b.begin(), [](T p, T q) { return std::memcmp(&p, &q, sizeof(T)) == 0; });
            };
            CHECK(same(masked, expected));
            CHECK(same(both, expected));
            CHECK(std::count(masked.begin(), masked.end(), k::detail::store_as<T>(0.0)) > static_cast<std::ptrdiff_t>(in.size() / 4));
        };
        run(0.0f);
        run(half(0.0f));
    });
}

TEST_CASE("a convolution's input gradient plus an addend: in fp32 the bits of an add after it, in half one rounding",
          "[kernels][conv][threads][half]") {
    for_each_input_gradient_case([](const shape& in, std::size_t cout, const k::window& g, k::conv_algorithm algorithm,
                                    std::size_t threads) {
        const auto xh = random_vector<half>(in.size(), 150), addh = random_vector<half>(in.size(), 151);
        const auto wh = random_vector<half>(g.kh * g.kw * in.c * cout, 152);
        const auto dyh = random_vector<half>(g.output(in, cout).size(), 153);
        const std::vector<float> x(xh.begin(), xh.end()), add(addh.begin(), addh.end()), w(wh.begin(), wh.end()),
            dy(dyh.begin(), dyh.end());
        k::workspace<float> ws;
        // fp32: the gradient, then the add, against both calls that add as they go.
        std::vector<float> dx(in.size()), with(in.size()), both(in.size()), dw1(w.size(), 0.0f), dw2(w.size(), 0.0f);
        k::conv2d_backward(x.data(), in, dy.data(), w.data(), cout, g, dw1.data(), dx.data(), ws, {threads}, algorithm);
        for (std::size_t i = 0; i < dx.size(); ++i) dx[i] = dx[i] + add[i];
        k::conv2d_backward_data(dy.data(), in, w.data(), cout, g, with.data(), ws, {threads}, algorithm, {}, add.data());
        k::conv2d_backward(x.data(), in, dy.data(), w.data(), cout, g, dw2.data(), both.data(), ws, {threads}, algorithm,
                           {}, static_cast<const k::simd::relu_of_affine<float>*>(nullptr), add.data());
        CHECK(with == dx);
        CHECK(both == dx);
        CHECK(dw2 == dw1);
        // half storage: the fp32 sum on the same values, rounded once.
        std::vector<half> dxh(in.size());
        k::conv2d_backward_data(dyh.data(), in, wh.data(), cout, g, dxh.data(), ws, {threads}, algorithm, {}, addh.data());
        std::size_t differing = 0;
        for (std::size_t i = 0; i < dx.size(); ++i) differing += dxh[i].bits() != half(dx[i]).bits();
        CHECK(differing == 0);
    });
}

TEST_CASE("conv2d on an empty batch writes nothing and adds nothing to the weight gradient", "[kernels][conv]") {
    const auto algorithm = GENERATE(k::conv_algorithm::im2col, k::conv_algorithm::automatic);  // 3×3/1: Winograd
    for (const k::window g : {k::window(3, 3, 1, 1), k::window(3, 3, 2, 1), k::window(1, 1, 1, 0)}) {
        const shape in{0, 6, 6, 8};
        const std::size_t cout = 8;
        const auto w = random_vector<float>(g.kh * g.kw * in.c * cout, 11);
        std::vector<float> x(1), y(1, 7.0f), dy(1), dx(1, 7.0f), dw(w.size(), 1.0f);
        k::workspace<float> ws;
        for (const std::size_t threads : {1u, 2u}) {
            k::conv2d_forward(x.data(), in, w.data(), cout, g, y.data(), ws, {threads}, algorithm);
            k::conv2d_backward_data(dy.data(), in, w.data(), cout, g, dx.data(), ws, {threads}, algorithm);
            k::conv2d_backward_weight(x.data(), in, dy.data(), cout, g, dw.data(), ws, {threads}, algorithm);
        }
        CHECK(y[0] == 7.0f);
        CHECK(dx[0] == 7.0f);
        CHECK(std::all_of(dw.begin(), dw.end(), [](float v) { return v == 1.0f; }));
    }
}

namespace {

/// Half input, weights and output gradient of a convolution case, the same values each time.
struct half_conv_operands {
    std::vector<half> x, w, dy;
    half_conv_operands(const shape& in, std::size_t cout, const k::window& g)
        : x(random_vector<half>(in.size(), 20)), w(random_vector<half>(g.kh * g.kw * in.c * cout, 21)),
          dy(random_vector<half>(g.output(in, cout).size(), 22)) {}
};

}  // namespace

TEST_CASE("conv2d with half activations and weights agrees with fp32 on the same values", "[kernels][conv][half]") {
    for (const auto& [in, cout, g] : conv_cases) {
        CAPTURE(in.str(), cout);
        const shape out = g.output(in, cout);
        const half_conv_operands ops(in, cout, g);
        const auto &xh = ops.x, &wh = ops.w, &dyh = ops.dy;
        const std::vector<float> xf(xh.begin(), xh.end()), wf(wh.begin(), wh.end()), dyf(dyh.begin(), dyh.end());
        k::workspace<float> ws;
        std::vector<half> yh(out.size()), dxh(in.size());
        std::vector<float> yf(out.size()), dxf(in.size()), dwh(wf.size(), 0.f), dwf(wf.size(), 0.f);
        k::conv2d_forward(xh.data(), in, wh.data(), cout, g, yh.data(), ws);
        k::conv2d_forward(xf.data(), in, wf.data(), cout, g, yf.data(), ws);
        k::conv2d_backward_data(dyh.data(), in, wh.data(), cout, g, dxh.data(), ws);
        k::conv2d_backward_data(dyf.data(), in, wf.data(), cout, g, dxf.data(), ws);
        k::conv2d_backward_weight(xh.data(), in, dyh.data(), cout, g, dwh.data(), ws);
        k::conv2d_backward_weight(xf.data(), in, dyf.data(), cout, g, dwf.data(), ws);
        // Inputs are identical; only the final store rounds to half (relative 2^-11).
        REQUIRE(max_rel_error(yh, yf) < 1e-3);
        REQUIRE(max_rel_error(dxh, dxf) < 1e-3);
        REQUIRE(max_rel_error(dwh, dwf) < 1e-6);  // weight gradients stay fp32
    }
}

TEST_CASE("batch norm: training statistics, running statistics, evaluation and backward", "[kernels][batch_norm]") {
    const std::size_t rows = 37, ch = 19;
    const auto x = random_vector<double>(rows * ch, 30, -2, 3);
    const auto gamma = random_vector<double>(ch, 31, 0.5, 1.5);
    const auto beta = random_vector<double>(ch, 32);
    const auto dy = random_vector<double>(rows * ch, 33);
    std::vector<double> rm(ch, 0.0), rv(ch, 1.0), y(rows * ch);
    k::batch_norm_saved<double> saved;
    k::workspace<double> ws;
    const double eps = 1e-5, mom = 0.1;
    k::batch_norm_forward_train(x.data(), rows, ch, gamma.data(), beta.data(), eps, mom, rm.data(), rv.data(), saved,
                                y.data(), ws);
    for (std::size_t c = 0; c < ch; ++c) {
        double mean = 0, var = 0;
        for (std::size_t r = 0; r < rows; ++r) mean += x[r * ch + c];
        mean /= rows;
        for (std::size_t r = 0; r < rows; ++r) var += (x[r * ch + c] - mean) * (x[r * ch + c] - mean);
        for (std::size_t r = 0; r < rows; ++r)
            REQUIRE(y[r * ch + c] == Approx(gamma[c] * (x[r * ch + c] - mean) / std::sqrt(var / rows + eps) + beta[c]).epsilon(1e-12));
        REQUIRE(rm[c] == Approx(0.1 * mean).epsilon(1e-12));
        REQUIRE(rv[c] == Approx(0.9 + 0.1 * var / (rows - 1)).epsilon(1e-12));
    }
    // Evaluation uses the running statistics.
    std::vector<double> ye(rows * ch);
    k::batch_norm_forward_eval(x.data(), rows, ch, gamma.data(), beta.data(), eps, rm.data(), rv.data(), ye.data(), ws);
    REQUIRE(ye[5 * ch + 3] == Approx(gamma[3] * (x[5 * ch + 3] - rm[3]) / std::sqrt(rv[3] + eps) + beta[3]).epsilon(1e-12));

    // Backward against central differences of L = Σ dy·y.
    std::vector<double> dx(rows * ch), dg(ch, 0.0), db(ch, 0.0);
    k::batch_norm_backward(x.data(), dy.data(), rows, ch, gamma.data(), saved, dx.data(), dg.data(), db.data(), ws);
    auto loss = [&](const std::vector<double>& xv, const std::vector<double>& gv, const std::vector<double>& bv) {
        std::vector<double> m(ch, 0.0), v(ch, 1.0), out(rows * ch);
        k::batch_norm_saved<double> s;
        k::workspace<double> w2;
        k::batch_norm_forward_train(xv.data(), rows, ch, gv.data(), bv.data(), eps, mom, m.data(), v.data(), s, out.data(), w2);
        double l = 0;
        for (std::size_t i = 0; i < out.size(); ++i) l += dy[i] * out[i];
        return l;
    };
    const double h = 1e-6;
    for (const std::size_t i : {0ul, 7ul, 100ul, rows * ch - 1}) {
        auto xp = x, xm = x;
        xp[i] += h;
        xm[i] -= h;
        REQUIRE(dx[i] == Approx((loss(xp, gamma, beta) - loss(xm, gamma, beta)) / (2 * h)).margin(1e-7));
    }
    for (const std::size_t c : {0ul, 11ul, ch - 1}) {
        auto gp = gamma, gm = gamma, bp = beta, bm = beta;
        gp[c] += h, gm[c] -= h, bp[c] += h, bm[c] -= h;
        REQUIRE(dg[c] == Approx((loss(x, gp, beta) - loss(x, gm, beta)) / (2 * h)).margin(1e-7));
        REQUIRE(db[c] == Approx((loss(x, gamma, bp) - loss(x, gamma, bm)) / (2 * h)).margin(1e-7));
    }
}

TEMPLATE_TEST_CASE("batch norm, the residual add and the ReLU in one pass: the bits of the three passes apart",
                   "[kernels][batch_norm][threads]", float, double) {
    using C = TestType;
    const std::size_t ch = 19;  // a scalar tail after the vectors
    for (const std::size_t rows : {std::size_t{37}, std::size_t{7001}}) {  // the second over two threads' grain
        for (const std::size_t threads : {1u, 2u}) {
            CAPTURE(rows, threads);
            const auto x = random_vector<C>(rows * ch, 60, -2, 3), skip = random_vector<C>(rows * ch, 61);
            const auto gamma = random_vector<C>(ch, 62, 0.5, 1.5), beta = random_vector<C>(ch, 63);
            std::vector<C> rm1(ch, C(0)), rv1(ch, C(1)), rm2 = rm1, rv2 = rv1, bn(rows * ch), apart(rows * ch), fused(rows * ch);
            k::batch_norm_saved<C> s1, s2;
            k::workspace<C> ws1, ws2;
            k::batch_norm_forward_train(x.data(), rows, ch, gamma.data(), beta.data(), C(1e-5), C(0.1), rm1.data(), rv1.data(), s1,
                                        bn.data(), ws1, {threads});
            k::simd::add_relu<C>(bn.data(), skip.data(), apart.data(), rows * ch);
            k::batch_norm_forward_train(x.data(), rows, ch, gamma.data(), beta.data(), C(1e-5), C(0.1), rm2.data(), rv2.data(), s2,
                                        fused.data(), ws2, {threads}, true, {}, skip.data());
            CHECK(fused == apart);
            CHECK(s2.mean == s1.mean);
            CHECK(s2.inv_std == s1.inv_std);
            CHECK(rm2 == rm1);
            CHECK(rv2 == rv1);
            CHECK(std::count(fused.begin(), fused.end(), C(0)) > static_cast<std::ptrdiff_t>(rows * ch / 4));  // the ReLU cut
        }
    }
}

TEST_CASE("batch norm, the residual add and the ReLU in one pass round a half output once", "[kernels][batch_norm][half]") {
    const std::size_t rows = 301, ch = 21;
    const auto xh = random_vector<half>(rows * ch, 64, -2, 2), skiph = random_vector<half>(rows * ch, 65, -2, 2);
    const std::vector<float> xf(xh.begin(), xh.end()), skipf(skiph.begin(), skiph.end());
    const auto g = random_vector<float>(ch, 66, 0.5, 1.5), b = random_vector<float>(ch, 67);
    std::vector<float> m1(ch, 0), v1(ch, 1), m2(ch, 0), v2(ch, 1), bn(rows * ch), apart(rows * ch);
    std::vector<half> fused(rows * ch);
    k::batch_norm_saved<float> s1, s2;
    k::workspace<float> ws;
    // fp32 on the widened values, then one rounding: what the fused pass must give.
    k::batch_norm_forward_train(xf.data(), rows, ch, g.data(), b.data(), 1e-5f, 0.1f, m1.data(), v1.data(), s1, bn.data(), ws);
    k::simd::add_relu<float>(bn.data(), skipf.data(), apart.data(), rows * ch);
    k::batch_norm_forward_train(xh.data(), rows, ch, g.data(), b.data(), 1e-5f, 0.1f, m2.data(), v2.data(), s2, fused.data(), ws, {},
                                true, {}, skiph.data());
    std::size_t differing = 0;
    for (std::size_t i = 0; i < rows * ch; ++i) differing += fused[i].bits() != half(apart[i]).bits();
    CHECK(differing == 0);
    CHECK(s2.mean == s1.mean);
    CHECK(v2 == v1);
}

TEST_CASE("a ReLU given by its input and affine map: the mask and the values its rounded output gives",
          "[kernels][batch_norm][relu][half]") {
    // x·1 + 0 = x: values at the edges of what half rounds to zero (2^-25 is a tie, to even: 0).
    const float t = std::ldexp(1.0f, -25);
    std::vector<float> x{0.0f, -0.0f, std::ldexp(1.0f, -140), std::ldexp(1.0f, -26), t, std::nextafter(t, 1.0f),
                         std::ldexp(1.0f, -24), 1e-3f, 1.0f, -1.0f, -t, std::numeric_limits<float>::infinity(),
                         std::numeric_limits<float>::quiet_NaN()};
    x.resize(32, 0.5f);  // two whole vectors of 16 (or four of 8)
    const std::vector<float> scale(x.size(), 1.0f), shift(x.size(), 0.0f), dy(x.size(), 1.0f);
    const auto check = [&]<class R>(R) {
        const k::simd::relu_of_affine<float> f{scale.data(), shift.data(), k::detail::rounds_to_zero_up_to<float, R>()};
        for (std::size_t i = 0; i < x.size(); ++i) {
            const R stored = k::detail::store_as<R>(x[i] > 0.0f ? x[i] : 0.0f);  // the forward's output, rounded
            const float want_value = k::detail::load_as<float>(stored);
            const float want_mask = want_value > 0.0f ? 1.0f : 0.0f;
            CAPTURE(i, x[i]);
            CHECK(k::simd::masked_one<float>(&f, dy.data(), i, x[i]) == want_mask);
            CHECK(std::bit_cast<std::uint32_t>(k::simd::relu_of_affine_value<R>(f, x[i], i)) ==
                  std::bit_cast<std::uint32_t>(want_value));
            if (i % k::simd::batch<float>::size == 0) {
                const auto xv = k::simd::batch<float>::load_unaligned(x.data() + i);
                alignas(64) float mask[k::simd::batch<float>::size], value[k::simd::batch<float>::size];
                k::simd::masked<float>(&f, dy.data(), i, xv).store_aligned(mask);
                k::simd::relu_of_affine_value<R>(f, xv, i).store_aligned(value);  // in registers, or lane by lane
                for (std::size_t j = 0; j < k::simd::batch<float>::size; ++j) {
                    const R s = k::detail::store_as<R>(x[i + j] > 0.0f ? x[i + j] : 0.0f);
                    CHECK(mask[j] == (k::detail::load_as<float>(s) > 0.0f ? 1.0f : 0.0f));
                    CHECK(std::bit_cast<std::uint32_t>(value[j]) == std::bit_cast<std::uint32_t>(k::detail::load_as<float>(s)));
                }
            }
        }
    };
    check(0.0f);
    check(half(0.0f));
    check(tessera::tensor::bfloat16(0.0f));  // lane by lane: bfloat16 does not load into registers
    CHECK(k::detail::rounds_to_zero_up_to<float, half>() == t);
}

TEMPLATE_TEST_CASE("batch norm's backward through its ReLU from the input and the saved map: the bits of the one that "
                   "reads the output",
                   "[kernels][batch_norm][relu][threads]", float, double, half) {
    using T = TestType;
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const std::size_t ch = 19;
    for (const std::size_t rows : {std::size_t{37}, std::size_t{7001}}) {
        for (const std::size_t threads : {1u, 2u}) {
            CAPTURE(rows, threads);
            const auto x = random_vector<T>(rows * ch, 130, -2, 3), dy = random_vector<T>(rows * ch, 131);
            const auto gamma = random_vector<C>(ch, 132, -1.5, 1.5), beta = random_vector<C>(ch, 133);
            std::vector<C> rm(ch, C(0)), rv(ch, C(1)), dg1(ch, C(0)), dg2(ch, C(0)), db1(ch, C(0)), db2(ch, C(0));
            std::vector<T> y(rows * ch), dx1(rows * ch), dx2(rows * ch);
            k::batch_norm_saved<C> saved;
            k::workspace<C> ws;
            k::batch_norm_forward_train(x.data(), rows, ch, gamma.data(), beta.data(), C(1e-5), C(0.1), rm.data(), rv.data(),
                                        saved, y.data(), ws, {threads}, true);
            REQUIRE(saved.mask_from_input == k::simd::in_register<C, T>);
            k::batch_norm_backward(x.data(), dy.data(), rows, ch, gamma.data(), saved, dx1.data(), dg1.data(), db1.data(), ws,
                                   {threads}, y.data());
            if constexpr (k::simd::in_register<C, T>) {
                k::batch_norm_relu_backward_from_input(x.data(), dy.data(), rows, ch, gamma.data(), saved, dx2.data(),
                                                       dg2.data(), db2.data(), ws, {threads});
                CHECK(std::memcmp(dx1.data(), dx2.data(), dx1.size() * sizeof(T)) == 0);
                CHECK(dg2 == dg1);
                CHECK(db2 == db1);
                // batch_norm_train_map saves the same statistics and map without writing an output.
                k::batch_norm_saved<C> mapped;
                std::vector<C> rm2(ch, C(0)), rv2(ch, C(1));
                const auto f = k::batch_norm_train_map(x.data(), rows, ch, gamma.data(), beta.data(), C(1e-5), C(0.1),
                                                       rm2.data(), rv2.data(), mapped, ws, {threads});
                CHECK(mapped.mean == saved.mean);
                CHECK(mapped.inv_std == saved.inv_std);
                CHECK(mapped.scale == saved.scale);
                CHECK(mapped.shift == saved.shift);
                CHECK(mapped.mask_from_input);
                CHECK(f.scale == mapped.scale.data());
                CHECK(rm2 == rm);
                CHECK(rv2 == rv);
            }
            CHECK(std::count(y.begin(), y.end(), k::detail::store_as<T>(0.0)) > static_cast<std::ptrdiff_t>(rows * ch / 4));
        }
    }
    // A forward that rounded stochastically, or one without a ReLU, saved no mask to recompute.
    k::batch_norm_saved<C> none;
    std::vector<T> dx(3 * ch);
    std::vector<C> dg(ch), db(ch);
    k::workspace<C> ws;
    const auto x = random_vector<T>(3 * ch, 134);
    const auto gamma = random_vector<C>(ch, 135);
    CHECK_THROWS_AS(k::batch_norm_relu_backward_from_input(x.data(), x.data(), 3, ch, gamma.data(), none, dx.data(), dg.data(),
                                                           db.data(), ws),
                    std::logic_error);
}

TEST_CASE("batch norm with half storage agrees with fp32", "[kernels][batch_norm][half]") {
    const std::size_t rows = 50, ch = 21;
    const auto xh = random_vector<half>(rows * ch, 40, -2, 2);
    const std::vector<float> xf(xh.begin(), xh.end());
    const auto g = random_vector<float>(ch, 41, 0.5, 1.5), b = random_vector<float>(ch, 42);
    std::vector<float> m1(ch, 0), v1(ch, 1), m2(ch, 0), v2(ch, 1), yf(rows * ch);
    std::vector<half> yh(rows * ch);
    k::batch_norm_saved<float> s1, s2;
    k::workspace<float> ws;
    k::batch_norm_forward_train(xh.data(), rows, ch, g.data(), b.data(), 1e-5f, 0.1f, m1.data(), v1.data(), s1, yh.data(), ws);
    k::batch_norm_forward_train(xf.data(), rows, ch, g.data(), b.data(), 1e-5f, 0.1f, m2.data(), v2.data(), s2, yf.data(), ws);
    REQUIRE(max_rel_error(yh, yf) < 1e-3);
    REQUIRE(max_rel_error(m1, m2) < 1e-6);
}

TEST_CASE("half-storage batch norm and relu equal the fp32 kernels on the same values, rounded once",
          "[kernels][batch_norm][relu][half]") {
    // Half activations are read and written in registers where the compiler targets F16C
    // (simd::in_register), else through converted fp32 copies: either way the result is the fp32
    // computation on the widened values, rounded to half once at the store.
    const std::size_t ch = 48;
    for (const std::size_t rows : {std::size_t{1}, std::size_t{37}, std::size_t{9001}}) {  // one row; the last one over two blocks
        const bool in_registers = k::simd::in_register<float, half>;
        CAPTURE(rows, in_registers);
        const std::size_t n = rows * ch;
        const auto xh = random_vector<half>(n, 70, -2, 2), dyh = random_vector<half>(n, 71);
        const std::vector<float> xf(xh.begin(), xh.end()), dyf(dyh.begin(), dyh.end());
        const auto g = random_vector<float>(ch, 72, 0.5, 1.5), b = random_vector<float>(ch, 73);
        auto rounded = [](const std::vector<float>& v) {
            std::vector<half> h(v.size());
            tessera::tensor::convert(std::span<const float>(v), std::span<half>(h));
            return h;
        };
        // "" when the bit patterns agree, else the first element that differs (whole tensors print for minutes).
        auto same_bits = [](const std::vector<half>& got, const std::vector<half>& want) {
            for (std::size_t i = 0; i < got.size(); ++i)
                if (got[i].bits() != want[i].bits())
                    return "element " + std::to_string(i) + ": " + std::to_string(float(got[i])) + " vs " +
                           std::to_string(float(want[i]));
            return std::string();
        };
        k::workspace<float> ws;
        std::vector<float> m1(ch, 0), v1(ch, 1), m2(ch, 0), v2(ch, 1), yf(n), dxf(n), dg1(ch, 0), dg2(ch, 0), db1(ch, 0),
            db2(ch, 0), rf(n), rdf(n);
        std::vector<half> yh(n), dxh(n), rh(n), rdh(n);
        k::batch_norm_saved<float> s1, s2;
        k::batch_norm_forward_train(xh.data(), rows, ch, g.data(), b.data(), 1e-5f, 0.1f, m1.data(), v1.data(), s1, yh.data(), ws, {2});
        k::batch_norm_forward_train(xf.data(), rows, ch, g.data(), b.data(), 1e-5f, 0.1f, m2.data(), v2.data(), s2, yf.data(), ws, {2});
        CHECK(same_bits(yh, rounded(yf)) == "");
        CHECK(m1 == m2);
        CHECK(v1 == v2);
        k::batch_norm_backward(xh.data(), dyh.data(), rows, ch, g.data(), s1, dxh.data(), dg1.data(), db1.data(), ws, {2});
        k::batch_norm_backward(xf.data(), dyf.data(), rows, ch, g.data(), s2, dxf.data(), dg2.data(), db2.data(), ws, {2});
        CHECK(same_bits(dxh, rounded(dxf)) == "");
        CHECK(dg1 == dg2);
        CHECK(db1 == db2);
        k::relu_forward(xh.data(), n, rh.data(), ws, {2});
        k::relu_forward(xf.data(), n, rf.data(), ws, {2});
        CHECK(same_bits(rh, rounded(rf)) == "");
        k::relu_backward(rh.data(), dyh.data(), n, rdh.data(), ws, {2});
        k::relu_backward(rf.data(), dyf.data(), n, rdf.data(), ws, {2});
        CHECK(same_bits(rdh, rounded(rdf)) == "");
    }
}

namespace {

/// "" when each element of `got` is want[i] rounded with the bits of element i of r's stream
/// (tensor::round_element), else the first element that differs.
std::string rounded_stochastically(const std::vector<half>& got, const std::vector<float>& want,
                                   const tessera::tensor::rounding& r) {
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
        const half expected = tessera::tensor::round_element(want[i], r, i);
        if (got[i].bits() != expected.bits())
            return "element " + std::to_string(i) + ": " + std::to_string(float(got[i])) + " vs " + std::to_string(float(expected));
    }
    return {};
}

/// How many elements of `got` differ from `want` rounded to nearest (a stochastic rounding rounds
/// some of them the other way).
std::size_t differ_from_nearest(const std::vector<half>& got, const std::vector<float>& want) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < got.size(); ++i) n += got[i].bits() != half(want[i]).bits();
    return n;
}

}  // namespace

TEST_CASE("kernels writing half activations or gradients round them stochastically when asked: element i is the fp32 "
          "value rounded with the bits of element i", "[kernels][half][rounding]") {
    const tessera::tensor::rounding r{.stochastic = true, .seed = 5, .stream = 77};
    k::workspace<float> ws;
    SECTION("convolutions, im2col and Winograd, forward and input gradient") {
        for (const auto& [in, cout, g] : conv_cases) {
            CAPTURE(in.str(), cout);
            const shape out = g.output(in, cout);
            const half_conv_operands ops(in, cout, g);
            const auto &xh = ops.x, &wh = ops.w, &dyh = ops.dy;
            std::vector<half> yh(out.size()), dxh(in.size());
            std::vector<float> yf(out.size()), dxf(in.size()), dw(wh.size(), 0.f);
            k::conv2d_forward(xh.data(), in, wh.data(), cout, g, yh.data(), ws, {2}, k::conv_algorithm::automatic, r);
            k::conv2d_forward(xh.data(), in, wh.data(), cout, g, yf.data(), ws, {2});
            CHECK(rounded_stochastically(yh, yf, r) == "");
            k::conv2d_backward(xh.data(), in, dyh.data(), wh.data(), cout, g, dw.data(), dxh.data(), ws, {2},
                               k::conv_algorithm::automatic, r);
            k::conv2d_backward_data(dyh.data(), in, wh.data(), cout, g, dxf.data(), ws, {2});
            CHECK(rounded_stochastically(dxh, dxf, r) == "");
            // Plus an addend, kept where a ReLU's output (x) is positive: that fp32 sum, rounded once.
            const auto addh = random_vector<half>(in.size(), 23);
            std::vector<half> dxm(in.size());
            std::vector<float> summed(in.size());
            for (std::size_t i = 0; i < summed.size(); ++i)
                summed[i] = static_cast<float>(xh[i]) > 0.0f ? dxf[i] + static_cast<float>(addh[i]) : 0.0f;
            k::conv2d_backward_data(dyh.data(), in, wh.data(), cout, g, dxm.data(), ws, {2}, k::conv_algorithm::automatic,
                                    r, addh.data(), xh.data());
            CHECK(rounded_stochastically(dxm, summed, r) == "");
            // Rounded to nearest, chunk by chunk as each is final: every element is the fp32 value rounded once.
            std::vector<half> yn(out.size()), dxn(in.size()), dxb(in.size());
            k::conv2d_forward(xh.data(), in, wh.data(), cout, g, yn.data(), ws, {2});
            CHECK(differ_from_nearest(yn, yf) == 0);
            k::conv2d_backward_data(dyh.data(), in, wh.data(), cout, g, dxn.data(), ws, {2});
            CHECK(differ_from_nearest(dxn, dxf) == 0);
            k::conv2d_backward(xh.data(), in, dyh.data(), wh.data(), cout, g, dw.data(), dxb.data(), ws, {2});
            CHECK(differ_from_nearest(dxb, dxf) == 0);
        }
    }
    SECTION("batch norm with its ReLU, over two threads, forward and input gradient") {
        const std::size_t ch = 48, rows = 9001, n = rows * ch;
        const auto xh = random_vector<half>(n, 70, -2, 2), dyh = random_vector<half>(n, 71);
        const auto g = random_vector<float>(ch, 72, 0.5, 1.5), b = random_vector<float>(ch, 73);
        for (const bool relu : {false, true}) {
            std::vector<float> m(ch, 0), v(ch, 1), yf(n), dxf(n), dg(ch, 0), db(ch, 0);
            std::vector<half> yh(n), dxh(n);
            k::batch_norm_saved<float> saved;
            k::batch_norm_forward_train(xh.data(), rows, ch, g.data(), b.data(), 1e-5f, 0.1f, m.data(), v.data(), saved,
                                        yh.data(), ws, {2}, relu, r);
            k::batch_norm_forward_train(xh.data(), rows, ch, g.data(), b.data(), 1e-5f, 0.1f, m.data(), v.data(), saved,
                                        yf.data(), ws, {2}, relu);
            CHECK(rounded_stochastically(yh, yf, r) == "");
            CHECK(differ_from_nearest(yh, yf) > n / 10);
            const half* mask = relu ? yh.data() : nullptr;
            k::batch_norm_backward(xh.data(), dyh.data(), rows, ch, g.data(), saved, dxh.data(), dg.data(), db.data(), ws,
                                   {2}, mask, r);
            k::batch_norm_backward(xh.data(), dyh.data(), rows, ch, g.data(), saved, dxf.data(), dg.data(), db.data(), ws,
                                   {2}, mask);
            CHECK(rounded_stochastically(dxh, dxf, r) == "");
        }
    }
    SECTION("fully connected, pooling and the loss gradient") {
        const std::size_t batch = 5, in = 24, out = 7;
        const auto xh = random_vector<half>(batch * in, 80), wh = random_vector<half>(out * in, 81),
                   bh = random_vector<half>(out, 82), dyh = random_vector<half>(batch * out, 83);
        std::vector<half> yh(batch * out), dxh(batch * in);
        std::vector<float> yf(batch * out), dxf(batch * in), dw(out * in, 0.f), db(out, 0.f);
        k::linear_forward(xh.data(), batch, in, wh.data(), bh.data(), out, yh.data(), ws, {}, r);
        k::linear_forward(xh.data(), batch, in, wh.data(), bh.data(), out, yf.data(), ws);
        CHECK(rounded_stochastically(yh, yf, r) == "");
        k::linear_backward(xh.data(), dyh.data(), batch, in, wh.data(), out, dxh.data(), dw.data(), db.data(), ws, {}, r);
        k::linear_backward(xh.data(), dyh.data(), batch, in, wh.data(), out, dxf.data(), dw.data(), db.data(), ws);
        CHECK(rounded_stochastically(dxh, dxf, r) == "");

        const shape s{2, 6, 5, 3};
        const k::window pool{3, 3, 2, 1};
        const shape o = pool.output(s, s.c);
        const auto ph = random_vector<half>(s.size(), 84), pdy = random_vector<half>(o.size(), 85);
        std::vector<half> ah(o.size()), adh(s.size()), gh(s.n * s.c), gdh(s.size());
        std::vector<float> af(o.size()), adf(s.size()), gf(s.n * s.c), gdf(s.size());
        k::avg_pool_forward(ph.data(), s, pool, ah.data(), ws, r);
        k::avg_pool_forward(ph.data(), s, pool, af.data(), ws);
        CHECK(rounded_stochastically(ah, af, r) == "");
        k::avg_pool_backward(pdy.data(), s, pool, adh.data(), ws, r);
        k::avg_pool_backward(pdy.data(), s, pool, adf.data(), ws);
        CHECK(rounded_stochastically(adh, adf, r) == "");
        k::global_avg_pool_forward(ph.data(), s, gh.data(), ws, r);
        k::global_avg_pool_forward(ph.data(), s, gf.data(), ws);
        CHECK(rounded_stochastically(gh, gf, r) == "");
        const std::vector<half> gdy(ph.begin(), ph.begin() + static_cast<std::ptrdiff_t>(s.n * s.c));
        k::global_avg_pool_backward(gdy.data(), s, gdh.data(), ws, r);
        k::global_avg_pool_backward(gdy.data(), s, gdf.data(), ws);
        CHECK(rounded_stochastically(gdh, gdf, r) == "");

        const std::vector<std::int32_t> labels{0, 3, 6, 1, 2};
        std::vector<half> lh(batch * out);
        std::vector<float> lf(batch * out);
        (void)k::softmax_cross_entropy(yh.data(), batch, out, labels.data(), lh.data(), 1024.0f, ws, r);
        (void)k::softmax_cross_entropy(yh.data(), batch, out, labels.data(), lf.data(), 1024.0f, ws);
        CHECK(rounded_stochastically(lh, lf, r) == "");
    }
}

TEST_CASE("batch norm and relu split large tensors between threads with the same results", "[kernels][threads]") {
    const std::size_t rows = 9001, ch = 16;  // above the per-thread grain of 4096 rows
    const auto x = random_vector<float>(rows * ch, 34, -2, 2), dy = random_vector<float>(rows * ch, 35);
    const auto g = random_vector<float>(ch, 36, 0.5, 1.5), b = random_vector<float>(ch, 37);
    std::vector<float> y1(rows * ch), y2(rows * ch), dx1(rows * ch), dx2(rows * ch), m1(ch, 0), v1(ch, 1), m2(ch, 0),
        v2(ch, 1), dg1(ch, 0), dg2(ch, 0), db1(ch, 0), db2(ch, 0);
    k::batch_norm_saved<float> s1, s2;
    k::workspace<float> w1, w2;
    k::batch_norm_forward_train(x.data(), rows, ch, g.data(), b.data(), 1e-5f, 0.1f, m1.data(), v1.data(), s1, y1.data(), w1, 1);
    k::batch_norm_forward_train(x.data(), rows, ch, g.data(), b.data(), 1e-5f, 0.1f, m2.data(), v2.data(), s2, y2.data(), w2, 2);
    // Bit for bit, as README promises: the per-thread partial sums are added in a fixed order.
    REQUIRE(y2 == y1);
    REQUIRE(m2 == m1);
    REQUIRE(v2 == v1);
    k::batch_norm_backward(x.data(), dy.data(), rows, ch, g.data(), s1, dx1.data(), dg1.data(), db1.data(), w1, 1);
    k::batch_norm_backward(x.data(), dy.data(), rows, ch, g.data(), s2, dx2.data(), dg2.data(), db2.data(), w2, 2);
    REQUIRE(dx2 == dx1);
    REQUIRE(dg2 == dg1);
    REQUIRE(db2 == db1);
    k::relu_forward(x.data(), x.size(), y1.data(), w1, 1);
    k::relu_forward(x.data(), x.size(), y2.data(), w2, 2);
    REQUIRE(y1 == y2);
    k::relu_backward(y1.data(), dy.data(), y1.size(), dx1.data(), w1, 1);
    k::relu_backward(y1.data(), dy.data(), y1.size(), dx2.data(), w2, 2);
    REQUIRE(dx1 == dx2);
}

TEST_CASE("thread_pool runs every task once, the first on the caller, and is reused", "[kernels][threads]") {
    k::thread_pool pool(3);
    REQUIRE(pool.size() == 3);
    const auto caller = std::this_thread::get_id();
    for (int round = 0; round < 500; ++round) {
        const std::size_t n = 1 + static_cast<std::size_t>(round) % 3;
        std::vector<int> hits(n, 0);
        std::vector<std::thread::id> who(n);
        pool.run(n, [&](std::size_t t) {
            ++hits[t];
            who[t] = std::this_thread::get_id();
        });
        REQUIRE(hits == std::vector<int>(n, 1));
        REQUIRE(who[0] == caller);
        for (std::size_t t = 1; t < n; ++t) REQUIRE(who[t] != caller);
    }
    REQUIRE_THROWS_AS(pool.run(4, [](std::size_t) {}), std::invalid_argument);
    REQUIRE_THROWS_AS(k::thread_pool(0), std::invalid_argument);
}

TEST_CASE("thread_pool rethrows a task's exception, stays usable, and runs nested calls serially", "[kernels][threads]") {
    k::thread_pool pool(2);
    REQUIRE_THROWS_WITH(pool.run(2, [](std::size_t t) {
                            if (t == 1) throw std::runtime_error("task 1 failed");
                        }),
                        "task 1 failed");
    std::vector<int> inner(4, 0);
    pool.run(2, [&](std::size_t t) {
        pool.run(2, [&](std::size_t u) { ++inner[2 * t + u]; });  // from the caller and from a worker
    });
    CHECK(inner == std::vector<int>(4, 1));
}

TEST_CASE("kernels give the same results on a thread pool as on threads started per call", "[kernels][threads]") {
    const std::size_t rows = 9001, ch = 16;
    const auto x = random_vector<float>(rows * ch, 34, -2, 2), dy = random_vector<float>(rows * ch, 35);
    const auto g = random_vector<float>(ch, 36, 0.5, 1.5), b = random_vector<float>(ch, 37);
    k::thread_pool pool(2);
    std::vector<float> y1(rows * ch), y2(rows * ch), dx1(rows * ch), dx2(rows * ch), m1(ch, 0), v1(ch, 1), m2(ch, 0),
        v2(ch, 1), dg1(ch, 0), dg2(ch, 0), db1(ch, 0), db2(ch, 0);
    k::batch_norm_saved<float> s1, s2;
    k::workspace<float> w1, w2;
    k::batch_norm_forward_train(x.data(), rows, ch, g.data(), b.data(), 1e-5f, 0.1f, m1.data(), v1.data(), s1, y1.data(), w1, 2);
    k::batch_norm_forward_train(x.data(), rows, ch, g.data(), b.data(), 1e-5f, 0.1f, m2.data(), v2.data(), s2, y2.data(), w2,
                                {2, &pool});
    CHECK(y1 == y2);
    CHECK(v1 == v2);
    k::batch_norm_backward(x.data(), dy.data(), rows, ch, g.data(), s1, dx1.data(), dg1.data(), db1.data(), w1, 2);
    k::batch_norm_backward(x.data(), dy.data(), rows, ch, g.data(), s2, dx2.data(), dg2.data(), db2.data(), w2, {2, &pool});
    CHECK(dx1 == dx2);
    CHECK(dg1 == dg2);
    k::relu_forward(x.data(), x.size(), y1.data(), w1, 2);
    k::relu_forward(x.data(), x.size(), y2.data(), w2, {2, &pool});
    CHECK(y1 == y2);
    // Half storage: the conversions into and out of fp32 are split between threads too.
    std::vector<half> xh(x.size()), yh1(x.size()), yh2(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) xh[i] = half(x[i]);
    k::batch_norm_forward_train(xh.data(), rows, ch, g.data(), b.data(), 1e-5f, 0.1f, m1.data(), v1.data(), s1, yh1.data(),
                                w1, 1);
    k::batch_norm_forward_train(xh.data(), rows, ch, g.data(), b.data(), 1e-5f, 0.1f, m2.data(), v2.data(), s2, yh2.data(),
                                w2, {2, &pool});
    for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(std::abs(float(yh1[i]) - float(yh2[i])) <= 2e-3f * (1 + std::abs(float(yh1[i]))));
    k::relu_forward(xh.data(), xh.size(), yh1.data(), w1, 1);
    k::relu_forward(xh.data(), xh.size(), yh2.data(), w2, {2, &pool});
    CHECK(std::equal(yh1.begin(), yh1.end(), yh2.begin(), [](half p, half q) { return p.bits() == q.bits(); }));
    // Convolution and GEMM: the same chunks and row bands, so the same bits.
    const shape in{6, 9, 9, 5};
    const k::window win(3, 3, 1, 1);
    const std::size_t cout = 7;
    const auto cx = random_vector<float>(in.size(), 40), cw = random_vector<float>(9 * in.c * cout, 41);
    const shape out = win.output(in, cout);
    std::vector<float> cy1(out.size()), cy2(out.size()), cdw1(cw.size(), 0), cdw2(cw.size(), 0);
    k::conv2d_forward(cx.data(), in, cw.data(), cout, win, cy1.data(), w1, {2});
    k::conv2d_forward(cx.data(), in, cw.data(), cout, win, cy2.data(), w2, {2, nullptr, &pool});
    CHECK(cy1 == cy2);
    k::conv2d_backward_weight(cx.data(), in, cy1.data(), cout, win, cdw1.data(), w1, {2});
    k::conv2d_backward_weight(cx.data(), in, cy1.data(), cout, win, cdw2.data(), w2, {2, nullptr, &pool});
    CHECK(cdw1 == cdw2);
    const auto a = random_vector<float>(97 * 61, 42), bm = random_vector<float>(61 * 33, 43);
    std::vector<float> c1(97 * 33), c2(97 * 33);
    k::gemm(k::trans::no, k::trans::no, 97, 33, 61, 1.0f, a.data(), 61, bm.data(), 33, 0.0f, c1.data(), 33, {2});
    k::gemm(k::trans::no, k::trans::no, 97, 33, 61, 1.0f, a.data(), 61, bm.data(), 33, 0.0f, c2.data(), 33,
            {2, nullptr, &pool});
    CHECK(c1 == c2);
}

TEST_CASE("relu forward and backward, in place and in half", "[kernels][relu]") {
    auto x = random_vector<float>(29, 50);
    const auto dy = random_vector<float>(29, 51);
    std::vector<float> y(29), dx(29);
    k::workspace<float> ws;
    k::relu_forward(x.data(), x.size(), y.data(), ws);
    k::relu_backward(y.data(), dy.data(), y.size(), dx.data(), ws);
    for (std::size_t i = 0; i < x.size(); ++i) {
        REQUIRE(y[i] == std::max(x[i], 0.0f));
        REQUIRE(dx[i] == (x[i] > 0 ? dy[i] : 0.0f));
    }
    std::vector<half> yh(29);
    k::relu_forward(x.data(), x.size(), yh.data(), ws);
    REQUIRE(max_rel_error(yh, y) < 1e-3);
    k::relu_forward(x.data(), x.size(), x.data(), ws);  // in place
    REQUIRE(x == y);
}

TEST_CASE("max and average pooling match direct loops, padding and stride 2", "[kernels][pool]") {
    const shape in{2, 7, 6, 3};
    for (const k::window g : {k::window{3, 3, 2, 1}, k::window{2, 2, 2, 0}, k::window{3, 2, 1, 1}}) {
        CAPTURE(g.kh, g.kw, g.stride, g.pad);
        const shape out = g.output(in, in.c);
        const auto x = random_vector<double>(in.size(), 60);
        const auto dy = random_vector<double>(out.size(), 61);
        std::vector<double> ymax(out.size()), yavg(out.size()), dxmax(in.size()), dxavg(in.size());
        std::vector<std::uint32_t> arg;
        k::workspace<double> ws;
        k::max_pool_forward(x.data(), in, g, ymax.data(), arg, ws);
        k::max_pool_backward(dy.data(), in, g, arg, dxmax.data(), ws);
        k::avg_pool_forward(x.data(), in, g, yavg.data(), ws);
        k::avg_pool_backward(dy.data(), in, g, dxavg.data(), ws);
        std::vector<double> rmax(in.size(), 0.0), ravg(in.size(), 0.0);
        for (std::size_t n = 0; n < in.n; ++n)
            for (std::size_t oy = 0; oy < out.h; ++oy)
                for (std::size_t ox = 0; ox < out.w; ++ox)
                    for (std::size_t c = 0; c < in.c; ++c) {
                        double best = -1e300, sum = 0;
                        std::size_t arg_best = 0;
                        for (std::size_t ky = 0; ky < g.kh; ++ky)
                            for (std::size_t kx = 0; kx < g.kw; ++kx) {
                                const long iy = long(oy * g.stride + ky) - long(g.pad), ix = long(ox * g.stride + kx) - long(g.pad);
                                if (iy < 0 || ix < 0 || iy >= long(in.h) || ix >= long(in.w)) continue;
                                const std::size_t i = ((n * in.h + iy) * in.w + ix) * in.c + c;
                                sum += x[i];
                                if (x[i] > best) best = x[i], arg_best = i;
                            }
                        const std::size_t o = ((n * out.h + oy) * out.w + ox) * in.c + c;
                        REQUIRE(ymax[o] == best);
                        REQUIRE(yavg[o] == Approx(sum / double(g.kh * g.kw)).epsilon(1e-12));
                        rmax[arg_best] += dy[o];
                        for (std::size_t ky = 0; ky < g.kh; ++ky)
                            for (std::size_t kx = 0; kx < g.kw; ++kx) {
                                const long iy = long(oy * g.stride + ky) - long(g.pad), ix = long(ox * g.stride + kx) - long(g.pad);
                                if (iy < 0 || ix < 0 || iy >= long(in.h) || ix >= long(in.w)) continue;
                                ravg[((n * in.h + iy) * in.w + ix) * in.c + c] += dy[o] / double(g.kh * g.kw);
                            }
                    }
        REQUIRE(max_rel_error(dxmax, rmax) < 1e-12);
        REQUIRE(max_rel_error(dxavg, ravg) < 1e-12);
    }
}

TEST_CASE("global average pooling forward and backward", "[kernels][pool]") {
    const shape in{3, 5, 3, 17};
    const auto x = random_vector<float>(in.size(), 70);
    const auto dy = random_vector<float>(in.n * in.c, 71);
    std::vector<float> y(in.n * in.c), dx(in.size());
    k::workspace<float> ws;
    k::global_avg_pool_forward(x.data(), in, y.data(), ws);
    k::global_avg_pool_backward(dy.data(), in, dx.data(), ws);
    for (std::size_t n = 0; n < in.n; ++n)
        for (std::size_t c = 0; c < in.c; ++c) {
            double s = 0;
            for (std::size_t p = 0; p < 15; ++p) s += x[(n * 15 + p) * in.c + c];
            REQUIRE(y[n * in.c + c] == Approx(s / 15).margin(1e-6));
            REQUIRE(dx[(n * 15 + 4) * in.c + c] == Approx(dy[n * in.c + c] / 15.0f));
        }
}

TEST_CASE("fully connected forward and backward match loops", "[kernels][linear]") {
    const std::size_t batch = 5, in = 23, out = 11;
    const auto x = random_vector<double>(batch * in, 80), w = random_vector<double>(out * in, 81);
    const auto b = random_vector<double>(out, 82), dy = random_vector<double>(batch * out, 83);
    std::vector<double> y(batch * out), dx(batch * in), dw(out * in, 0.0), db(out, 0.0);
    k::workspace<double> ws;
    k::linear_forward(x.data(), batch, in, w.data(), b.data(), out, y.data(), ws);
    k::linear_backward(x.data(), dy.data(), batch, in, w.data(), out, dx.data(), dw.data(), db.data(), ws);
    for (std::size_t r = 0; r < batch; ++r)
        for (std::size_t o = 0; o < out; ++o) {
            double s = b[o];
            for (std::size_t i = 0; i < in; ++i) s += x[r * in + i] * w[o * in + i];
            REQUIRE(y[r * out + o] == Approx(s).epsilon(1e-12));
        }
    for (std::size_t i = 0; i < in; ++i) {
        double s = 0, t = 0;
        for (std::size_t o = 0; o < out; ++o) s += dy[2 * out + o] * w[o * in + i];
        for (std::size_t r = 0; r < batch; ++r) t += dy[r * out + 3] * x[r * in + i];
        REQUIRE(dx[2 * in + i] == Approx(s).epsilon(1e-12));
        REQUIRE(dw[3 * in + i] == Approx(t).epsilon(1e-12));
    }
    double s = 0;
    for (std::size_t r = 0; r < batch; ++r) s += dy[r * out + 7];
    REQUIRE(db[7] == Approx(s).epsilon(1e-12));
}

TEST_CASE("softmax cross-entropy: loss, accuracy and gradient", "[kernels][loss]") {
    const std::size_t batch = 4, classes = 7;
    const auto z = random_vector<double>(batch * classes, 90, -3, 3);
    const std::vector<std::int32_t> labels{0, 6, 3, 3};
    std::vector<double> dz(batch * classes);
    k::workspace<double> ws;
    const auto r = k::softmax_cross_entropy(z.data(), batch, classes, labels.data(), dz.data(), 8.0, ws);
    double loss = 0;
    std::size_t correct = 0;
    for (std::size_t i = 0; i < batch; ++i) {
        double sum = 0;
        std::size_t best = 0;
        for (std::size_t c = 0; c < classes; ++c) {
            sum += std::exp(z[i * classes + c]);
            if (z[i * classes + c] > z[i * classes + best]) best = c;
        }
        loss += std::log(sum) - z[i * classes + labels[i]];
        correct += best == std::size_t(labels[i]);
    }
    REQUIRE(r.loss == Approx(loss / batch).epsilon(1e-12));
    REQUIRE(r.correct == correct);
    const double h = 1e-6;
    for (std::size_t i = 0; i < z.size(); i += 3) {
        auto zp = z, zm = z;
        zp[i] += h, zm[i] -= h;
        const double lp = k::softmax_cross_entropy<double, double, double>(zp.data(), batch, classes, labels.data(), nullptr, 1.0, ws).loss;
        const double lm = k::softmax_cross_entropy<double, double, double>(zm.data(), batch, classes, labels.data(), nullptr, 1.0, ws).loss;
        REQUIRE(dz[i] == Approx(8.0 * (lp - lm) / (2 * h)).margin(1e-8));  // scaled by the loss scale 8
    }
    const std::vector<std::int32_t> bad{0, 7, 1, 1};
    REQUIRE_THROWS_AS(k::softmax_cross_entropy(z.data(), batch, classes, bad.data(), dz.data(), 1.0, ws), std::out_of_range);
}
