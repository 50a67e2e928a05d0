#pragma once
// Clipping by the global gradient norm (PopTorch's max_grad_norm, torch.nn.utils.clip_grad_norm_),
// with a norm whose bits do not depend on how stages, shards or threads cut the parameters.
#include <cmath>
#include <cstddef>
#include <limits>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "tessera/kernels/thread_pool.hpp"
#include "tessera/optim/parameters.hpp"
#include "tessera/optim/shard.hpp"
#include "tessera/optim/square_sum.hpp"

namespace tessera::optim {

/// Σ (v·scale)² over `values`, split between par's threads: the same bits on any thread count.
template <class T>
[[nodiscard]] square_sum squares_of(std::span<T> values, double scale = 1.0, kernels::parallelism par = {}) {
    square_sum total;
    std::mutex merge;
    kernels::detail::parallel_ranges(par, values.size(), update_grain, [&](std::size_t from, std::size_t to, std::size_t) {
        square_sum part;
        for (std::size_t k = from; k < to; ++k) part.add(static_cast<float>(values[k]), scale);
        const std::lock_guard lock(merge);
        total += part;  // exact: the order of the merges does not matter
    });
    return total;
}

/// Σ (g·scale)² over the gradients of params' elements in `range` (visit_in_range's).
template <ParameterSet S>
[[nodiscard]] square_sum gradient_squares(S& params, double scale = 1.0, element_range range = {}, kernels::parallelism par = {}) {
    square_sum total;
    visit_in_range(params, range, [&](std::string_view, auto, auto grad, std::size_t lo, std::size_t hi) {
        total += squares_of(grad.subspan(lo, hi - lo), scale, par);
    });
    return total;
}

/// What multiplies the gradients when their norm is `norm` and the most allowed `max_norm`:
/// max_norm / (norm + 10⁻⁶) when below 1, else 1 (torch.nn.utils.clip_grad_norm_'s rule); 1 when
/// max_norm is +∞ (no clipping).
[[nodiscard]] inline double clip_coefficient(double norm, double max_norm) noexcept {
    if (!(max_norm < std::numeric_limits<double>::infinity())) return 1.0;
    const double c = max_norm / (norm + 1e-6);
    return c < 1.0 ? c : 1.0;
}

/// For a loop of one's own (torch.nn.utils.clip_grad_norm_): scales every gradient of params so that
/// their global L2 norm is at most max_norm, and returns the norm before clipping.
template <ParameterSet S>
double clip_grad_norm(S& params, double max_norm) {
    if (!(max_norm > 0))
        throw std::invalid_argument("tessera::optim::clip_grad_norm: max_norm must be positive, got " + std::to_string(max_norm));
    const double norm = std::sqrt(gradient_squares(params).value());
    if (const double c = clip_coefficient(norm, max_norm); c < 1.0) scale_gradients(params, c);
    return norm;
}

namespace detail {

/// An optimiser's gradient scale with max_grad_norm applied: grad_scale × clip_coefficient of
/// `global_norm` (the norm of the gradients × grad_scale over every parameter of the model, from the
/// caller: a pipeline stage or a shard sees only part of them) or, when none is given, of params'
/// own (then params must be whole: no shard).
template <ParameterSet S>
[[nodiscard]] double clipped_scale(S& params, double grad_scale, double max_norm, element_range shard,
                                   std::optional<double> global_norm, kernels::parallelism par, const char* who) {
    if (!(max_norm < std::numeric_limits<double>::infinity())) return grad_scale;
    if (!global_norm) {
        if (!shard.whole())
            throw std::invalid_argument(std::string(who) + ": max_grad_norm over a shard of the weights needs the global "
                                        "gradient norm from the caller (the step sees only its shard's sums)");
        global_norm = std::sqrt(gradient_squares(params, grad_scale, {}, par).value());
    }
    return grad_scale * clip_coefficient(*global_norm, max_norm);
}

/// max_grad_norm must be positive (+∞: no clipping).
inline void check_max_grad_norm(double max_norm, const char* who) {
    if (!(max_norm > 0))
        throw std::invalid_argument(std::string(who) + ": max_grad_norm must be positive (+inf: no clipping), got " +
                                    std::to_string(max_norm));
}

}  // namespace detail

}  // namespace tessera::optim
