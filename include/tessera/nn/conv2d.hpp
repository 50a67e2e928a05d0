#pragma once
// 2-D convolution layer (no bias: every convolution in a ResNet is followed by batch norm).
#include <cmath>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>

#include "tessera/kernels/conv.hpp"
#include "tessera/kernels/initial_values.hpp"
#include "tessera/kernels/instances.hpp"
#include "tessera/nn/layer.hpp"

namespace tessera::nn {

/// Convolution with weights [kh][kw][in][out] (a k × out matrix), Kaiming-normal initialised
/// (fan_out, gain √2), as torchvision initialises ResNets: at construction from a seed of the
/// layer's shape, and again by initialize(rng).
template <Numeric P>
class conv2d {
public:
    using precision = P;
    using T = typename P::data_type;
    using W = typename P::weight_type;
    using C = typename P::accumulate_type;
    /// A batch norm's input gradient read through its map (batch_norm::backward_map).
    using gradient_map = kernels::simd::batch_norm_gradient_map<C, T>;
    struct state {
        const activation<P>* input = nullptr;
        const activation<P>* grad_output = nullptr;  ///< between backward_input and backward_weights
        activation<P> output, grad_input;
        /// forward_mapped's map: the layer's input is the ReLU of *input's affine map (null: *input).
        std::optional<kernels::simd::relu_of_affine<C>> input_map;
        /// backward_input_mapped's map, for backward_weights: the output gradient is the batch norm's
        /// input gradient through it, from *grad_output.
        std::optional<gradient_map> grad_map;
    };

    conv2d(std::size_t in_channels, std::size_t out_channels, const kernels::window& g)
        : conv2d(in_channels, out_channels, g, defer_initialization) {
        // Usable as constructed, as PyTorch's layers are: seeded by the layer's shape (deterministic);
        // initialize(rng) draws again from the caller's generator.
        std::mt19937_64 rng(detail::default_seed(0xC0417u, in_channels, out_channels, g.kh * 131 + g.kw * 7 + g.stride));
        initialize(rng);
    }
    /// The weights left zero until initialize(rng) (see defer_initialization_t).
    conv2d(std::size_t in_channels, std::size_t out_channels, const kernels::window& g, defer_initialization_t)
        : m_in(in_channels), m_out(out_channels), m_window(g),
          m_weight(tensor::dense<W, 1>::from_shape({g.kh * g.kw * in_channels * out_channels})),
          m_grad(tensor::dense<C, 1>::from_shape({m_weight.size()})) {
        if (in_channels == 0 || out_channels == 0 || g.kh == 0 || g.kw == 0 || g.stride == 0)
            throw tensor::shape_error("tessera::nn::conv2d: channels, kernel and stride must be positive (in=" +
                                      std::to_string(in_channels) + ", out=" + std::to_string(out_channels) + ")");
        m_grad.fill(C(0));
        m_weight.fill(kernels::detail::store_as<W>(0.0));
    }
    /// From its shapes alone: no weights (nn::shapes_only_t).
    conv2d(std::size_t in_channels, std::size_t out_channels, const kernels::window& g, shapes_only_t)
        : m_in(in_channels), m_out(out_channels), m_window(g) {
        if (in_channels == 0 || out_channels == 0 || g.kh == 0 || g.kw == 0 || g.stride == 0)
            throw tensor::shape_error("tessera::nn::conv2d: channels, kernel and stride must be positive (in=" +
                                      std::to_string(in_channels) + ", out=" + std::to_string(out_channels) + ")");
    }

    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const {
        check(s);
        return m_window.output(s, m_out);
    }

    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {
        const tensor::shape o = output_shape(s);
        const std::size_t weights = parameters();
        const double macs = static_cast<double>(o.size()) * static_cast<double>(weights / m_out);
        const double positions = static_cast<double>(o.n * o.h * o.w), taps = double(m_window.kh) * m_window.kw;
        const double in = static_cast<double>(m_in), out = static_cast<double>(m_out);
        using enum pass_phase;
        return {2 * macs, 4 * macs,  // backward: data and weight gradients
                detail::bytes_of(s.size() + o.size(), sizeof(T)) + detail::bytes_of(weights, sizeof(W)),
                detail::bytes_of(2 * s.size() + 2 * o.size(), sizeof(T)) + detail::bytes_of(weights, sizeof(W)) +
                    detail::bytes_of(weights, sizeof(C)),
                weights,
                {pass::contraction(forward, positions, out, in, taps),
                 // the data gradient: the transposed convolution (output and input channels swap roles)
                 pass::contraction(backward, positions, in, out, taps),
                 // the weight gradient: out × (in · taps) results, each summed over the positions
                 pass::contraction(backward, in * taps, out, positions).of_weights()},
                detail::bytes_of(o.size(), sizeof(T))};  // keeps its output (its input is the layer before's)
    }

    const activation<P>& forward(const activation<P>& x, state& st, const context& ctx) {
        return forward_from(x, std::nullopt, st, ctx);
    }

    /// Whether forward_mapped can take an input of shape `in`: the layer runs by Winograd, whose input
    /// transform applies the map as it loads.
    [[nodiscard]] bool takes_mapped_input(const tensor::shape& in, const context& ctx) const {
        check(in);
        return kernels::winograd_tile(algorithm(ctx), in, m_out, m_window) != 0;
    }
    /// forward on max(x·scale + shift, 0) (map: the batch norm and ReLU before this layer, from their
    /// forward_map), read from x as the input transform loads it and never stored; the same results,
    /// bit for bit, as forward on that output. Backward reads x through the map too, so x must stay
    /// alive as an input would. Needs takes_mapped_input.
    const activation<P>& forward_mapped(const activation<P>& x, const kernels::simd::relu_of_affine<C>& map, state& st,
                                        const context& ctx) {
        if (!takes_mapped_input(tensor::shape_of(x), ctx))
            throw std::logic_error("tessera::nn::conv2d::forward_mapped: the layer does not run by Winograd on " +
                                   tensor::shape_of(x).str());
        return forward_from(x, map, st, ctx);
    }

    const activation<P>& backward(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        return backward_from(dy, nullptr, st, ctx, want_dx, nullptr, false);
    }

    /// backward, its input gradient plus `addend` (a residual block's shortcut gradient, the input's
    /// shape): the kernel adds it to each part of the gradient as that part is final, while it is in
    /// cache, instead of a pass of its own over both afterwards. In fp32 the bits of backward then
    /// the add; a 16-bit gradient is rounded once where those round twice. With `through_input_relu`
    /// (an input that is a ReLU's output, read as stored), the sum is then kept only where the input
    /// is positive: the gradient through that ReLU, the bits of its backward after this one, with no
    /// pass of its own.
    const activation<P>& backward_adding(const activation<P>& dy, const activation<P>& addend, state& st,
                                         const context& ctx, bool through_input_relu = false) {
        return backward_from(dy, nullptr, st, ctx, true, &addend, through_input_relu);
    }

    /// Whether backward_mapped can read an output gradient through a batch norm's map, for an input of
    /// shape `in`: the layer runs by Winograd, whose output-gradient transform applies the map.
    [[nodiscard]] bool takes_mapped_gradient(const tensor::shape& in, const context& ctx) const {
        return takes_mapped_input(in, ctx);
    }
    /// backward where the output gradient is the input gradient of the batch norm after this layer,
    /// read through its map from dy, that batch norm's output gradient (batch_norm::backward_map): the
    /// bits of backward on the gradient the batch norm's backward would have stored, which is never
    /// written. dy and the batch norm's state must stay alive as the map needs them. Needs
    /// takes_mapped_gradient. The _adding form adds and masks as backward_adding does.
    const activation<P>& backward_mapped(const activation<P>& dy, const gradient_map& map, state& st, const context& ctx,
                                         bool want_dx) {
        return backward_from(dy, &map, st, ctx, want_dx, nullptr, false);
    }
    const activation<P>& backward_adding_mapped(const activation<P>& dy, const gradient_map& map,
                                                const activation<P>& addend, state& st, const context& ctx,
                                                bool through_input_relu = false) {
        return backward_from(dy, &map, st, ctx, true, &addend, through_input_relu);
    }

    /// The input gradient alone (SplitBackwardLayer); `dy` must stay alive until backward_weights.
    const activation<P>& backward_input(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        return backward_input_from(dy, nullptr, st, ctx, want_dx, nullptr, false);
    }
    /// backward_input plus `addend`, as backward_adding adds (and masks) it.
    const activation<P>& backward_input_adding(const activation<P>& dy, const activation<P>& addend, state& st,
                                               const context& ctx, bool through_input_relu = false) {
        return backward_input_from(dy, nullptr, st, ctx, true, &addend, through_input_relu);
    }
    /// backward_input and backward_input_adding through a batch norm's map, as backward_mapped reads
    /// it; backward_weights reads it so too (dy, the map and what it points to must stay alive until then).
    const activation<P>& backward_input_mapped(const activation<P>& dy, const gradient_map& map, state& st,
                                               const context& ctx, bool want_dx) {
        return backward_input_from(dy, &map, st, ctx, want_dx, nullptr, false);
    }
    const activation<P>& backward_input_adding_mapped(const activation<P>& dy, const gradient_map& map,
                                                      const activation<P>& addend, state& st, const context& ctx,
                                                      bool through_input_relu = false) {
        return backward_input_from(dy, &map, st, ctx, true, &addend, through_input_relu);
    }
    /// The weight gradient of the micro-batch backward_input saw (accumulated, +=).
    void backward_weights(state& st, const context& ctx) {
        if (st.grad_output == nullptr)
            throw std::logic_error("tessera::nn::conv2d::backward_weights: no backward_input before it");
        kernels::conv2d_backward_weight(st.input->data(), tensor::shape_of(*st.input), st.grad_output->data(), m_out,
                                        m_window, m_grad.data(), ws(ctx), ctx.gemm(), algorithm(ctx), input_map(st),
                                        st.grad_map ? &*st.grad_map : nullptr);
        st.grad_output = nullptr;
        st.grad_map.reset();
    }

    template <class F>
    void visit_parameters(F&& f, std::string_view prefix = {}) {
        f(detail::join(prefix, "weight"), std::span<W>(m_weight.data(), m_weight.size()), detail::flat(m_grad));
    }
    template <class F>
    void visit_buffers(F&&, std::string_view = {}) {}

    void initialize(std::mt19937_64& rng) {
        kernels::fill_normal(std::span<W>(m_weight.data(), m_weight.size()),
                             std::sqrt(2.0 / static_cast<double>(m_out * m_window.kh * m_window.kw)), rng);
    }

    [[nodiscard]] std::size_t in_channels() const noexcept { return m_in; }
    /// Its weights: kh · kw · in · out (allocated or not).
    [[nodiscard]] std::size_t parameters() const noexcept { return std::size_t{m_window.kh} * m_window.kw * m_in * m_out; }
    [[nodiscard]] std::size_t out_channels() const noexcept { return m_out; }
    [[nodiscard]] const kernels::window& geometry() const noexcept { return m_window; }

private:
    const activation<P>& forward_from(const activation<P>& x, const std::optional<kernels::simd::relu_of_affine<C>>& map,
                                      state& st, const context& ctx) {
        require_weights();
        const tensor::shape s = tensor::shape_of(x);
        detail::ensure_shape(st.output, output_shape(s));
        st.input_map = map;
        kernels::conv2d_forward(x.data(), s, m_weight.data(), m_out, m_window, st.output.data(), ws(ctx), ctx.gemm(),
                                algorithm(ctx), ctx.forward_rounding(), input_map(st));
        st.input = &x;
        return st.output;
    }
    [[nodiscard]] static const kernels::simd::relu_of_affine<C>* input_map(const state& st) noexcept {
        return st.input_map ? &*st.input_map : nullptr;
    }
    // Both gradients (the input's when want_dx), dy through `map` when given, plus `addend` and masked
    // by the input when given.
    const activation<P>& backward_from(const activation<P>& dy, const gradient_map* map, state& st, const context& ctx,
                                       bool want_dx, const activation<P>* addend, bool through_input_relu) {
        const tensor::shape s = addend != nullptr ? addend_shape(*addend, st) : tensor::shape_of(*st.input);
        check_gradient_map(map, s, ctx);
        const T* mask = relu_mask(st, through_input_relu);
        if (want_dx) detail::ensure_shape(st.grad_input, s);
        kernels::conv2d_backward(st.input->data(), s, dy.data(), m_weight.data(), m_out, m_window, m_grad.data(),
                                 want_dx ? st.grad_input.data() : nullptr, ws(ctx), ctx.gemm(), algorithm(ctx),
                                 ctx.backward_rounding(), input_map(st), addend != nullptr ? addend->data() : nullptr, mask,
                                 map);
        return st.grad_input;
    }
    // The input gradient alone, keeping dy (and the map) for backward_weights.
    const activation<P>& backward_input_from(const activation<P>& dy, const gradient_map* map, state& st,
                                             const context& ctx, bool want_dx, const activation<P>* addend,
                                             bool through_input_relu) {
        const tensor::shape s = addend != nullptr ? addend_shape(*addend, st) : tensor::shape_of(*st.input);
        check_gradient_map(map, s, ctx);
        const T* mask = relu_mask(st, through_input_relu);
        st.grad_output = &dy;
        if (map != nullptr)
            st.grad_map = *map;
        else
            st.grad_map.reset();
        if (!want_dx) return st.grad_input;
        detail::ensure_shape(st.grad_input, s);
        kernels::conv2d_backward_data(dy.data(), s, m_weight.data(), m_out, m_window, st.grad_input.data(), ws(ctx),
                                      ctx.gemm(), algorithm(ctx), ctx.backward_rounding(),
                                      addend != nullptr ? addend->data() : nullptr, mask, map);
        return st.grad_input;
    }
    void check_gradient_map(const gradient_map* map, const tensor::shape& in, const context& ctx) const {
        if (map != nullptr && !takes_mapped_gradient(in, ctx))
            throw std::logic_error("tessera::nn::conv2d: an output gradient through a batch norm's map needs a layer "
                                   "that runs by Winograd, not on " + in.str());
    }
    // The input as the mask of the ReLU whose output it is (null when not asked): an input read
    // through a map is not stored, so it cannot be one.
    [[nodiscard]] static const T* relu_mask(const state& st, bool through_input_relu) {
        if (!through_input_relu) return nullptr;
        if (st.input_map)
            throw std::logic_error("tessera::nn::conv2d: an input read through a batch norm's map has no stored ReLU "
                                   "output to mask the input gradient by");
        return st.input->data();
    }
    // The input's shape, which an addend to the input gradient must have.
    [[nodiscard]] static tensor::shape addend_shape(const activation<P>& addend, const state& st) {
        const tensor::shape s = tensor::shape_of(*st.input);
        if (tensor::shape_of(addend) != s)
            throw tensor::shape_error("tessera::nn::conv2d: an addend of " + tensor::shape_of(addend).str() +
                                      " to the input gradient of " + s.str());
        return s;
    }

    // The context's choice; a layer Winograd does not fit runs im2col + GEMM.
    [[nodiscard]] kernels::conv_algorithm algorithm(const context& ctx) const noexcept {
        const bool winograd = ctx.convolution == kernels::conv_algorithm::winograd ||
                              ctx.convolution == kernels::conv_algorithm::winograd_4x4;
        return winograd && !kernels::winograd::fits(m_window) ? kernels::conv_algorithm::im2col : ctx.convolution;
    }
    void require_weights() const {
        if (m_weight.size() == 0)
            throw std::logic_error("tessera::nn::conv2d: built from shapes alone (nn::shapes_only), it cannot run");
    }
    void check(const tensor::shape& s) const {
        if (s.c != m_in)
            throw tensor::shape_error("tessera::nn::conv2d: input " + s.str() + " has " + std::to_string(s.c) +
                                      " channels, the layer expects " + std::to_string(m_in));
    }

    std::size_t m_in, m_out;
    kernels::window m_window;
    tensor::dense<W, 1> m_weight;
    tensor::dense<C, 1> m_grad;
    [[nodiscard]] kernels::workspace<C>& ws(const context& ctx) noexcept { return detail::workspace_of(ctx, m_ws); }
    kernels::workspace<C> m_ws;  // when the context gives no shared scratch
};

namespace detail {

/// A convolution with its weights drawn from its default seed (draw), or left for initialize(rng).
template <Numeric P>
[[nodiscard]] conv2d<P> make_conv2d(std::size_t in_channels, std::size_t out_channels, const kernels::window& g, bool draw) {
    if (draw) return conv2d<P>(in_channels, out_channels, g);
    return conv2d<P>(in_channels, out_channels, g, defer_initialization);
}

}  // namespace detail

}  // namespace tessera::nn
