#pragma once
// Residual blocks: basic (two 3×3) and bottleneck (1×1, 3×3, 1×1), with identity, projection
// (option B) or zero-padding (option A) shortcuts.
#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "tessera/kernels/simd.hpp"
#include "tessera/nn/activation.hpp"
#include "tessera/nn/batch_norm.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/nn/shortcut.hpp"

namespace tessera::nn {

namespace detail {

/// out = a + b elementwise, computed in C, any storage types; a half sum rounded as `rounding` says
/// (element i drawing the bits of element i, on any number of threads). Relu: out = max(a + b, 0) in
/// the same pass, bit for bit the ReLU of the rounded sum (rounding keeps a value's sign, and a
/// negative sum rounds to a value the ReLU makes 0 either way).
template <class C, bool Relu = false, class T>
void add(const T* a, const T* b, T* out, std::size_t n, kernels::parallelism threads = {},
         const tensor::rounding& rounding = {}) {
    const std::size_t grain = kernels::detail::elementwise_grain(threads);
    if constexpr (kernels::simd::in_register<C, T>) {  // C itself, or half widened in registers
        if (!kernels::rounds_stochastically<C, T>(rounding))
            return kernels::detail::parallel_ranges(threads, n, grain, [&](std::size_t lo, std::size_t hi, std::size_t) {
                if constexpr (Relu)
                    kernels::simd::add_relu<C>(a + lo, b + lo, out + lo, hi - lo);
                else
                    kernels::simd::add<C>(a + lo, b + lo, out + lo, hi - lo);
            });
    }
    kernels::detail::parallel_ranges(threads, n, grain, [&](std::size_t lo, std::size_t hi, std::size_t) {
        constexpr std::size_t chunk = 256;
        alignas(64) C x[chunk], y[chunk];
        for (std::size_t i = lo; i < hi; i += chunk) {
            const std::size_t m = std::min(chunk, hi - i);
            kernels::convert_n(a + i, x, m);
            kernels::convert_n(b + i, y, m);
            kernels::simd::add_to(y, x, m);
            if constexpr (Relu) kernels::simd::relu<C>(x, x, m);
            if constexpr (std::is_same_v<T, tensor::half> && std::is_same_v<C, float>)
                if (rounding.stochastic) {
                    tensor::convert_stochastic(x, out + i, m, rounding, i);
                    continue;
                }
            kernels::convert_n(x, out + i, m);
        }
    });
}

/// Whether a residual's main branch is a sequential that ends in a batch norm without its own ReLU
/// (the basic and bottleneck blocks' do): training then runs that batch norm's apply, the block's
/// add and its ReLU in one pass (batch_norm::forward_add_relu).
template <class Main>
concept ends_in_batch_norm = requires(Main& m) {
    requires std::is_same_v<std::remove_cvref_t<decltype(m.template get<Main::size - 1>())>,
                            batch_norm<typename Main::precision, false>>;
};

/// Whether a residual's main branch is a sequential whose first layer can add the shortcut's gradient
/// to its own input gradient as it computes it (conv2d::backward_adding, backward_input_adding): every
/// block's main branch starts with a convolution.
template <class Main>
concept starts_with_adding_layer = requires(Main& m, const activation<typename Main::precision>& g,
                                            std::remove_cvref_t<decltype(std::get<0>(std::declval<typename Main::state&>().parts))>& st,
                                            const context& ctx) {
    m.template get<0>().backward_adding(g, g, st, ctx);
    m.template get<0>().backward_input_adding(g, g, st, ctx);
};

/// Whether a residual's main branch starts with an adding layer and a layer that can hand it a map
/// in backward (gradient_maps_into: the basic and bottleneck blocks' conv1 and bn1): its first layer
/// then reads the second's input gradient through the map as it adds the shortcut's.
template <class Main>
concept starts_with_mapped_pair =
    starts_with_adding_layer<Main> && Main::size >= 2 &&
    gradient_maps_into<std::remove_cvref_t<decltype(std::declval<Main&>().template get<0>())>,
                       std::remove_cvref_t<decltype(std::declval<Main&>().template get<1>())>> &&
    requires(Main& m, const activation<typename Main::precision>& g,
             std::remove_cvref_t<decltype(std::get<0>(std::declval<typename Main::state&>().parts))>& st,
             const typename std::remove_cvref_t<decltype(std::declval<Main&>().template get<0>())>::gradient_map& map,
             const context& ctx) {
        m.template get<0>().backward_adding_mapped(g, map, g, st, ctx);
        m.template get<0>().backward_input_adding_mapped(g, map, g, st, ctx);
    };

}  // namespace detail

/// The add of two branches (a residual block's, before its ReLU) into an output of shape `out`: the
/// sum written as the ReLU's output (fused: kept once, in the ReLU's cost). Its backward hands the
/// gradient to both branches as it is: no pass (branch_sum_cost is where they meet again).
template <Numeric P>
[[nodiscard]] nn::cost branch_add_cost(const tensor::shape& out) {
    using T = typename P::data_type;
    const double n = static_cast<double>(out.size());
    return {n, 0, detail::bytes_of(3 * out.size(), sizeof(T)), detail::bytes_of(3 * out.size(), sizeof(T)), 0,
            {pass::elementwise(pass_phase::forward, n, 3)}, 0};
}
/// The backward of a tensor of shape `in` that two branches read (a residual block's input): its
/// gradient is the sum of the two branches' gradients.
template <Numeric P>
[[nodiscard]] nn::cost branch_sum_cost(const tensor::shape& in) {
    return {0, 0, 0, 0, 0, {pass::elementwise(pass_phase::backward, static_cast<double>(in.size()), 3)}, 0};
}

/// relu(main(x) + shortcut(x)). Main is a layer (a sequential of convolutions and batch norms).
template <Layer Main>
class residual {
public:
    using precision = typename Main::precision;
    using P = precision;
    using T = typename P::data_type;
    using C = typename P::accumulate_type;
    struct state {
        typename Main::state main;
        typename shortcut<P>::state skip;
        activation<P> grad_input;
        typename relu<P>::state out;  // its output: relu(main + shortcut), written by the fused add
        /// The input-gradient buffers, in the order backward writes them (gradient_recycler).
        template <class F>
        void for_each_gradient_buffer(F&& f) {
            detail::for_each_gradient_buffer(out, f);
            detail::for_each_gradient_buffer(skip, f);
            detail::for_each_gradient_buffer(main, f);
            f(grad_input);
        }
    };

    residual(Main main, shortcut<P> skip) : m_main(std::move(main)), m_skip(std::move(skip)) {}

    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const {
        const tensor::shape a = m_main.output_shape(s), b = m_skip.output_shape(s);
        if (a != b)
            throw tensor::shape_error("tessera::nn::residual: main branch gives " + a.str() + ", shortcut gives " + b.str());
        return a;
    }
    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {
        const nn::cost main = m_main.cost(s), skip = m_skip.cost(s);
        nn::cost c = main;
        c += skip;
        const tensor::shape o = output_shape(s);
        // Inference: the main branch runs (the input, the caller's, stays for the shortcut), then the
        // shortcut beside the main branch's output, then the add beside both (an identity shortcut's
        // output is the input).
        const double out = detail::bytes_of(o.size(), sizeof(T)), skip_out = m_skip.type() == shortcut<P>::kind::identity ? 0.0 : out;
        const double peak = std::max({main.inference_peak_bytes(), out + skip.inference_peak_bytes(), out + skip_out + out});
        c += branch_add_cost<P>(o);
        c += branch_sum_cost<P>(s);
        c += m_relu.cost(o);
        c.peak_bytes = peak;
        return c;
    }

    const activation<P>& forward(const activation<P>& x, state& st, const context& ctx) {
        if constexpr (detail::ends_in_batch_norm<Main>) {
            if (ctx.mode == mode::train) return forward_fused(x, st, ctx);
        }
        const auto& a = m_main.forward(x, st.main, ctx.child(0));
        const auto& b = m_skip.forward(x, st.skip, ctx.child(1));
        // The add and the ReLU in one pass, into the ReLU's output (its backward masks by it).
        detail::ensure_shape(st.out.output, tensor::shape_of(a));
        detail::add<C, true>(a.data(), b.data(), st.out.output.data(), a.size(), ctx.parallel(), ctx.forward_rounding());
        return st.out.output;
    }

    const activation<P>& backward(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        return backward_pass<false>(dy, st, ctx, want_dx);
    }

    /// The input-gradient half of backward (SplitBackwardLayer): both branches keep their weight
    /// gradients for backward_weights.
    const activation<P>& backward_input(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        return backward_pass<true>(dy, st, ctx, want_dx);
    }

    /// Whether backward_chained can mask the input gradient: the main branch's first layer adds the
    /// shortcut's gradient to its own as it computes it (the basic and bottleneck blocks).
    static constexpr bool chains = detail::starts_with_adding_layer<Main>;

    /// backward as one of a chain of blocks, as nn::resnet runs its blocks. `sum_gradient`: dy is
    /// already the gradient of the block's sum, its ReLU's mask applied (the block after this one
    /// masked its input gradient). `mask_input_gradient` (needs `chains` and want_dx): the input
    /// gradient comes back kept only where the input is positive, which for an input that is the
    /// block before's ReLU output is the gradient of that block's sum; the first convolution masks it
    /// as it adds the shortcut's gradient. A chain of blocks then runs no ReLU backward of its own
    /// between them (a pass that read the output gradient and the output and wrote the masked
    /// gradient): bit for bit backward and the ReLU's backward apart.
    const activation<P>& backward_chained(const activation<P>& dy, state& st, const context& ctx, bool want_dx,
                                          bool sum_gradient, bool mask_input_gradient) {
        return backward_pass<false>(dy, st, ctx, want_dx, sum_gradient, mask_input_gradient);
    }
    /// backward_input as backward_chained runs backward.
    const activation<P>& backward_input_chained(const activation<P>& dy, state& st, const context& ctx, bool want_dx,
                                                bool sum_gradient, bool mask_input_gradient) {
        return backward_pass<true>(dy, st, ctx, want_dx, sum_gradient, mask_input_gradient);
    }
    void backward_weights(state& st, const context& ctx) {
        nn::backward_weights(m_main, st.main, ctx.child(0));
        nn::backward_weights(m_skip, st.skip, ctx.child(1));
    }

    template <class F>
    void visit_parameters(F&& f, std::string_view prefix = {}) {
        m_main.visit_parameters(f, prefix);
        m_skip.visit_parameters(f, detail::join(prefix, "downsample"));
    }
    template <class F>
    void visit_buffers(F&& f, std::string_view prefix = {}) {
        m_main.visit_buffers(f, prefix);
        m_skip.visit_buffers(f, detail::join(prefix, "downsample"));
    }
    void initialize(std::mt19937_64& rng) {
        m_main.initialize(rng);
        m_skip.initialize(rng);
    }

    [[nodiscard]] Main& main_branch() noexcept { return m_main; }
    [[nodiscard]] shortcut<P>& skip_branch() noexcept { return m_skip; }

private:
    // Training through a main branch that ends in a batch norm: its other layers, the shortcut, then
    // the batch norm's apply, the add and the ReLU in one pass, into the ReLU's output. The contexts
    // the unfused path gives: the batch norm its place in the main branch, the output the block's
    // rounding. The batch norm's own output is never stored: a pass that wrote it and one that read
    // it back fewer (in fp32 the same bits; a 16-bit output rounded once, not twice).
    const activation<P>& forward_fused(const activation<P>& x, state& st, const context& ctx) {
        constexpr std::size_t last = Main::size - 1;
        const context main_ctx = ctx.child(0);
        const auto& y = m_main.forward_units(0, last, x, st.main, main_ctx);
        const auto& b = m_skip.forward(x, st.skip, ctx.child(1));
        return m_main.template get<last>().forward_add_relu(y, b, st.out.output, std::get<last>(st.main.parts),
                                                             main_ctx.child(last), ctx.forward_rounding());
    }

    // The backward pass: each branch whole, or only its input-gradient half (InputOnly); dy the output's
    // gradient, or the sum's (sum_gradient); the input gradient masked by the input (mask_input).
    template <bool InputOnly>
    const activation<P>& backward_pass(const activation<P>& dy, state& st, const context& ctx, bool want_dx,
                                       bool sum_gradient = false, bool mask_input = false) {
        if (mask_input && !(chains && want_dx))
            throw std::logic_error("tessera::nn::residual: masking the input gradient needs a main branch whose first "
                                   "layer adds the shortcut's gradient, and an input gradient");
        const auto& dsum = sum_gradient ? dy : m_relu.backward(dy, st.out, ctx.child(2), true);
        if constexpr (detail::starts_with_adding_layer<Main>) {
            if (want_dx) {
                // The shortcut's gradient first, then the main branch's, whose first layer adds the
                // shortcut's to its input gradient as it computes it: no pass of its own for the sum.
                const context main_ctx = ctx.child(0);
                const auto& db = nn::backward_part<InputOnly>(m_skip, dsum, st.skip, ctx.child(1), true);
                auto& first = m_main.template get<0>();
                auto& first_state = std::get<0>(st.main.parts);
                // The gradient of the output of unit u of the main branch (u >= 1), its units after u run.
                const auto after = [&](std::size_t u) -> const activation<P>& {
                    if (u == Main::size) return dsum;
                    if constexpr (InputOnly)
                        return m_main.backward_units_input(u, Main::size, dsum, st.main, main_ctx, true);
                    else
                        return m_main.backward_units(u, Main::size, dsum, st.main, main_ctx, true);
                };
                if constexpr (detail::starts_with_mapped_pair<Main>) {
                    // The second layer (bn1) hands the first its map where both can: its input
                    // gradient is never written.
                    const auto& d2 = after(2);
                    auto& second = m_main.template get<1>();
                    auto& second_state = std::get<1>(st.main.parts);
                    const context c0 = main_ctx.child(0), c1 = main_ctx.child(1);
                    if (second.maps_gradient(second_state, c1) &&
                        first.takes_mapped_gradient(tensor::shape_of(*first_state.input), c0)) {
                        const auto map = second.backward_map(d2, second_state, c1);
                        if constexpr (InputOnly)
                            return first.backward_input_adding_mapped(d2, map, db, first_state, c0, mask_input);
                        else
                            return first.backward_adding_mapped(d2, map, db, first_state, c0, mask_input);
                    }
                    const auto& d1 = nn::backward_part<InputOnly>(second, d2, second_state, c1, true);
                    if constexpr (InputOnly)
                        return first.backward_input_adding(d1, db, first_state, c0, mask_input);
                    else
                        return first.backward_adding(d1, db, first_state, c0, mask_input);
                }
                const auto& d1 = after(1);  // the gradient of the first layer's output
                if constexpr (InputOnly)
                    return first.backward_input_adding(d1, db, first_state, main_ctx.child(0), mask_input);
                else
                    return first.backward_adding(d1, db, first_state, main_ctx.child(0), mask_input);
            }
        }
        const auto& da = nn::backward_part<InputOnly>(m_main, dsum, st.main, ctx.child(0), want_dx);
        const auto& db = nn::backward_part<InputOnly>(m_skip, dsum, st.skip, ctx.child(1), want_dx);
        if (!want_dx) return st.grad_input;
        detail::ensure_shape(st.grad_input, tensor::shape_of(da));
        detail::add<C>(da.data(), db.data(), st.grad_input.data(), da.size(), ctx.parallel(), ctx.backward_rounding());
        return st.grad_input;
    }

    Main m_main;
    shortcut<P> m_skip;
    relu<P> m_relu;
};

namespace detail {

template <Numeric P>
using basic_main = sequential<conv2d<P>, batch_norm_relu<P>, conv2d<P>, batch_norm<P>>;
template <Numeric P>
using bottleneck_main =
    sequential<conv2d<P>, batch_norm_relu<P>, conv2d<P>, batch_norm_relu<P>, conv2d<P>, batch_norm<P>>;

template <Numeric P>
basic_main<P> make_basic_main(std::size_t in, std::size_t width, std::size_t stride, bool draw) {
    basic_main<P> m(make_conv2d<P>(in, width, {3, 3, stride, 1}, draw), batch_norm_relu<P>(width),
                    make_conv2d<P>(width, width, {3, 3, 1, 1}, draw), batch_norm<P>(width));
    m.named({"conv1", "bn1", "conv2", "bn2"});  // bn1 and its ReLU in one layer
    return m;
}

template <Numeric P>
bottleneck_main<P> make_bottleneck_main(std::size_t in, std::size_t width, std::size_t stride, bool draw) {
    bottleneck_main<P> m(make_conv2d<P>(in, width, {1, 1, 1, 0}, draw), batch_norm_relu<P>(width),
                         make_conv2d<P>(width, width, {3, 3, stride, 1}, draw), batch_norm_relu<P>(width),
                         make_conv2d<P>(width, 4 * width, {1, 1, 1, 0}, draw), batch_norm<P>(4 * width));
    m.named({"conv1", "bn1", "conv2", "bn2", "conv3", "bn3"});
    return m;
}

}  // namespace detail

/// Two 3×3 convolutions (the first with the stride) and a shortcut: ResNet-18/34 and the CIFAR ResNets.
template <Numeric P, ShortcutPolicy S = projection_shortcut>
class basic_block : public residual<detail::basic_main<P>> {
public:
    static constexpr std::size_t expansion = 1;
    basic_block(std::size_t in_channels, std::size_t width, std::size_t stride)
        : residual<detail::basic_main<P>>(detail::make_basic_main<P>(in_channels, width, stride, true),
                                          shortcut<P>(in_channels, width, stride, S::projects)) {}
    /// The weights left zero until initialize(rng) (see defer_initialization_t).
    basic_block(std::size_t in_channels, std::size_t width, std::size_t stride, defer_initialization_t)
        : residual<detail::basic_main<P>>(detail::make_basic_main<P>(in_channels, width, stride, false),
                                          shortcut<P>(in_channels, width, stride, S::projects, defer_initialization)) {}
};

/// 1×1 reduce, 3×3 (with the stride, torchvision's "v1.5"), 1×1 expand ×4: ResNet-50/101/152.
template <Numeric P, ShortcutPolicy S = projection_shortcut>
class bottleneck : public residual<detail::bottleneck_main<P>> {
public:
    static constexpr std::size_t expansion = 4;
    bottleneck(std::size_t in_channels, std::size_t width, std::size_t stride)
        : residual<detail::bottleneck_main<P>>(detail::make_bottleneck_main<P>(in_channels, width, stride, true),
                                               shortcut<P>(in_channels, 4 * width, stride, S::projects)) {}
    /// The weights left zero until initialize(rng) (see defer_initialization_t).
    bottleneck(std::size_t in_channels, std::size_t width, std::size_t stride, defer_initialization_t)
        : residual<detail::bottleneck_main<P>>(detail::make_bottleneck_main<P>(in_channels, width, stride, false),
                                               shortcut<P>(in_channels, 4 * width, stride, S::projects, defer_initialization)) {}
};

}  // namespace tessera::nn
