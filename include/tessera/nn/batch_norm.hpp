#pragma once
// Batch normalisation layer: statistics per micro-batch in training, running statistics in evaluation.
#include <cstddef>
#include <stdexcept>
#include <string>

#include "tessera/kernels/batch_norm.hpp"
#include "tessera/kernels/instances.hpp"
#include "tessera/nn/layer.hpp"

namespace tessera::nn {

/// Per-channel batch norm over n·h·w. Note: training statistics are those of the micro-batch a stage
/// sees, so results depend on the micro-batch size (as on the IPU and in PopTorch).
/// Relu: followed by a ReLU in the same passes (batch_norm_relu): the same parameters and results as
/// batch_norm then relu, one pass over the activations less each way.
template <Numeric P, bool Relu = false>
class batch_norm {
public:
    using precision = P;
    using T = typename P::data_type;
    using W = typename P::weight_type;
    using C = typename P::accumulate_type;
    struct state {
        const activation<P>* input = nullptr;
        activation<P> output, grad_input;
        kernels::batch_norm_saved<C> saved;
    };

    explicit batch_norm(std::size_t channels, double eps = 1e-5, double momentum = 0.1)
        : m_channels(channels), m_eps(static_cast<C>(eps)), m_momentum(static_cast<C>(momentum)),
          m_gamma(tensor::dense<W, 1>::from_shape({channels})), m_beta(tensor::dense<W, 1>::from_shape({channels})),
          m_dgamma(tensor::dense<C, 1>::from_shape({channels})), m_dbeta(tensor::dense<C, 1>::from_shape({channels})),
          m_running_mean(tensor::dense<C, 1>::from_shape({channels})),
          m_running_var(tensor::dense<C, 1>::from_shape({channels})) {
        if (channels == 0) throw tensor::shape_error("tessera::nn::batch_norm: channels must be positive");
        m_dgamma.fill(C(0));
        m_dbeta.fill(C(0));
        reset();
    }

    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const {
        if (s.c != m_channels)
            throw tensor::shape_error("tessera::nn::batch_norm: input " + s.str() + " has " + std::to_string(s.c) +
                                      " channels, the layer expects " + std::to_string(m_channels));
        return s;
    }

    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {
        const double n = static_cast<double>(output_shape(s).size());
        // The ReLU adds a comparison per element each way, and backward reads the output for its mask.
        const double relu = Relu ? 1.0 : 0.0;
        const double c = static_cast<double>(m_channels);
        using enum pass_phase;
        return {(5 + relu) * n, (9 + relu) * n, detail::bytes_of(2 * s.size(), sizeof(T)),
                detail::bytes_of((Relu ? 5 : 4) * s.size(), sizeof(T)), 2 * m_channels,
                {pass::reduction(forward, n, 1, 2 * c),  // mean and variance per channel
                 pass::elementwise(forward, n, 2),       // normalise, scale, shift (and the ReLU)
                 pass::reduction(backward, n, Relu ? 3 : 2, 2 * c),  // sums of dy and dy·x̂ (masked by the output)
                 pass::elementwise(backward, n, Relu ? 4 : 3)},
                // keeps its output, and each channel's mean and 1/σ (its input is the layer before's)
                detail::bytes_of(output_shape(s).size(), sizeof(T)) + detail::bytes_of(2 * m_channels, sizeof(C))};
    }

    const activation<P>& forward(const activation<P>& x, state& st, const context& ctx) {
        const tensor::shape s = output_shape(tensor::shape_of(x));
        detail::ensure_shape(st.output, s);
        if (ctx.mode == mode::train)
            kernels::batch_norm_forward_train(x.data(), s.pixels(), m_channels, m_gamma.data(), m_beta.data(), m_eps,
                                              m_momentum, ctx.update_running_statistics ? m_running_mean.data() : nullptr,
                                              ctx.update_running_statistics ? m_running_var.data() : nullptr, st.saved,
                                              st.output.data(), ws(ctx), ctx.parallel(), Relu, ctx.forward_rounding());
        else
            kernels::batch_norm_forward_eval(x.data(), s.pixels(), m_channels, m_gamma.data(), m_beta.data(), m_eps,
                                             m_running_mean.data(), m_running_var.data(), st.output.data(), ws(ctx), Relu,
                                             ctx.forward_rounding());
        st.input = &x;
        return st.output;
    }

    /// The training forward fused with the add and the ReLU that follow it in a residual block:
    /// out = max(bn(x) + skip, 0), rounded once as `rounding` says; this layer's own output is not
    /// stored (its backward reads only its input and statistics). A batch norm without its own
    /// ReLU, in training mode.
    const activation<P>& forward_add_relu(const activation<P>& x, const activation<P>& skip, activation<P>& out, state& st,
                                          const context& ctx, const tensor::rounding& rounding) {
        static_assert(!Relu, "tessera::nn::batch_norm::forward_add_relu: the layer's own ReLU would come before the add");
        if (ctx.mode != mode::train)
            throw std::logic_error("tessera::nn::batch_norm::forward_add_relu: a training forward, not an evaluation one");
        const tensor::shape s = output_shape(tensor::shape_of(x));
        if (tensor::shape_of(skip) != s)
            throw tensor::shape_error("tessera::nn::batch_norm::forward_add_relu: the shortcut gives " +
                                      tensor::shape_of(skip).str() + ", the batch norm " + s.str());
        detail::ensure_shape(out, s);
        kernels::batch_norm_forward_train(x.data(), s.pixels(), m_channels, m_gamma.data(), m_beta.data(), m_eps, m_momentum,
                                          ctx.update_running_statistics ? m_running_mean.data() : nullptr,
                                          ctx.update_running_statistics ? m_running_var.data() : nullptr, st.saved,
                                          out.data(), ws(ctx), ctx.parallel(), true, rounding, skip.data());
        st.input = &x;
        return out;
    }

    /// Whether this forward can hand the layer after it its input and map instead of an output
    /// (forward_map): a batch norm with its ReLU, training, its output rounded to nearest into a type
    /// that loads into registers.
    [[nodiscard]] bool maps(const context& ctx) const noexcept {
        if constexpr (Relu && kernels::simd::in_register<C, T>)
            return ctx.mode == mode::train && !kernels::rounds_stochastically<C, T>(ctx.forward_rounding());
        else
            return false;
    }

    /// The training forward without its output: x's statistics (the running ones moved as forward
    /// moves them) and the map whose ReLU gives the output forward would have written, for the
    /// layer after this one to read x through (conv2d::forward_mapped). One pass that wrote the output
    /// and one that read it back fewer, and the output's memory. Backward is forward's. Needs maps(ctx).
    [[nodiscard]] kernels::simd::relu_of_affine<C> forward_map(const activation<P>& x, state& st, const context& ctx) {
        if (!maps(ctx))
            throw std::logic_error("tessera::nn::batch_norm::forward_map: needs a ReLU, training mode and an output "
                                   "rounded to nearest into a type that loads into registers");
        const tensor::shape s = output_shape(tensor::shape_of(x));
        st.input = &x;
        if constexpr (Relu && kernels::simd::in_register<C, T>)
            return kernels::batch_norm_train_map(x.data(), s.pixels(), m_channels, m_gamma.data(), m_beta.data(), m_eps,
                                                 m_momentum, ctx.update_running_statistics ? m_running_mean.data() : nullptr,
                                                 ctx.update_running_statistics ? m_running_var.data() : nullptr, st.saved,
                                                 ws(ctx), ctx.parallel());
        else
            return {};
    }

    /// Whether backward can hand the layer before it a map instead of an input gradient
    /// (backward_map): training, a gradient rounded to nearest into a type that loads into registers,
    /// and with the ReLU, a forward that saved its mask from the input (forward_map's or
    /// forward's to nearest).
    [[nodiscard]] bool maps_gradient(const state& st, const context& ctx) const noexcept {
        if constexpr (kernels::simd::in_register<C, T>)
            return ctx.mode == mode::train && st.input != nullptr &&
                   !kernels::rounds_stochastically<C, T>(ctx.backward_rounding()) && (!Relu || st.saved.mask_from_input);
        else
            return false;
    }

    /// backward without writing its input gradient: dgamma and dbeta accumulated, and the map through
    /// which the convolution before this layer reads the input gradient as it loads dy
    /// (conv2d::backward_mapped): one pass that wrote the gradient and one that read it back fewer,
    /// the same bits. dy and this state must stay alive while the map is read. Needs maps_gradient.
    [[nodiscard]] kernels::simd::batch_norm_gradient_map<C, T> backward_map(const activation<P>& dy, state& st,
                                                                           const context& ctx) {
        if (!maps_gradient(st, ctx))
            throw std::logic_error("tessera::nn::batch_norm::backward_map: needs training, a gradient rounded to nearest "
                                   "into a type that loads into registers and, with the ReLU, its mask saved from the input");
        const tensor::shape s = tensor::shape_of(*st.input);
        if (tensor::shape_of(dy) != s)
            throw tensor::shape_error("tessera::nn::batch_norm::backward_map: an output gradient of " +
                                      tensor::shape_of(dy).str() + " for an input of " + s.str());
        if constexpr (kernels::simd::in_register<C, T>)
            return kernels::batch_norm_backward_map<T>(st.input->data(), dy.data(), s.pixels(), m_channels, m_gamma.data(),
                                                       st.saved, m_dgamma.data(), m_dbeta.data(), ws(ctx), ctx.parallel(),
                                                       Relu);
        else
            return {};
    }

    const activation<P>& backward(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        const tensor::shape s = tensor::shape_of(*st.input);
        detail::ensure_shape(st.grad_input, s);
        // The input gradient comes out of the same pass as dgamma and dbeta: computed even when unused.
        if constexpr (Relu) {
            if (st.saved.mask_from_input) {  // the ReLU's mask from x and the saved map: the output is not read
                kernels::batch_norm_relu_backward_from_input(st.input->data(), dy.data(), s.pixels(), m_channels,
                                                             m_gamma.data(), st.saved, st.grad_input.data(),
                                                             m_dgamma.data(), m_dbeta.data(), ws(ctx), ctx.parallel(),
                                                             ctx.backward_rounding());
                (void)want_dx;
                return st.grad_input;
            }
        }
        const T* relu_output = Relu ? st.output.data() : nullptr;  // the mask of the fused ReLU
        kernels::batch_norm_backward(st.input->data(), dy.data(), s.pixels(), m_channels, m_gamma.data(), st.saved,
                                     st.grad_input.data(), m_dgamma.data(), m_dbeta.data(), ws(ctx), ctx.parallel(),
                                     relu_output, ctx.backward_rounding());
        (void)want_dx;
        return st.grad_input;
    }

    template <class F>
    void visit_parameters(F&& f, std::string_view prefix = {}) {
        f(detail::join(prefix, "weight"), std::span<W>(m_gamma.data(), m_channels), detail::flat(m_dgamma));
        f(detail::join(prefix, "bias"), std::span<W>(m_beta.data(), m_channels), detail::flat(m_dbeta));
    }
    template <class F>
    void visit_buffers(F&& f, std::string_view prefix = {}) {
        f(detail::join(prefix, "running_mean"), detail::flat(m_running_mean));
        f(detail::join(prefix, "running_var"), detail::flat(m_running_var));
    }

    void initialize(std::mt19937_64&) { reset(); }

    /// γ = 1, β = 0, running mean 0, running variance 1 (PyTorch's initial values).
    void reset() {
        m_gamma.fill(kernels::detail::store_as<W>(1.0));
        m_beta.fill(kernels::detail::store_as<W>(0.0));
        m_running_mean.fill(C(0));
        m_running_var.fill(C(1));
    }

    [[nodiscard]] std::size_t channels() const noexcept { return m_channels; }

private:
    std::size_t m_channels;
    C m_eps, m_momentum;
    tensor::dense<W, 1> m_gamma, m_beta;
    tensor::dense<C, 1> m_dgamma, m_dbeta, m_running_mean, m_running_var;
    [[nodiscard]] kernels::workspace<C>& ws(const context& ctx) noexcept { return detail::workspace_of(ctx, m_ws); }
    kernels::workspace<C> m_ws;  // when the context gives no shared scratch
};

/// Batch norm followed by ReLU, in one layer (see batch_norm's Relu).
template <Numeric P>
using batch_norm_relu = batch_norm<P, true>;

}  // namespace tessera::nn
