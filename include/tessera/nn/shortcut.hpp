#pragma once
// The shortcut branch of a residual block: the identity, a 1×1 projection with a batch norm (option
// B), or subsampling padded with zero channels (option A), and the policies that choose between the
// last two when a block changes shape.
#include <algorithm>
#include <concepts>
#include <cstddef>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <type_traits>

#include "tessera/kernels/simd.hpp"
#include "tessera/nn/batch_norm.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/gradient_buffers.hpp"

namespace tessera::nn {

/// Shortcut policies for blocks that change shape. Unchanged shapes always use the identity.
/// projection_shortcut: 1×1 convolution (stride s) + batch norm — He et al.'s option B, torchvision.
/// padding_shortcut: subsample by s and pad channels with zeros, no parameters — option A, used by
/// He et al. for the CIFAR ResNets.
struct projection_shortcut {
    static constexpr bool projects = true;
};
struct padding_shortcut {
    static constexpr bool projects = false;
};

template <class S>
concept ShortcutPolicy = requires {
    { S::projects } -> std::convertible_to<bool>;
};

/// The shortcut branch of a residual block.
template <Numeric P>
class shortcut {
public:
    using precision = P;
    using T = typename P::data_type;
    using C = typename P::accumulate_type;
    enum class kind { identity, projection, padding };
    struct state {
        typename conv2d<P>::state conv;
        typename batch_norm<P>::state bn;
        tensor::shape in;
        activation<P> output, grad_input;
        /// The input-gradient buffers, in the order backward writes them.
        template <class F>
        void for_each_gradient_buffer(F&& f) {
            detail::for_each_gradient_buffer(bn, f);
            detail::for_each_gradient_buffer(conv, f);
            f(grad_input);
        }
    };

    shortcut(std::size_t in_channels, std::size_t out_channels, std::size_t stride, bool projects)
        : shortcut(in_channels, out_channels, stride, projects, true) {}
    /// A projection's weights left zero until initialize(rng) (see defer_initialization_t).
    shortcut(std::size_t in_channels, std::size_t out_channels, std::size_t stride, bool projects, defer_initialization_t)
        : shortcut(in_channels, out_channels, stride, projects, false) {}

    [[nodiscard]] kind type() const noexcept { return m_kind; }

    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const {
        if (m_kind == kind::projection) return m_conv->output_shape(s);
        return {s.n, (s.h + m_stride - 1) / m_stride, (s.w + m_stride - 1) / m_stride, m_out};
    }
    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {
        if (m_kind == kind::identity) return {};
        if (m_kind == kind::padding) {  // a strided copy into zeros, and its slice back
            const double n = static_cast<double>(output_shape(s).size());
            return {0, 0, 0, 0, 0, {pass::elementwise(pass_phase::forward, n, 2), pass::elementwise(pass_phase::backward, n, 2)},
                    detail::bytes_of(output_shape(s).size(), sizeof(T))};  // keeps its output
        }
        const tensor::shape o = m_conv->output_shape(s);
        return m_conv->cost(s).then(m_bn->cost(o), detail::bytes_of(o.size(), sizeof(T)));
    }

    const activation<P>& forward(const activation<P>& x, state& st, const context& ctx) {
        st.in = tensor::shape_of(x);
        if (m_kind == kind::identity) return x;
        if (m_kind == kind::projection) return m_bn->forward(m_conv->forward(x, st.conv, ctx), st.bn, ctx);
        const tensor::shape o = output_shape(st.in);
        detail::ensure_shape(st.output, o);
        const std::size_t offset = (m_out - m_in) / 2;
        T* y = st.output.data();
        std::fill(y, y + o.size(), kernels::detail::store_as<T>(0.0));
        for (std::size_t n = 0; n < o.n; ++n)
            for (std::size_t oy = 0; oy < o.h; ++oy)
                for (std::size_t ox = 0; ox < o.w; ++ox)
                    copy(x.data() + ((n * st.in.h + oy * m_stride) * st.in.w + ox * m_stride) * m_in,
                         y + ((n * o.h + oy) * o.w + ox) * m_out + offset, m_in);
        return st.output;
    }

    const activation<P>& backward(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        if (m_kind == kind::identity) return dy;
        if (m_kind == kind::projection) return m_conv->backward(m_bn->backward(dy, st.bn, ctx, true), st.conv, ctx, want_dx);
        const tensor::shape o = output_shape(st.in);
        detail::ensure_shape(st.grad_input, st.in);
        const std::size_t offset = (m_out - m_in) / 2;
        T* dx = st.grad_input.data();
        std::fill(dx, dx + st.in.size(), kernels::detail::store_as<T>(0.0));
        for (std::size_t n = 0; n < o.n; ++n)
            for (std::size_t oy = 0; oy < o.h; ++oy)
                for (std::size_t ox = 0; ox < o.w; ++ox)
                    copy(dy.data() + ((n * o.h + oy) * o.w + ox) * m_out + offset,
                         dx + ((n * st.in.h + oy * m_stride) * st.in.w + ox * m_stride) * m_in, m_in);
        return st.grad_input;
    }

    /// The input-gradient half of backward (SplitBackwardLayer): the projection's convolution keeps
    /// its weight gradient for backward_weights.
    const activation<P>& backward_input(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        if (m_kind != kind::projection) return backward(dy, st, ctx, want_dx);
        return nn::backward_input(*m_conv, m_bn->backward(dy, st.bn, ctx, true), st.conv, ctx, want_dx);
    }
    void backward_weights(state& st, const context& ctx) {
        if (m_kind == kind::projection) nn::backward_weights(*m_conv, st.conv, ctx);
    }

    template <class F>
    void visit_parameters(F&& f, std::string_view prefix = {}) {
        if (m_kind != kind::projection) return;
        m_conv->visit_parameters(f, detail::join(prefix, "0"));
        m_bn->visit_parameters(f, detail::join(prefix, "1"));
    }
    template <class F>
    void visit_buffers(F&& f, std::string_view prefix = {}) {
        if (m_kind == kind::projection) m_bn->visit_buffers(f, detail::join(prefix, "1"));
    }
    void initialize(std::mt19937_64& rng) {
        if (m_kind != kind::projection) return;
        m_conv->initialize(rng);
        m_bn->initialize(rng);
    }

private:
    shortcut(std::size_t in_channels, std::size_t out_channels, std::size_t stride, bool projects, bool draw)
        : m_in(in_channels), m_out(out_channels), m_stride(stride) {
        if (stride == 1 && in_channels == out_channels) {
            m_kind = kind::identity;
        } else if (projects) {
            m_kind = kind::projection;
            m_conv.emplace(detail::make_conv2d<P>(in_channels, out_channels, kernels::window{1, 1, stride, 0}, draw));
            m_bn.emplace(out_channels);
        } else {
            if (out_channels < in_channels)
                throw tensor::shape_error("tessera::nn::shortcut: a padding shortcut cannot reduce channels (" +
                                          std::to_string(in_channels) + " -> " + std::to_string(out_channels) + ")");
            m_kind = kind::padding;
        }
    }

    static void copy(const T* from, T* to, std::size_t n) noexcept {
        if constexpr (std::is_arithmetic_v<T>)
            kernels::simd::copy(from, to, n);
        else
            for (std::size_t i = 0; i < n; ++i) to[i] = from[i];
    }

    std::size_t m_in, m_out, m_stride;
    kind m_kind = kind::identity;
    std::optional<conv2d<P>> m_conv;
    std::optional<batch_norm<P>> m_bn;
};

}  // namespace tessera::nn
