#pragma once
// Batch normalisation over the rows of an NHWC tensor (per channel), training and evaluation.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/affine_map.hpp"
#include "tessera/kernels/batch_norm_rows.hpp"
#include "tessera/kernels/simd.hpp"
#include "tessera/kernels/storage.hpp"

namespace tessera::kernels {

/// Per-channel state a batch-norm layer keeps between forward and backward (computation type).
template <Compute C>
struct batch_norm_saved {
    aligned_vector<C> mean, inv_std;
    /// The affine map the training forward applied (γ/σ and β − mean·γ/σ per channel), and whether
    /// its output was max(x·scale + shift, 0) rounded to nearest into a type that loads into
    /// registers: the ReLU's mask then follows from x alone (simd::relu_of_affine), and backward
    /// does not read the output.
    aligned_vector<C> scale, shift;
    bool mask_from_input = false;
    /// What batch_norm_backward_map leaves for the layer that reads the input gradient through a map:
    /// per channel Σdy/M, Σ(dy·x̂)·σ⁻¹ (unused by the map), k1 = γ/σ and k2 (4·channels values), and
    /// the ReLU's mask from the input when the forward had one.
    aligned_vector<C> gradient;
    simd::relu_of_affine<C> gradient_mask{};
};

namespace detail {

/// Column sums in a fixed order: the rows are cut into blocks of `block` rows, per_rows(b, e, out)
/// adds rows [b, e) into its block's own zeroed `width` values, and the blocks are added to `into`
/// in block order. Threads take runs of blocks; the result is the same, bit for bit, on any number.
template <class C, class F>
void ordered_column_reduce(std::size_t rows, std::size_t block, std::size_t width, C* into, aligned_vector<C>& partial,
                           parallelism par, F&& per_rows) {
    const std::size_t blocks = (rows + block - 1) / block;
    if (partial.size() < blocks * width) partial.resize(blocks * width);
    std::fill_n(partial.data(), blocks * width, C(0));
    parallel_ranges(par, blocks, 1, [&](std::size_t b0, std::size_t b1, std::size_t) {
        for (std::size_t b = b0; b < b1; ++b) per_rows(b * block, std::min(rows, (b + 1) * block), partial.data() + b * width);
    });
    for (std::size_t b = 0; b < blocks; ++b) kernels::simd::add_to(partial.data() + b * width, into, width);
}

/// mean[c] = the mean of column c of x (rows × channels) and m2[c] = Σ_r (x[r, c] − mean[c])², reading
/// x from memory once: each block of `block` rows is summed, then its squared deviations from its own
/// mean are summed while it is still in cache, and the blocks are combined in block order (Chan, Golub
/// and LeVeque's pairwise update: m2 += m2_b + n_b·(mean_b − mean)²). The same bits on any number of
/// threads; as stable as two passes over the whole of x.
template <class C, class TX>
void column_mean_and_deviations(const TX* x, std::size_t rows, std::size_t channels, std::size_t block, C* mean, C* m2,
                                aligned_vector<C>& partial, parallelism par) {
    const std::size_t blocks = (rows + block - 1) / block;
    if (partial.size() < 2 * blocks * channels) partial.resize(2 * blocks * channels);
    std::fill_n(partial.data(), 2 * blocks * channels, C(0));
    parallel_ranges(par, blocks, 1, [&](std::size_t b0, std::size_t b1, std::size_t) {
        for (std::size_t b = b0; b < b1; ++b) {
            const std::size_t first = b * block, n = std::min(rows, first + block) - first;
            C* sums = partial.data() + 2 * b * channels;
            kernels::simd::column_sums(x + first * channels, n, channels, sums);
            const C inv_n = C(1) / static_cast<C>(n);
            for (std::size_t c = 0; c < channels; ++c) sums[c] *= inv_n;  // the block's mean
            kernels::simd::column_square_deviations(x + first * channels, n, channels, sums, sums + channels);
        }
    });
    std::fill_n(mean, channels, C(0));
    std::fill_n(m2, channels, C(0));
    for (std::size_t b = 0; b < blocks; ++b) {
        const C n = static_cast<C>(std::min(rows, (b + 1) * block) - b * block);
        const C seen = static_cast<C>(b * block), total = seen + n;
        const C* block_mean = partial.data() + 2 * b * channels;
        const C* block_m2 = block_mean + channels;
        for (std::size_t c = 0; c < channels; ++c) {
            const C delta = block_mean[c] - mean[c];
            mean[c] = std::fma(delta, n / total, mean[c]);
            m2[c] += std::fma(delta * delta, seen * n / total, block_m2[c]);
        }
    }
}

/// simd::scale_shift_rows with the ReLU, and whether a skip is added, chosen at run time.
template <class C, class TX, class TO, class TS = void>
void normalise_rows(bool relu, const TX* x, std::size_t rows, std::size_t channels, const C* scale, const C* shift,
                    TO* out, const TS* skip = nullptr) noexcept {
    const auto apply = [&]<bool Relu>() {
        if constexpr (!std::is_void_v<TS>)
            if (skip != nullptr) return kernels::simd::scale_shift_rows<C, Relu>(x, rows, channels, scale, shift, out, skip);
        kernels::simd::scale_shift_rows<C, Relu>(x, rows, channels, scale, shift, out);
    };
    if (relu)
        apply.template operator()<true>();
    else
        apply.template operator()<false>();
}

}  // namespace detail

namespace detail {

/// Rows per block of a batch norm's sums over rows × channels; threads take runs of whole blocks. The
/// sums follow these blocks: they depend on the shape alone, never on the threads. At most 64 Ki
/// values a block (its rows stay in cache between the passes over it), and blocks of equal rows, at
/// least min_sum_blocks of them where the rows allow: 64 Ki values alone cut ResNet-20's 28 × 28
/// activations of 16 channels (batch 32) into 6 full blocks and an eighth of one, split 4 : 3
/// between two threads, one idle for 40 % of the pass.
inline constexpr std::size_t min_sum_blocks = 16;
[[nodiscard]] inline std::size_t batch_norm_grain(std::size_t rows, std::size_t channels) noexcept {
    const std::size_t most = (std::size_t{1} << 16) / std::max<std::size_t>(channels, 1);
    const std::size_t even = (rows + min_sum_blocks - 1) / min_sum_blocks;
    return std::max<std::size_t>(1, std::min(most, even));
}
/// Rows per thread at least of a batch norm's elementwise passes (the applies, which sum nothing).
[[nodiscard]] inline std::size_t batch_norm_apply_grain(std::size_t channels, parallelism par) noexcept {
    return std::max<std::size_t>(1, elementwise_grain(par) / channels);
}

/// The training statistics of xc (rows × channels, in registers' types) into saved (mean and 1/σ),
/// the running statistics moved by `momentum` (unbiased variance, as PyTorch; null ones left alone),
/// and each channel's scale γ/σ and shift β − mean·γ/σ into saved, returned: what a training
/// forward applies.
template <class C, class TX, class W>
std::pair<const C*, const C*> training_affine(const TX* xc, std::size_t rows, std::size_t channels, const W* gamma,
                                              const W* beta, C eps, C momentum, C* running_mean, C* running_var,
                                              batch_norm_saved<C>& saved, workspace<C>& ws, parallelism par) {
    saved.mean.assign(channels, C(0));
    saved.inv_std.assign(channels, C(0));
    C* mean = saved.mean.data();
    C* var = saved.inv_std.data();
    column_mean_and_deviations(xc, rows, channels, batch_norm_grain(rows, channels), mean, var, ws.partial, par);
    const C inv_rows = C(1) / static_cast<C>(rows);
    saved.scale.resize(channels);
    saved.shift.resize(channels);
    C* scale = saved.scale.data();
    C* shift = saved.shift.data();
    // Every product that feeds a sum is fused explicitly (std::fma): GCC fuses a * b + c where it
    // chooses (-ffp-contract=fast, its default), and chose differently for two callers of this one
    // function on one CPU (an AMD EPYC, Zen 5), which then saved statistics a bit apart.
    for (std::size_t c = 0; c < channels; ++c) {
        const C v = var[c] * inv_rows;
        const C unbiased = rows > 1 ? var[c] / static_cast<C>(rows - 1) : v;
        if (running_mean != nullptr) running_mean[c] = std::fma(momentum, mean[c], (C(1) - momentum) * running_mean[c]);
        if (running_var != nullptr) running_var[c] = std::fma(momentum, unbiased, (C(1) - momentum) * running_var[c]);
        var[c] = C(1) / std::sqrt(std::fma(var[c], inv_rows, eps));  // now inv_std
        scale[c] = load_as<C>(gamma[c]) * var[c];
        shift[c] = std::fma(-mean[c], scale[c], load_as<C>(beta[c]));
    }
    return {scale, shift};
}

}  // namespace detail

/// Training forward over x (rows × channels): statistics of this micro-batch normalise x; the running
/// statistics move by `momentum` towards them (unbiased variance, as PyTorch); null running
/// statistics are left alone (a recomputed forward). y may alias nothing. relu: y = max(bn(x), 0),
/// the ReLU that follows the batch norm in the same pass. skip (not null): y = max(bn(x) + skip, 0)
/// with relu, a residual block's add and ReLU in the same pass, bn(x) never stored; computed in C
/// and rounded once into y, so in C (fp32) the same bits as the batch norm, then the add and the
/// ReLU apart, and in a 16-bit type one rounding where those make two.
template <Compute C, Storage T, Storage W, Storage Y>
void batch_norm_forward_train(const T* x, std::size_t rows, std::size_t channels, const W* gamma, const W* beta,
                              C eps, C momentum, C* running_mean, C* running_var, batch_norm_saved<C>& saved, Y* y,
                              workspace<C>& ws, parallelism par = {}, bool relu = false, const tensor::rounding& rounding = {},
                              const T* skip = nullptr) {
    // xc, sc and out: x, skip and y themselves when their storage loads into registers, else converted copies.
    const auto run = [&](const auto* xc, const auto* sc, auto* out) {
        const auto [scale, shift] =
            detail::training_affine(xc, rows, channels, gamma, beta, eps, momentum, running_mean, running_var, saved, ws, par);
        detail::parallel_ranges(par, rows, detail::batch_norm_apply_grain(channels, par), [&](std::size_t b, std::size_t e, std::size_t) {
            detail::normalise_rows(relu, xc + b * channels, e - b, channels, scale, shift, out + b * channels,
                                   sc == nullptr ? sc : sc + b * channels);
        });
    };
    // y computed in C, then converted (rounded stochastically when asked) at the commit; x read in
    // registers when its storage loads into them.
    const auto through_scratch = [&](const auto* xc, const auto* sc) {
        store_compute<C, Y> dst(y, rows * channels, ws.c, par, rounding);
        run(xc, sc, dst.target());
        dst.commit();
    };
    saved.mask_from_input = false;
    if constexpr (simd::in_register<C, T> && simd::in_register<C, Y>) {
        if (!rounds_stochastically<C, Y>(rounding)) {
            run(x, skip, y);
            saved.mask_from_input = relu && skip == nullptr;
            return;
        }
        through_scratch(x, skip);
    } else {
        const C* sc = skip == nullptr ? nullptr : load_compute<C>(skip, rows * channels, ws.col, par);
        through_scratch(load_compute<C>(x, rows * channels, ws.a, par), sc);
    }
}

/// Evaluation forward: normalises with the running statistics (then max(·, 0) when relu).
template <Compute C, Storage T, Storage W, Storage Y>
void batch_norm_forward_eval(const T* x, std::size_t rows, std::size_t channels, const W* gamma, const W* beta, C eps,
                             const C* running_mean, const C* running_var, Y* y, workspace<C>& ws, bool relu = false,
                             const tensor::rounding& rounding = {}) {
    const C* xc = load_compute<C>(x, rows * channels, ws.a);
    if (ws.b.size() < 2 * channels) ws.b.resize(2 * channels);
    C* scale = ws.b.data();
    C* shift = ws.b.data() + channels;
    for (std::size_t c = 0; c < channels; ++c) {
        scale[c] = detail::load_as<C>(gamma[c]) / std::sqrt(running_var[c] + eps);
        shift[c] = std::fma(-running_mean[c], scale[c], detail::load_as<C>(beta[c]));  // as training_affine
    }
    store_compute<C, Y> dst(y, rows * channels, ws.c, {}, rounding);
    detail::normalise_rows(relu, xc, rows, channels, scale, shift, dst.target());
    dst.commit();
}

namespace detail {

/// The sums of a batch norm's backward over x and dy (in registers' types), dy masked by mask > 0 (M
/// void: no mask; simd::relu_of_affine: the mask recomputed from x): dgamma and dbeta accumulated,
/// and into `coefficients` (4·channels values) Σdy/M, Σ(dy·x̂)·σ⁻¹, k1 and k2 of dx = k1·(dy − Σdy/M −
/// (x − mean)·k2).
template <Compute C, class TX, class TD, Storage W, class M>
void gradient_coefficients(const TX* xc, const TD* dyc, std::size_t rows, std::size_t channels, const W* gamma,
                           const batch_norm_saved<C>& saved, C* coefficients, C* dgamma, C* dbeta, workspace<C>& ws,
                           parallelism par, const M* mask) {
    C* sum_dy = coefficients;
    C* sum_dy_xhat = sum_dy + channels;
    C* k1 = sum_dy + 2 * channels;
    C* k2 = sum_dy + 3 * channels;
    const C* mean = saved.mean.data();
    const C* inv_std = saved.inv_std.data();
    std::fill(sum_dy, sum_dy + 2 * channels, C(0));
    const std::size_t grain = batch_norm_grain(rows, channels);
    // Σdy and Σdy·(x − mean) side by side: sum_dy_xhat follows sum_dy, and each block's partial likewise.
    ordered_column_reduce(rows, grain, 2 * channels, sum_dy, ws.partial, par, [&](std::size_t b, std::size_t e, C* sums) {
        kernels::simd::column_grad_sums(xc + b * channels, dyc + b * channels, e - b, channels, mean, sums,
                                        sums + channels, kernels::simd::mask_row(mask, b, channels));
    });
    const C inv_rows = C(1) / static_cast<C>(rows);
    for (std::size_t c = 0; c < channels; ++c) {
        sum_dy_xhat[c] *= inv_std[c];
        dgamma[c] += sum_dy_xhat[c];
        dbeta[c] += sum_dy[c];
        k1[c] = load_as<C>(gamma[c]) * inv_std[c];  // dx = k1·(dy − Σdy/M − x̂·Σ(dy·x̂)/M)
        k2[c] = sum_dy_xhat[c] * inv_rows * inv_std[c];
        sum_dy[c] *= inv_rows;
    }
}

}  // namespace detail

/// batch_norm_backward with dy masked by mask > 0 (M void: no mask; simd::relu_of_affine: the mask
/// recomputed from x); M loads into registers.
template <Compute C, Storage T, Storage D, Storage W, Storage X, class M>
void batch_norm_backward_masked(const T* x, const D* dy, std::size_t rows, std::size_t channels, const W* gamma,
                                const batch_norm_saved<C>& saved, X* dx, C* dgamma, C* dbeta, workspace<C>& ws,
                                parallelism par, const M* mask, const tensor::rounding& rounding = {}) {
    // xc, dyc and out: the tensors themselves when their storage loads into registers, else copies.
    const auto run = [&](const auto* xc, const auto* dyc, auto* out) {
        if (ws.b.size() < 4 * channels) ws.b.resize(4 * channels);
        C* co = ws.b.data();
        detail::gradient_coefficients(xc, dyc, rows, channels, gamma, saved, co, dgamma, dbeta, ws, par, mask);
        const C* mean = saved.mean.data();
        detail::parallel_ranges(par, rows, detail::batch_norm_apply_grain(channels, par), [&](std::size_t b, std::size_t e, std::size_t) {
            simd::batch_norm_dx_rows(xc + b * channels, dyc + b * channels, e - b, channels, mean, co + 2 * channels,
                                     co + 3 * channels, co, out + b * channels, simd::mask_row(mask, b, channels));
        });
    };
    // dx computed in C, then converted (rounded stochastically when asked) at the commit; x and dy read
    // in registers when their storage loads into them.
    const auto through_scratch = [&](const auto* xc, const auto* dyc) {
        store_compute<C, X> dst(dx, rows * channels, ws.c, par, rounding);
        run(xc, dyc, dst.target());
        dst.commit();
    };
    if constexpr (simd::in_register<C, T> && simd::in_register<C, D> && simd::in_register<C, X>) {
        if (!rounds_stochastically<C, X>(rounding)) return run(x, dy, dx);
        through_scratch(x, dy);
    } else {
        through_scratch(load_compute<C>(x, rows * channels, ws.a, par), load_compute<C>(dy, rows * channels, ws.col, par));
    }
}

namespace detail {

/// The largest value of C that rounds to zero, to nearest, in R (half of R's smallest positive
/// value; 0 when R is C): what a ReLU's output stored as R holds as 0.
template <class C, class R>
[[nodiscard]] C rounds_to_zero_up_to() noexcept {
    if constexpr (std::is_same_v<C, R>)
        return C(0);
    else
        return load_as<C>(std::numeric_limits<R>::denorm_min()) / C(2);
}

}  // namespace detail

/// The ReLU of the affine map a training forward applied (saved by it), as a mask (above: what R, the
/// output's storage type, rounds to zero) or as values (simd::relu_of_affine_value).
template <class R, class C>
[[nodiscard]] simd::relu_of_affine<C> relu_of_saved(const batch_norm_saved<C>& saved) noexcept {
    return {saved.scale.data(), saved.shift.data(), detail::rounds_to_zero_up_to<C, R>()};
}

/// The training forward of a batch norm with its ReLU that applies nothing: x's statistics into
/// saved, the running statistics moved (null ones left alone), and the affine map returned, whose
/// ReLU stands for the output the forward would have written as R, rounded to nearest (a convolution
/// after it reads x through it: winograd::conv2d_forward's map). Backward then goes by
/// batch_norm_relu_backward_from_input. x and R load into registers.
template <Compute C, Storage T, Storage W, class R = T>
[[nodiscard]] simd::relu_of_affine<C> batch_norm_train_map(const T* x, std::size_t rows, std::size_t channels, const W* gamma,
                                                           const W* beta, C eps, C momentum, C* running_mean, C* running_var,
                                                           batch_norm_saved<C>& saved, workspace<C>& ws,
                                                           parallelism par = {}) {
    static_assert(simd::in_register<C, T> && simd::in_register<C, R>,
                  "tessera::kernels::batch_norm_train_map: x and the output it stands for must load into registers");
    (void)detail::training_affine(x, rows, channels, gamma, beta, eps, momentum, running_mean, running_var, saved, ws, par);
    saved.mask_from_input = true;
    return relu_of_saved<R>(saved);
}

/// batch_norm_backward through the ReLU of a training forward that saved mask_from_input (one that
/// rounded its output to nearest, or batch_norm_train_map): the ReLU's mask recomputed from x and the
/// saved map, bit for bit the one its output gives, without reading the output (one stream less in
/// each of backward's two passes). R: the output's storage type.
template <Compute C, Storage T, Storage D, Storage W, Storage X, class R = T>
void batch_norm_relu_backward_from_input(const T* x, const D* dy, std::size_t rows, std::size_t channels, const W* gamma,
                                         const batch_norm_saved<C>& saved, X* dx, C* dgamma, C* dbeta, workspace<C>& ws,
                                         parallelism par = {}, const tensor::rounding& rounding = {}) {
    if (!saved.mask_from_input || saved.scale.size() != channels)
        throw std::logic_error("tessera::kernels::batch_norm_relu_backward_from_input: the forward did not save its "
                               "map for " + std::to_string(channels) + " channels");
    const simd::relu_of_affine<C> mask = relu_of_saved<R>(saved);
    batch_norm_backward_masked(x, dy, rows, channels, gamma, saved, dx, dgamma, dbeta, ws, par, &mask, rounding);
}

/// The training backward without its input gradient written: dgamma and dbeta accumulated, the
/// coefficients of dx into saved.gradient, and the map through which a convolution reads dx as it
/// loads dy (simd::batch_norm_gradient_map; winograd::conv2d_backward's dymap): one pass that wrote
/// dx and one that read it back fewer. With relu, dy is masked by the ReLU of a forward that saved
/// mask_from_input. x, dy and X, the storage type dx stands for, load into registers; the map keeps
/// pointers to x and saved.
template <Storage X, Compute C, Storage T, Storage D, Storage W>
[[nodiscard]] simd::batch_norm_gradient_map<C, T> batch_norm_backward_map(const T* x, const D* dy, std::size_t rows,
                                                                        std::size_t channels, const W* gamma,
                                                                        batch_norm_saved<C>& saved, C* dgamma, C* dbeta,
                                                                        workspace<C>& ws, parallelism par, bool relu) {
    static_assert(simd::in_register<C, T> && simd::in_register<C, D> && std::is_same_v<T, X>,
                  "tessera::kernels::batch_norm_backward_map: x and dy load into registers, and dx is stored as x is");
    if (relu && (!saved.mask_from_input || saved.scale.size() != channels))
        throw std::logic_error("tessera::kernels::batch_norm_backward_map: the forward did not save its map for " +
                               std::to_string(channels) + " channels");
    saved.gradient.resize(4 * channels);
    C* co = saved.gradient.data();
    if (relu) {
        saved.gradient_mask = relu_of_saved<X>(saved);
        detail::gradient_coefficients(x, dy, rows, channels, gamma, saved, co, dgamma, dbeta, ws, par, &saved.gradient_mask);
    } else {
        detail::gradient_coefficients(x, dy, rows, channels, gamma, saved, co, dgamma, dbeta, ws, par,
                                      static_cast<const void*>(nullptr));
    }
    return {x, saved.mean.data(), co + 2 * channels, co + 3 * channels, co, relu ? &saved.gradient_mask : nullptr};
}

/// Backward of the training forward: dx (overwritten), dgamma and dbeta (accumulated).
/// dx = gamma·inv_std/M · (M·dy − Σdy − x̂·Σ(dy·x̂)). With relu_output (the forward's output of a
/// batch norm with relu), dy is the gradient of that output: it passes only where the output is positive.
template <Compute C, Storage T, Storage D, Storage W, Storage X, Storage R = T>
void batch_norm_backward(const T* x, const D* dy, std::size_t rows, std::size_t channels, const W* gamma,
                         const batch_norm_saved<C>& saved, X* dx, C* dgamma, C* dbeta, workspace<C>& ws,
                         parallelism par = {}, const R* relu_output = nullptr, const tensor::rounding& rounding = {}) {
    if (relu_output != nullptr) {
        if constexpr (simd::in_register<C, R>) {
            batch_norm_backward_masked(x, dy, rows, channels, gamma, saved, dx, dgamma, dbeta, ws, par, relu_output,
                                       rounding);
        } else {
            const C* mask = load_compute<C>(relu_output, rows * channels, ws.mask, par);
            batch_norm_backward_masked(x, dy, rows, channels, gamma, saved, dx, dgamma, dbeta, ws, par, mask, rounding);
        }
    } else {
        batch_norm_backward_masked(x, dy, rows, channels, gamma, saved, dx, dgamma, dbeta, ws, par,
                                   static_cast<const void*>(nullptr), rounding);
    }
}

}  // namespace tessera::kernels
