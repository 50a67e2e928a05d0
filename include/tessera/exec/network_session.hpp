#pragma once
// Sessions of unit networks (nn::resnet): the model and its optimizer, cut into the config's stages.
#include <cstddef>
#include <stdexcept>
#include <utility>
#include <vector>

#include "tessera/config/batching.hpp"
#include "tessera/config/config.hpp"
#include "tessera/config/description.hpp"
#include "tessera/config/loss_scaling.hpp"
#include "tessera/exec/session.hpp"
#include "tessera/exec/staged_network.hpp"
#include "tessera/tensor/dense.hpp"

namespace tessera::exec {

namespace detail {

/// The staged network a training session of `net` under configuration `c` runs: cut at
/// settings.first_units (or balanced by FLOPs), the loss scaled as settings or the precision say,
/// recomputation and kernel threads as settings say.
template <UnitNetwork N, StageOptimizer<N> O, class Loss = class_loss<typename N::precision>>
[[nodiscard]] staged_network<N, O, Loss> staged_for_training(const config::description& c, const N& net,
                                                             const O& optimizer, tessera::tensor::shape sample,
                                                             const config::batching& b, const session_options& settings) {
    sample.n = b.micro_batch;
    auto first = settings.first_units.empty() ? balanced_units(net, sample, b.stages) : settings.first_units;
    // Loss scaling from the precision policy: static, or dynamic (the session's schedule then votes
    // on overflow before each step's updates, and every stage skips an overflowing step together).
    loss_scale_rule rule = c.loss_scaling;
    if (settings.dynamic_loss_scaling && *settings.dynamic_loss_scaling != rule.dynamic)
        rule = *settings.dynamic_loss_scaling ? loss_scale_rule::of<config::dynamic_loss_scaling<>>() : loss_scale_rule{};
    if (settings.loss_scale) rule.initial = *settings.loss_scale;
    staged_network<N, O, Loss> model(net, std::move(first), sample, optimizer, rule);
    if (!settings.recompute.empty()) model.set_recompute(settings.recompute);
    if (!settings.recompute_checkpoints.empty()) model.set_recompute_checkpoints(settings.recompute_checkpoints);
    model.set_kernel_threads(settings.kernel_threads_per_ipu, b.ipu_of_stage);
    return model;
}

/// The staged network an inference session of `net` runs: cut as in training, in evaluation mode.
template <UnitNetwork N, StageOptimizer<N> O, class Loss = class_loss<typename N::precision>>
[[nodiscard]] staged_network<N, O, Loss> staged_for_inference(const N& net, const O& optimizer,
                                                              tessera::tensor::shape sample, const config::batching& b,
                                                              const session_options& settings) {
    sample.n = b.micro_batch;
    auto first = settings.first_units.empty() ? balanced_units(net, sample, b.stages) : settings.first_units;
    staged_network<N, O, Loss> model(net, std::move(first), sample, optimizer);
    model.set_mode(nn::mode::eval);  // running statistics, as model.eval() in PyTorch
    model.set_kernel_threads(settings.kernel_threads_per_ipu, b.ipu_of_stage);
    return model;
}

}  // namespace detail

/// A training session of a unit network (nn::resnet) cut into the config's stages — by
/// `settings.first_units`, or balanced by FLOPs — each stage with its own copy of `optimizer`.
/// `sample`: the shape of one sample (its n is ignored; the micro-batch comes from the config/options).
/// The loss: a class per sample (exec::class_loss), or what the last argument's type says
/// (exec::token_loss<P>{}: a token per position, for language models).
/// @code
///   nn::resnet20<> net(3, 10);
///   auto run = exec::training_model<c>(net, optim::sgd({.learning_rate = 0.1}), {1, 32, 32, 3}, {.micro_batch = 16});
///   auto gpt = exec::training_model<c>(nn::make_gpt2<P>(nn::gpt2_spec("tiny")), optim::adamw(), {1, 1, 128, 1},
///                                      {.micro_batch = 8}, {}, exec::token_loss<P>{});
/// @endcode
template <config::Config C, UnitNetwork N, StageOptimizer<N> O,
          StagedLoss<typename N::precision> Loss = class_loss<typename N::precision>>
[[nodiscard]] session<C, staged_network<N, O, Loss>> training_model(const N& net, const O& optimizer,
                                                                     tessera::tensor::shape sample,
                                                                     config::options options = {},
                                                                     session_options settings = {}, Loss = {}) {
    static_assert(C::is_training, "tessera::exec::training_model: the config is for inference (use inference_model)");
    constexpr config::description c = config::description::of<C>();
    const config::batching b = config::make_batching(c, options);
    return session<C, staged_network<N, O, Loss>>(
        detail::staged_for_training<N, O, Loss>(c, net, optimizer, sample, b, settings), options, settings);
}

/// The optimizer of an inference session: inference schedules have no update, so it never steps.
struct no_optimizer {
    template <class S>
    [[noreturn]] void step(S&, double) {
        throw std::logic_error("tessera::exec::no_optimizer: an inference session has no optimizer step");
    }
    [[nodiscard]] std::size_t state_values_per_parameter() const noexcept { return 0; }
};

/// An inference session of a unit network: the config's inference form (G = 1, outputs `all`).
template <config::Config C, UnitNetwork N, StageOptimizer<N> O>
[[nodiscard]] session<typename C::for_inference, staged_network<N, O>> inference_model(
    const N& net, const O& optimizer, tessera::tensor::shape sample, config::options options = {},
    session_options settings = {}) {
    using I = typename C::for_inference;
    options.gradient_accumulation.reset();
    const config::batching b = config::make_batching<I>(options);
    return session<I, staged_network<N, O>>(detail::staged_for_inference(net, optimizer, sample, b, settings), options,
                                            settings);
}

/// An inference session of a unit network without an optimizer (there is nothing to update).
/// @code
///   auto eval = exec::inference_model<cfg>(trained.model().network(), {1, 28, 28, 1}, {.micro_batch = 100});
/// @endcode
template <config::Config C, UnitNetwork N>
[[nodiscard]] session<typename C::for_inference, staged_network<N, no_optimizer>> inference_model(
    const N& net, tessera::tensor::shape sample, config::options options = {}, session_options settings = {}) {
    return inference_model<C>(net, no_optimizer{}, sample, std::move(options), std::move(settings));
}

}  // namespace tessera::exec
