#pragma once
// sequential<Layers...>: layers run one after another, each feeding the next.
#include <array>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tessera/config/error.hpp"
#include "tessera/detail/function_ref.hpp"
#include "tessera/nn/gradient_buffers.hpp"
#include "tessera/nn/layer.hpp"

namespace tessera::nn {

namespace detail {

/// Whether layer A can hand layer B, the layer after it, its own input and a map instead of its
/// output (a batch norm with its ReLU before a convolution: A::forward_map, B::forward_mapped): the
/// output is then never written, nor read back. Where a.maps(ctx) and b.takes_mapped_input(...) say
/// so at run time, sequential runs the two so in forward (backward is each layer's own).
template <class A, class B>
concept maps_into = requires(A& a, B& b, const activation<typename A::precision>& x, typename A::state& sa,
                             typename B::state& sb, const context& ctx, const tensor::shape& s) {
    { a.maps(ctx) } -> std::same_as<bool>;
    { b.takes_mapped_input(s, ctx) } -> std::same_as<bool>;
    b.forward_mapped(x, a.forward_map(x, sa, ctx), sb, ctx);
};

/// Whether layer B, after layer A in forward, can hand A in backward a map instead of its input
/// gradient (a batch norm after a convolution: B::backward_map, A::backward_mapped): that gradient is
/// then never written, nor read back. Where b.maps_gradient(...) and a.takes_mapped_gradient(...) say
/// so at run time, sequential runs the two so in backward, as residual does a block's first two.
template <class A, class B>
concept gradient_maps_into =
    requires(A& a, B& b, const activation<typename A::precision>& dy, typename A::state& sa, typename B::state& sb,
             const context& ctx, const tensor::shape& s) {
        { b.maps_gradient(sb, ctx) } -> std::same_as<bool>;
        { a.takes_mapped_gradient(s, ctx) } -> std::same_as<bool>;
        a.backward_mapped(dy, b.backward_map(dy, sb, ctx), sa, ctx, true);
        a.backward_input_mapped(dy, b.backward_map(dy, sb, ctx), sa, ctx, true);
        { sa.input } -> std::convertible_to<const activation<typename A::precision>*>;
    };

/// Backward through layer a (unit J of a network) and layer b after it (unit J + 1), b handing a its
/// map (gradient_maps_into), each with the context it has alone; null where they cannot at run time
/// (then each runs alone). InputOnly: a's input-gradient half.
template <bool InputOnly, class A, class B>
const activation<typename A::precision>* backward_mapped_pair(A& a, B& b, const activation<typename A::precision>& dy,
                                                              typename A::state& sa, typename B::state& sb,
                                                              const context& ca, const context& cb, bool want_dx) {
    if (sa.input == nullptr || !b.maps_gradient(sb, cb) || !a.takes_mapped_gradient(tensor::shape_of(*sa.input), ca))
        return nullptr;
    const auto map = b.backward_map(dy, sb, cb);
    if constexpr (InputOnly)
        return &a.backward_input_mapped(dy, map, sa, ca, want_dx);
    else
        return &a.backward_mapped(dy, map, sa, ca, want_dx);
}

}  // namespace detail

/// Composition of layers with one precision policy. Parameter names are "<index>.<name>" unless
/// names are given (torchvision-style "conv1", "bn1", ...).
/// @code
///   nn::sequential net(nn::conv2d<P>(1, 16, {3, 3, 1, 1}), nn::batch_norm<P>(16), nn::relu<P>());
/// @endcode
template <Layer... Ls>
class sequential {
    static_assert(sizeof...(Ls) > 0, "tessera::nn::sequential: needs at least one layer");
    using first_layer = std::tuple_element_t<0, std::tuple<Ls...>>;

public:
    using precision = typename first_layer::precision;
    static_assert((std::is_same_v<typename Ls::precision, precision> && ...),
                  "tessera::nn::sequential: every layer must use the same precision policy");
    static constexpr std::size_t size = sizeof...(Ls);
    struct state {
        std::tuple<typename Ls::state...> parts;
        /// The parts' input-gradient buffers, the last part's first (the order backward writes them).
        template <class F>
        void for_each_gradient_buffer(F&& f) {
            [&]<std::size_t... I>(std::index_sequence<I...>) {
                (detail::for_each_gradient_buffer(std::get<sizeof...(Ls) - 1 - I>(parts), f), ...);
            }(std::index_sequence_for<Ls...>{});
        }
    };

    explicit sequential(Ls... layers) : m_layers(std::move(layers)...) {
        for (std::size_t i = 0; i < size; ++i) m_names[i] = std::to_string(i);
    }

    /// Gives the layers names (used in parameter names); returns *this.
    sequential& named(std::array<std::string, size> names) {
        m_names = std::move(names);
        return *this;
    }

    template <std::size_t I>
    [[nodiscard]] auto& get() noexcept {
        return std::get<I>(m_layers);
    }
    template <std::size_t I>
    [[nodiscard]] const auto& get() const noexcept {
        return std::get<I>(m_layers);
    }

    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const {
        return std::apply([&](const auto&... l) {
            tensor::shape cur = s;
            ((cur = l.output_shape(cur)), ...);
            return cur;
        }, m_layers);
    }

    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {
        return std::apply([&](const auto&... l) {
            tensor::shape cur = s;
            nn::cost total{.kept_bytes = 0, .peak_bytes = 0};
            double input = 0;  // the bytes of the running layer's input (the first's is the caller's)
            ((total = total.then(l.cost(cur), input), cur = l.output_shape(cur),
              input = detail::bytes_of(cur.size(), sizeof(typename precision::data_type))), ...);
            return total;
        }, m_layers);
    }

    // Units (the interface exec::staged_network cuts into pipeline stages, as nn::resnet's): each
    // layer is one, named by its name, so a sequential model can be cut between any two layers.

    [[nodiscard]] static constexpr std::size_t units() noexcept { return size; }
    [[nodiscard]] std::string unit_name(std::size_t u) const {
        check_unit(u);
        return m_names[u];
    }
    /// The unit called `name`; throws config::config_error if none is.
    [[nodiscard]] std::size_t unit_index(std::string_view name) const {
        for (std::size_t u = 0; u < size; ++u)
            if (m_names[u] == name) return u;
        throw config::config_error("tessera::nn::sequential: no layer named '" + std::string(name) + "'");
    }
    /// Shape entering unit u for a model input of shape s.
    [[nodiscard]] tensor::shape unit_input_shape(std::size_t u, const tensor::shape& s) const {
        check_unit(u);
        return detail::shape_after_units(*this, u, s);
    }
    [[nodiscard]] tensor::shape unit_output_shape(std::size_t u, const tensor::shape& in) const {
        check_unit(u);
        tensor::shape out{};
        at_unit(u, [&](const auto& layer, auto) { out = layer.output_shape(in); });
        return out;
    }
    /// Cost of unit u when its input has shape `in`.
    [[nodiscard]] nn::cost unit_cost(std::size_t u, const tensor::shape& in) const {
        check_unit(u);
        nn::cost c;
        at_unit(u, [&](const auto& layer, auto) { c = layer.cost(in); });
        return c;
    }
    /// Runs units [first, last) on x (the input of unit `first`); returns the output of unit last-1.
    const activation<precision>& forward_units(std::size_t first, std::size_t last, const activation<precision>& x,
                                               state& st, const context& ctx) {
        check_range(first, last);
        const activation<precision>* cur = &x;
        for (std::size_t u = first; u < last; ++u)
            at_unit(u, [&](auto& layer, auto i) {
                constexpr std::size_t I = decltype(i)::value;
                if constexpr (pairs_at<I>()) {
                    if (u + 1 < last) {  // the pair within the range: unit u's output is nobody else's
                        if (const auto* y = forward_pair<I>(*cur, st, ctx)) {
                            cur = y;
                            ++u;
                            return;
                        }
                    }
                }
                cur = &layer.forward(*cur, std::get<I>(st.parts), ctx.child(u));
            });
        return *cur;
    }
    /// Backward through units [first, last) given the gradient of unit last-1's output; returns the
    /// gradient of unit first's input (computed only when want_dx).
    const activation<precision>& backward_units(std::size_t first, std::size_t last, const activation<precision>& dy,
                                                state& st, const context& ctx, bool want_dx) {
        return backward_units_pass<false>(first, last, dy, st, ctx, want_dx);
    }
    /// The input-gradient half of backward_units (the layers that split keep their weight gradients
    /// for backward_units_weights).
    const activation<precision>& backward_units_input(std::size_t first, std::size_t last, const activation<precision>& dy,
                                                      state& st, const context& ctx, bool want_dx) {
        return backward_units_pass<true>(first, last, dy, st, ctx, want_dx);
    }
    /// The weight-gradient half of backward_units, after backward_units_input on the same state.
    void backward_units_weights(std::size_t first, std::size_t last, state& st, const context& ctx) {
        check_range(first, last);
        for (std::size_t u = last; u-- > first;)
            at_unit(u, [&](auto& layer, auto i) {
                nn::backward_weights(layer, std::get<decltype(i)::value>(st.parts), ctx.child(u));
            });
    }
    /// Parameters of units [first, last), named as visit_parameters names them: f(name, values,
    /// gradients). Every visitor goes through one function_ref, so the walk over the layers is
    /// compiled once per sequential type, not once per visitor.
    template <class F>
    void visit_unit_parameters(std::size_t first, std::size_t last, F&& f, std::string_view prefix = {}) {
        walk_parameters(first, last, parameter_visitor(f), prefix);
    }
    /// Buffers (batch-norm running statistics) of units [first, last): f(name, values).
    template <class F>
    void visit_unit_buffers(std::size_t first, std::size_t last, F&& f, std::string_view prefix = {}) {
        walk_buffers(first, last, buffer_visitor(f), prefix);
    }

    const activation<precision>& forward(const activation<precision>& x, state& st, const context& ctx) {
        return forward_from<0>(x, st, ctx);
    }

    const activation<precision>& backward(const activation<precision>& dy, state& st, const context& ctx, bool want_dx) {
        return backward_from<size - 1>(dy, st, ctx, want_dx);
    }

    const activation<precision>& backward_input(const activation<precision>& dy, state& st, const context& ctx,
                                                bool want_dx) {
        return backward_units_input(0, size, dy, st, ctx, want_dx);
    }
    void backward_weights(state& st, const context& ctx) { backward_units_weights(0, size, st, ctx); }

    template <class F>
    void visit_parameters(F&& f, std::string_view prefix = {}) {
        visit_each([&](auto& l, std::size_t i) { l.visit_parameters(f, detail::join(prefix, m_names[i])); });
    }
    template <class F>
    void visit_buffers(F&& f, std::string_view prefix = {}) {
        visit_each([&](auto& l, std::size_t i) { l.visit_buffers(f, detail::join(prefix, m_names[i])); });
    }
    void initialize(std::mt19937_64& rng) {
        visit_each([&](auto& l, std::size_t) { l.initialize(rng); });
    }

private:
    using parameter_visitor = tessera::detail::function_ref<void(
        std::string_view, std::span<typename precision::weight_type>, std::span<typename precision::accumulate_type>)>;
    using buffer_visitor = tessera::detail::function_ref<void(std::string_view, std::span<typename precision::accumulate_type>)>;

    // Backward through units [first, last): each layer whole, or only its input-gradient half (InputOnly);
    // a batch norm hands the convolution before it its map where both are in the range and can
    // (detail::gradient_maps_into).
    template <bool InputOnly>
    const activation<precision>& backward_units_pass(std::size_t first, std::size_t last, const activation<precision>& dy,
                                                     state& st, const context& ctx, bool want_dx) {
        check_range(first, last);
        const activation<precision>* cur = &dy;
        for (std::size_t u = last; u-- > first;)
            at_unit(u, [&](auto& layer, auto i) {
                constexpr std::size_t I = decltype(i)::value;
                if constexpr (gradient_pairs_at<I>()) {
                    if (u > first) {  // the layer before is in the range: its input gradient is asked for
                        if (const auto* g = detail::backward_mapped_pair<InputOnly>(
                                std::get<I - 1>(m_layers), layer, *cur, std::get<I - 1>(st.parts), std::get<I>(st.parts),
                                ctx.child(u - 1), ctx.child(u), u - 1 > first || want_dx)) {
                            cur = g;
                            --u;
                            return;
                        }
                    }
                }
                cur = &nn::backward_part<InputOnly>(layer, *cur, std::get<I>(st.parts), ctx.child(u), u > first || want_dx);
            });
        return *cur;
    }

    void walk_parameters(std::size_t first, std::size_t last, parameter_visitor f, std::string_view prefix) {
        check_range(first, last);
        for (std::size_t u = first; u < last; ++u)
            at_unit(u, [&](auto& layer, auto) { layer.visit_parameters(f, detail::join(prefix, m_names[u])); });
    }
    void walk_buffers(std::size_t first, std::size_t last, buffer_visitor f, std::string_view prefix) {
        check_range(first, last);
        for (std::size_t u = first; u < last; ++u)
            at_unit(u, [&](auto& layer, auto) { layer.visit_buffers(f, detail::join(prefix, m_names[u])); });
    }

    // The throw apart and [[noreturn]], so that GCC (-O3) sees no read past m_names after a failed check.
    void check_unit(std::size_t u) const {
        if (u >= size) [[unlikely]]
            no_unit(u);
    }
    [[noreturn]] static void no_unit(std::size_t u) {
        throw config::config_error("tessera::nn::sequential: unit " + std::to_string(u) +
                                   " does not exist (the model has " + std::to_string(size) + " layers)");
    }
    void check_range(std::size_t first, std::size_t last) const {
        if (first >= last || last > size)
            throw config::config_error("tessera::nn::sequential: unit range [" + std::to_string(first) + ", " +
                                       std::to_string(last) + ") is empty or past the " + std::to_string(size) +
                                       " layers");
    }
    // f(layer u, std::integral_constant<std::size_t, u>) for a run-time u < size.
    template <class Self, class F>
    static void at_unit_of(Self& self, std::size_t u, F&& f) {
        [&]<std::size_t... I>(std::index_sequence<I...>) {
            (void)((I == u ? (f(std::get<I>(self.m_layers), std::integral_constant<std::size_t, I>{}), true) : false) || ...);
        }(std::index_sequence_for<Ls...>{});
    }
    template <class F>
    void at_unit(std::size_t u, F&& f) { at_unit_of(*this, u, std::forward<F>(f)); }
    template <class F>
    void at_unit(std::size_t u, F&& f) const { at_unit_of(*this, u, std::forward<F>(f)); }

    template <class F>
    void visit_each(F&& f) {
        [&]<std::size_t... I>(std::index_sequence<I...>) { (f(std::get<I>(m_layers), I), ...); }
        (std::index_sequence_for<Ls...>{});
    }

    template <std::size_t I>
    using layer_type = std::tuple_element_t<I, std::tuple<Ls...>>;
    // Whether units I - 1 and I exist and can run as a pair in backward (detail::gradient_maps_into).
    template <std::size_t I>
    static constexpr bool gradient_pairs_at() noexcept {
        if constexpr (I >= 1 && I < size)
            return detail::gradient_maps_into<layer_type<I - 1>, layer_type<I>>;
        else
            return false;
    }
    // Whether units I and I + 1 exist and can run as a pair (detail::maps_into).
    template <std::size_t I>
    static constexpr bool pairs_at() noexcept {
        if constexpr (I + 1 < size)
            return detail::maps_into<layer_type<I>, layer_type<I + 1>>;
        else
            return false;
    }

    // Units I and I + 1 in one forward, I handing I + 1 its input and map (detail::maps_into), each
    // with the context it has alone; null where they cannot at run time (then each runs alone).
    template <std::size_t I>
    const activation<precision>* forward_pair(const activation<precision>& x, state& st, const context& ctx) {
        auto& a = std::get<I>(m_layers);
        auto& b = std::get<I + 1>(m_layers);
        const context ca = ctx.child(I), cb = ctx.child(I + 1);
        if (!a.maps(ca) || !b.takes_mapped_input(a.output_shape(tensor::shape_of(x)), cb)) return nullptr;
        return &b.forward_mapped(x, a.forward_map(x, std::get<I>(st.parts), ca), std::get<I + 1>(st.parts), cb);
    }

    template <std::size_t I>
    const activation<precision>& forward_from(const activation<precision>& x, state& st, const context& ctx) {
        if constexpr (pairs_at<I>()) {
            if (const auto* y = forward_pair<I>(x, st, ctx)) {
                if constexpr (I + 2 < size)
                    return forward_from<I + 2>(*y, st, ctx);
                else
                    return *y;
            }
        }
        const auto& y = std::get<I>(m_layers).forward(x, std::get<I>(st.parts), ctx.child(I));
        if constexpr (I + 1 < size)
            return forward_from<I + 1>(y, st, ctx);
        else
            return y;
    }

    template <std::size_t I>
    const activation<precision>& backward_from(const activation<precision>& dy, state& st, const context& ctx,
                                               bool want_dx) {
        if constexpr (gradient_pairs_at<I>()) {
            if (const auto* g = detail::backward_mapped_pair<false>(std::get<I - 1>(m_layers), std::get<I>(m_layers), dy,
                                                                    std::get<I - 1>(st.parts), std::get<I>(st.parts),
                                                                    ctx.child(I - 1), ctx.child(I), I > 1 || want_dx)) {
                if constexpr (I == 1)
                    return *g;
                else
                    return backward_from<I - 2>(*g, st, ctx, want_dx);
            }
        }
        const auto& dx = std::get<I>(m_layers).backward(dy, std::get<I>(st.parts), ctx.child(I), I > 0 || want_dx);
        if constexpr (I == 0)
            return dx;
        else
            return backward_from<I - 1>(dx, st, ctx, want_dx);
    }

    std::tuple<Ls...> m_layers;
    std::array<std::string, size> m_names;
};

}  // namespace tessera::nn
