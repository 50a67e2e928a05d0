#pragma once
// Pooling layers: max, average and global average.
#include <cstdint>
#include <vector>

#include "tessera/kernels/pooling.hpp"
#include "tessera/nn/layer.hpp"

namespace tessera::nn {

/// Max pooling over a window (padding never wins).
template <Numeric P>
class max_pool : public parameter_free {
public:
    using precision = P;
    using T = typename P::data_type;
    using C = typename P::accumulate_type;
    struct state {
        tensor::shape in;
        activation<P> output, grad_input;
        std::vector<std::uint32_t> argmax;
    };
    explicit max_pool(const kernels::window& g) : m_window(g) {}

    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const { return m_window.output(s, s.c); }
    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {
        const auto o = output_shape(s);
        const double in = static_cast<double>(s.size()), out = static_cast<double>(o.size());
        return {out * m_window.kh * m_window.kw, out, detail::bytes_of(s.size() + o.size(), sizeof(T)),
                detail::bytes_of(s.size() + o.size(), sizeof(T)), 0,
                {pass::elementwise(pass_phase::forward, out * m_window.kh * m_window.kw + out, 1),  // windows read, maxima written
                 pass::elementwise(pass_phase::backward, in + out, 1)},
                // keeps its output and where each maximum came from (argmax, 32 bits per output)
                detail::bytes_of(o.size(), sizeof(T)) + detail::bytes_of(o.size(), sizeof(std::uint32_t))};
    }
    const activation<P>& forward(const activation<P>& x, state& st, const context& ctx) {
        st.in = tensor::shape_of(x);
        detail::ensure_shape(st.output, output_shape(st.in));
        kernels::max_pool_forward(x.data(), st.in, m_window, st.output.data(), st.argmax, ws(ctx));
        return st.output;
    }
    const activation<P>& backward(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        if (want_dx) {
            detail::ensure_shape(st.grad_input, st.in);
            kernels::max_pool_backward(dy.data(), st.in, m_window, st.argmax, st.grad_input.data(), ws(ctx));
        }
        return st.grad_input;
    }

private:
    kernels::window m_window;
    [[nodiscard]] kernels::workspace<C>& ws(const context& ctx) noexcept { return detail::workspace_of(ctx, m_ws); }
    kernels::workspace<C> m_ws;  // when the context gives no shared scratch
};

/// Average pooling (padding counts in the divisor).
template <Numeric P>
class avg_pool : public parameter_free {
public:
    using precision = P;
    using T = typename P::data_type;
    using C = typename P::accumulate_type;
    struct state {
        tensor::shape in;
        activation<P> output, grad_input;
    };
    explicit avg_pool(const kernels::window& g) : m_window(g) {}

    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const { return m_window.output(s, s.c); }
    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {
        const auto o = output_shape(s);
        const double f = static_cast<double>(o.size() * m_window.kh * m_window.kw);
        const double in = static_cast<double>(s.size()), out = static_cast<double>(o.size());
        return {f, f, detail::bytes_of(s.size() + o.size(), sizeof(T)), detail::bytes_of(s.size() + o.size(), sizeof(T)), 0,
                {pass::elementwise(pass_phase::forward, f + out, 1), pass::elementwise(pass_phase::backward, f + in, 1)},
                detail::bytes_of(o.size(), sizeof(T))};  // keeps its output
    }
    const activation<P>& forward(const activation<P>& x, state& st, const context& ctx) {
        st.in = tensor::shape_of(x);
        detail::ensure_shape(st.output, output_shape(st.in));
        kernels::avg_pool_forward(x.data(), st.in, m_window, st.output.data(), ws(ctx), ctx.forward_rounding());
        return st.output;
    }
    const activation<P>& backward(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        if (want_dx) {
            detail::ensure_shape(st.grad_input, st.in);
            kernels::avg_pool_backward(dy.data(), st.in, m_window, st.grad_input.data(), ws(ctx), ctx.backward_rounding());
        }
        return st.grad_input;
    }

private:
    kernels::window m_window;
    [[nodiscard]] kernels::workspace<C>& ws(const context& ctx) noexcept { return detail::workspace_of(ctx, m_ws); }
    kernels::workspace<C> m_ws;  // when the context gives no shared scratch
};

/// Global average pooling: (n, h, w, c) -> (n, 1, 1, c).
template <Numeric P>
class global_avg_pool : public parameter_free {
public:
    using precision = P;
    using T = typename P::data_type;
    using C = typename P::accumulate_type;
    struct state {
        tensor::shape in;
        activation<P> output, grad_input;
    };

    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const { return {s.n, 1, 1, s.c}; }
    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {
        const double n = static_cast<double>(s.size()), means = static_cast<double>(s.n * s.c);
        return {n, n, detail::bytes_of(s.size() + s.n * s.c, sizeof(T)), detail::bytes_of(s.size() + s.n * s.c, sizeof(T)), 0,
                {pass::reduction(pass_phase::forward, n, 1, means), pass::elementwise(pass_phase::backward, n + means, 1)},
                detail::bytes_of(s.n * s.c, sizeof(T))};  // keeps its output
    }
    const activation<P>& forward(const activation<P>& x, state& st, const context& ctx) {
        st.in = tensor::shape_of(x);
        detail::ensure_shape(st.output, output_shape(st.in));
        kernels::global_avg_pool_forward(x.data(), st.in, st.output.data(), ws(ctx), ctx.forward_rounding());
        return st.output;
    }
    const activation<P>& backward(const activation<P>& dy, state& st, const context& ctx, bool want_dx) {
        if (want_dx) {
            detail::ensure_shape(st.grad_input, st.in);
            kernels::global_avg_pool_backward(dy.data(), st.in, st.grad_input.data(), ws(ctx), ctx.backward_rounding());
        }
        return st.grad_input;
    }

private:
    [[nodiscard]] kernels::workspace<C>& ws(const context& ctx) noexcept { return detail::workspace_of(ctx, m_ws); }
    kernels::workspace<C> m_ws;  // when the context gives no shared scratch
};

}  // namespace tessera::nn
