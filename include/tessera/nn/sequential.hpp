#pragma once
// sequential<Layers...>: layers run one after another, each feeding the next.
#include <array>
#include <cstddef>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "tessera/nn/layer.hpp"

namespace tessera::nn {

/// Composition of layers with one precision policy. Parameter names are "<index>.<name>" unless
/// names are given (torchvision-style "conv1", "bn1", ...).
/// @code
///   nn::sequential net(nn::conv2d<P>(1, 16, {3, 3, 1, 1}), nn::batch_norm<P>(16), nn::relu<P>());
/// @endcode
template <Layer... Ls>
class sequential {
    static_assert(sizeof...(Ls) > 0, "tessera::nn::sequential: needs at least one layer");
    using first = std::tuple_element_t<0, std::tuple<Ls...>>;

public:
    using precision = typename first::precision;
    static_assert((std::is_same_v<typename Ls::precision, precision> && ...),
                  "tessera::nn::sequential: every layer must use the same precision policy");
    static constexpr std::size_t size = sizeof...(Ls);
    struct state {
        std::tuple<typename Ls::state...> parts;
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
            nn::cost total;
            ((total += l.cost(cur), cur = l.output_shape(cur)), ...);
            return total;
        }, m_layers);
    }

    const activation<precision>& forward(const activation<precision>& x, state& st, const context& ctx) {
        return forward_from<0>(x, st, ctx);
    }

    const activation<precision>& backward(const activation<precision>& dy, state& st, const context& ctx, bool want_dx) {
        return backward_from<size - 1>(dy, st, ctx, want_dx);
    }

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
    template <class F>
    void visit_each(F&& f) {
        [&]<std::size_t... I>(std::index_sequence<I...>) { (f(std::get<I>(m_layers), I), ...); }
        (std::index_sequence_for<Ls...>{});
    }

    template <std::size_t I>
    const activation<precision>& forward_from(const activation<precision>& x, state& st, const context& ctx) {
        const auto& y = std::get<I>(m_layers).forward(x, std::get<I>(st.parts), ctx);
        if constexpr (I + 1 < size)
            return forward_from<I + 1>(y, st, ctx);
        else
            return y;
    }

    template <std::size_t I>
    const activation<precision>& backward_from(const activation<precision>& dy, state& st, const context& ctx,
                                               bool want_dx) {
        const auto& dx = std::get<I>(m_layers).backward(dy, std::get<I>(st.parts), ctx, I > 0 || want_dx);
        if constexpr (I == 0)
            return dx;
        else
            return backward_from<I - 1>(dx, st, ctx, want_dx);
    }

    std::tuple<Ls...> m_layers;
    std::array<std::string, size> m_names;
};

}  // namespace tessera::nn
