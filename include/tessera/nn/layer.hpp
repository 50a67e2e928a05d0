#pragma once
// The Layer concept and what every layer shares: numeric policy, run context, cost, activation buffers.
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "tessera/config/precision.hpp"
#include "tessera/kernels/conv_algorithm.hpp"
#include "tessera/kernels/dropout.hpp"
#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/storage.hpp"
#include "tessera/nn/cost.hpp"
#include "tessera/tensor/dense.hpp"

namespace tessera::nn {

/// What a layer needs from a precision policy: the storage type of activations (`data_type`), of
/// weights (`weight_type`) and the type arithmetic accumulates in. config::fp32, config::mixed and
/// config::half satisfy it; so does a test's fp64 policy (gradient checks in double).
template <class P>
concept Numeric = requires {
    typename P::data_type;
    typename P::weight_type;
    typename P::accumulate_type;
} && kernels::Storage<typename P::data_type> && kernels::Storage<typename P::weight_type> &&
                  kernels::Compute<typename P::accumulate_type>;

static_assert(Numeric<config::fp32> && Numeric<config::mixed> && Numeric<config::half>);

/// An activation (or activation gradient): NHWC, stored in the policy's data type.
template <Numeric P>
using activation = tensor::dense<typename P::data_type, 4>;

/// Training uses batch statistics and keeps what backward needs; evaluation uses running statistics.
enum class mode : bool { eval = false, train = true };

/// How one forward or backward call runs.
struct context {
    nn::mode mode = mode::train;
    std::size_t threads = 1;  ///< threads for the GEMMs inside the call
    /// false for a forward pass that is run again (recomputation during backward): batch
    /// normalisation then uses the batch statistics without moving its running statistics twice.
    bool update_running_statistics = true;
    /// Workers for threads > 1, kept between calls (none: threads are started per parallel loop).
    kernels::thread_pool* pool = nullptr;
    /// Scratch memory the layers this thread runs share (none: each layer uses a workspace of its own).
    /// Layers run at the same time, on different threads, need different scratch.
    kernels::scratch* scratch = nullptr;
    /// How convolutions are computed. automatic: Winograd for 3×3 stride-1 layers of 8 or more channels
    /// (F(4×4, 3×3) or F(2×2, 3×3), whichever does fewer multiplies, F(4×4, 3×3) only up to 64
    /// channels), a stem of at most 4 input channels directly (kernels::uses_direct), im2col + GEMM for
    /// the others; im2col: every layer by im2col + GEMM; winograd and
    /// winograd_4x4: every 3×3 stride-1 layer by F(2×2, 3×3) or F(4×4, 3×3), whatever its channels, the
    /// others by im2col + GEMM.
    kernels::conv_algorithm convolution = kernels::conv_algorithm::automatic;
    /// How the call stores what it computes in a 16-bit data type: to nearest, or stochastically as the
    /// IPU does with stochastic rounding on. The stream names this layer's tensors of this micro-batch;
    /// a layer rounds its output with `forward_rounding()` and its input gradient with
    /// `backward_rounding()`, and a network gives each of its layers `child(i)`.
    tensor::rounding rounding{};
    /// Training's dropout stream (kernels::dropout_stream: the run's seed, the step, the micro-batch's
    /// first sample in the combined batch); inactive, the default, dropout layers pass everything.
    kernels::dropout_stream dropout{};
    /// For a micro-batch of sequences: per sample, a segment number for each position, which
    /// attention reads as its mask (kernels::attention_mask::segments: padding is segment 0); null,
    /// every position of a sample sees every other. It travels with the micro-batch, not with a layer.
    const std::uint16_t* segments = nullptr;
    /// For a micro-batch of sequences: per sample, each position's token type (BERT's sentence A or
    /// B), which a token embedding with a type table reads; null, type 0 everywhere.
    const std::uint16_t* token_types = nullptr;
    [[nodiscard]] kernels::parallelism parallel() const noexcept { return {threads, pool}; }
    [[nodiscard]] kernels::gemm_options gemm() const noexcept { return {threads, nullptr, pool}; }
    /// This context for part i of the layer (its i-th sub-layer): the same but for the rounding and
    /// dropout streams.
    [[nodiscard]] context child(std::uint64_t i) const noexcept {
        context c = *this;
        c.rounding = rounding.child(i);
        c.dropout = dropout.child(i);
        return c;
    }
    [[nodiscard]] const tensor::rounding& forward_rounding() const noexcept { return rounding; }
    [[nodiscard]] tensor::rounding backward_rounding() const noexcept { return rounding.child(backward_tag); }

private:
    static constexpr std::uint64_t backward_tag = ~std::uint64_t{0};
};

/// A parameter visitor receives (name, values in the weight type, gradient in the accumulate type).
/// A buffer visitor (running statistics) receives (name, values in the accumulate type).
/// @code
///   model.visit_parameters([](std::string_view name, auto value, auto grad) { ... });
/// @endcode
template <Numeric P>
using parameter_function =
    std::function<void(std::string_view, std::span<typename P::weight_type>, std::span<typename P::accumulate_type>)>;
template <Numeric P>
using buffer_function = std::function<void(std::string_view, std::span<typename P::accumulate_type>)>;

/// A layer: shape inference, forward and backward through a per-micro-batch state (so a pipeline can
/// keep several micro-batches in flight), parameters and buffers by visitor, and a cost model.
/// forward returns the state's output; the input must stay alive until backward. backward
/// accumulates parameter gradients (+=) and returns the input gradient unless want_dx is false.
template <class L>
concept Layer = Numeric<typename L::precision> && std::default_initializable<typename L::state> &&
                requires(L& layer, const L& c, const tensor::shape& s, typename L::state& st,
                         const activation<typename L::precision>& x, const context& ctx,
                         parameter_function<typename L::precision> pf, buffer_function<typename L::precision> bf,
                         std::mt19937_64& rng, std::string_view prefix) {
                    { c.output_shape(s) } -> std::same_as<tensor::shape>;
                    { c.cost(s) } -> std::same_as<nn::cost>;
                    { layer.forward(x, st, ctx) } -> std::same_as<const activation<typename L::precision>&>;
                    { layer.backward(x, st, ctx, true) } -> std::same_as<const activation<typename L::precision>&>;
                    layer.visit_parameters(pf, prefix);
                    layer.visit_buffers(bf, prefix);
                    layer.initialize(rng);
                };

/// A layer whose backward splits in two, as zero-bubble pipelines run it: `backward_input(dy, st, ctx,
/// want_dx)` returns what backward returns and accumulates every parameter gradient but those
/// `backward_weights(st, ctx)` adds later, from what backward_input kept in the state (the output
/// gradient, which must stay alive until then, as the input does). Between the two, other
/// micro-batches may run either half; each gradient is still accumulated in micro-batch order, so the
/// results are those of backward. Convolutions and fully connected layers split (the weight gradient
/// is their second contraction); batch norm does not (its parameter gradients are sums its input
/// gradient needs anyway).
template <class L>
concept SplitBackwardLayer =
    Layer<L> && requires(L& layer, typename L::state& st, const activation<typename L::precision>& dy, const context& ctx) {
        { layer.backward_input(dy, st, ctx, true) } -> std::same_as<const activation<typename L::precision>&>;
        layer.backward_weights(st, ctx);
    };

/// The input-gradient half of `layer`'s backward: all of it when the layer does not split.
template <Layer L>
const activation<typename L::precision>& backward_input(L& layer, const activation<typename L::precision>& dy,
                                                        typename L::state& st, const context& ctx, bool want_dx) {
    if constexpr (SplitBackwardLayer<L>)
        return layer.backward_input(dy, st, ctx, want_dx);
    else
        return layer.backward(dy, st, ctx, want_dx);
}

/// Backward through `layer` whole, or only its input-gradient half (InputOnly): how a network runs
/// its parts in either of its own backward passes.
template <bool InputOnly, Layer L>
const activation<typename L::precision>& backward_part(L& layer, const activation<typename L::precision>& dy,
                                                       typename L::state& st, const context& ctx, bool want_dx) {
    if constexpr (InputOnly)
        return nn::backward_input(layer, dy, st, ctx, want_dx);
    else
        return layer.backward(dy, st, ctx, want_dx);
}

/// The weight-gradient half of `layer`'s backward, after backward_input: nothing when the layer does
/// not split (backward_input did it all).
template <Layer L>
void backward_weights(L& layer, typename L::state& st, const context& ctx) {
    if constexpr (SplitBackwardLayer<L>) layer.backward_weights(st, ctx);
}

/// Constructs a layer, block or stem without drawing its initial weights (they are left zero): for a
/// network that draws every weight from its own generator right after (nn::resnet_family does), so
/// that each weight is drawn once, not twice. The layer is not usable until initialize(rng).
struct defer_initialization_t {
    explicit defer_initialization_t() = default;
};
inline constexpr defer_initialization_t defer_initialization{};

/// Constructs a layer from its shapes alone, allocating no weights: its shapes, costs and parameter
/// counts are those of the real layer (dry runs, plans and counts of networks whose weights would
/// not fit, such as GPT-2 XL's 1.56 billion), but it cannot run (forward throws std::logic_error).
struct shapes_only_t {
    explicit shapes_only_t() = default;
};
inline constexpr shapes_only_t shapes_only{};

/// Base of layers without parameters or buffers (activations, pooling): the visitors visit nothing
/// and there is nothing to initialise.
struct parameter_free {
    template <class F>
    void visit_parameters(F&&, std::string_view = {}) {}
    template <class F>
    void visit_buffers(F&&, std::string_view = {}) {}
    void initialize(std::mt19937_64&) {}
};

namespace detail {

/// L(args..., defer_initialization) where L offers that constructor (its weights then left for the
/// caller's initialize(rng)), else L(args...).
template <class L, class... A>
[[nodiscard]] L construct_deferred(A&&... args) {
    if constexpr (std::is_constructible_v<L, A..., defer_initialization_t>)
        return L(std::forward<A>(args)..., defer_initialization);
    else
        return L(std::forward<A>(args)...);
}

/// The workspace a layer's kernels use: the context's shared scratch, else the layer's own.
template <kernels::Compute C>
[[nodiscard]] kernels::workspace<C>& workspace_of(const context& ctx, kernels::workspace<C>& own) noexcept {
    return ctx.scratch != nullptr ? ctx.scratch->template get<C>() : own;
}

/// Gives t the NHWC shape s, reallocating only when the shape changes.
template <class T>
void ensure_shape(tensor::dense<T, 4>& t, const tensor::shape& s) {
    if (tensor::shape_of(t) != s) t = tensor::make_nhwc<T>(s);
}

/// The shape leaving units [0, u) of a unit network (nn::resnet, nn::sequential) for an input of shape s.
template <class N>
[[nodiscard]] tensor::shape shape_after_units(const N& net, std::size_t u, tensor::shape s) {
    for (std::size_t i = 0; i < u; ++i) s = net.unit_output_shape(i, s);
    return s;
}

[[nodiscard]] inline std::string join(std::string_view prefix, std::string_view name) {
    if (prefix.empty()) return std::string(name);
    std::string out(prefix);
    out += '.';
    out += name;
    return out;
}

template <class T>
[[nodiscard]] std::span<T> flat(tensor::dense<T, 1>& t) noexcept {
    return {t.data(), t.size()};
}

/// The seed a layer initialises itself from at construction: a mix of its kind and shape, so that
/// layers start usable and deterministic without a generator shared between them.
[[nodiscard]] constexpr std::uint64_t default_seed(std::uint64_t kind, std::size_t a, std::size_t b, std::size_t c) noexcept {
    std::uint64_t h = 0x9E3779B97F4A7C15ull ^ kind;
    for (const std::uint64_t v : {std::uint64_t(a), std::uint64_t(b), std::uint64_t(c)}) {
        h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
        h *= 0xBF58476D1CE4E5B9ull;
    }
    return h;
}

[[nodiscard]] constexpr double bytes_of(std::size_t n, std::size_t elem) noexcept {
    return static_cast<double>(n) * static_cast<double>(elem);
}

}  // namespace detail

}  // namespace tessera::nn
