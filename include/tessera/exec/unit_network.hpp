#pragma once
// What a network must offer to be cut into pipeline stages, and the optimizer each stage steps.
#include <concepts>
#include <cstddef>
#include <string>
#include <utility>

#include "tessera/nn/layer.hpp"
#include "tessera/optim/parameters.hpp"
#include "tessera/tensor/dense.hpp"

namespace tessera::exec {

/// A network made of units that can run any contiguous range of them (nn::resnet: stem, blocks, head),
/// with shape inference and a cost per unit.
template <class N>
concept UnitNetwork = nn::Numeric<typename N::precision> && std::copy_constructible<N> &&
                      std::default_initializable<typename N::state> &&
                      requires(N& n, const N& cn, std::size_t u, const tessera::tensor::shape& s,
                               const nn::activation<typename N::precision>& x, typename N::state& st,
                               const nn::context& ctx) {
                          { cn.units() } -> std::convertible_to<std::size_t>;
                          { cn.unit_name(u) } -> std::convertible_to<std::string>;
                          { cn.unit_input_shape(u, s) } -> std::same_as<tessera::tensor::shape>;
                          { cn.unit_output_shape(u, s) } -> std::same_as<tessera::tensor::shape>;
                          { cn.unit_cost(u, s) } -> std::same_as<nn::cost>;
                          { n.forward_units(u, u, x, st, ctx) } -> std::same_as<const nn::activation<typename N::precision>&>;
                          { n.backward_units(u, u, x, st, ctx, true) } -> std::same_as<const nn::activation<typename N::precision>&>;
                      };

/// A unit network whose backward splits into the input gradient and the weight gradient
/// (nn::SplitBackwardLayer for a range of units): what zero-bubble pipelines run as B and W.
template <class N>
concept SplitBackwardNetwork =
    UnitNetwork<N> && requires(N& n, std::size_t u, const nn::activation<typename N::precision>& dy, typename N::state& st,
                               const nn::context& ctx) {
        { n.backward_units_input(u, u, dy, st, ctx, true) } -> std::same_as<const nn::activation<typename N::precision>&>;
        n.backward_units_weights(u, u, st, ctx);
    };

/// A unit network with a table used twice (a language model's embedding and its tied head): tied()
/// says whether it is, tie_gradients() adds the two uses' gradients before an update, tie_weights()
/// makes the second copy the first's again after it, and tied_copy() names the second copy's
/// gradient (its data), which the global gradient norm leaves out (nn::transformer).
template <class N>
concept TiedNetwork = UnitNetwork<N> && requires(N& n, const N& cn) {
    { cn.tied() } -> std::convertible_to<bool>;
    n.tie_gradients();
    n.tie_weights();
    { n.tied_copy() } -> std::convertible_to<const void*>;
};

/// The parameters of units [first, last) of a network, as a parameter set an optimizer can step
/// (optim::unit_range over a UnitNetwork).
template <UnitNetwork N>
using unit_parameters = optim::unit_range<N>;

/// An optimizer for one stage: step(parameters, gradient scale) updates the values from the gradients.
template <class O, class N>
concept StageOptimizer = std::copy_constructible<O> && requires(O& o, unit_parameters<N>& p, double scale) {
    o.step(p, scale);
};

}  // namespace tessera::exec
