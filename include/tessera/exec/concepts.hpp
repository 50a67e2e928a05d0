#pragma once
// What the executor needs from a model split into stages.
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>

#include "tessera/exec/cost.hpp"
#include "tessera/exec/run_result.hpp"
#include "tessera/optim/shard.hpp"
#include "tessera/optim/square_sum.hpp"

namespace tessera::exec {

/// A model cut into stages that the executor can run on emulated IPUs.
///  - `tensor`: activations, gradients and inputs (moved through channels);
///  - `stash`: what a stage's forward keeps for its backward; `label`: a micro-batch's targets;
///  - forward(s, x) -> {y, stash}; loss(y, label) -> {loss, dL/dy} (after the last stage);
///  - backward(s, dL/dy, stash) -> dL/dx, accumulating the stage's weight gradients;
///  - gradients(s): the accumulated gradients (all-reduced in place over the replicas);
///  - update(s, scale): optimizer step with gradients × scale, then zero them;
///  - cost(s): FLOPs and bytes for the modelled clock and the memory plan.
/// Calls on different stages of one object may run concurrently (each stage owns its state).
/// A stage that recomputes (stage_cost::recompute) runs its forward again during backward: through
/// recompute(s, x) -> stash when the model has it (e.g. to leave batch-norm running statistics
/// alone the second time), otherwise through forward, which must then be pure.
template <class M>
concept StagedModel =
    std::copy_constructible<M> &&
    requires(M& m, const M& cm, std::size_t s, typename M::tensor t, typename M::stash st, const typename M::label& y) {
        typename M::tensor;
        typename M::stash;
        typename M::label;
        { cm.stages() } -> std::convertible_to<std::size_t>;
        { m.forward(s, std::move(t)) } -> std::same_as<std::pair<typename M::tensor, typename M::stash>>;
        { m.loss(t, y) } -> std::same_as<std::pair<float, typename M::tensor>>;
        { m.backward(s, std::move(t), std::move(st)) } -> std::same_as<typename M::tensor>;
        { m.gradients(s) } -> std::same_as<std::span<float>>;
        { m.update(s, 1.0f) };
        { cm.cost(s) } -> std::same_as<stage_cost>;
    } && std::is_nothrow_move_constructible_v<typename M::tensor> &&
    std::is_nothrow_move_constructible_v<typename M::label> && std::copy_constructible<typename M::tensor>;

namespace detail {
template <class M>
struct input_of {
    using type = typename M::tensor;
};
template <class M>
    requires requires { typename M::input; }
struct input_of<M> {
    using type = typename M::input;
};
}  // namespace detail

/// What the host sends for a micro-batch: M::input when the model declares one (the IPU of the first
/// stage turns it into a tensor with m.prepare(input), e.g. normalising 8-bit pixels), else M::tensor.
template <class M>
using input_t = typename detail::input_of<M>::type;

/// A staged model whose inputs the first stage's IPU prepares (see input_t).
template <class M>
concept PreparedInputModel = requires(M& m, typename M::input x) {
    { m.prepare(std::move(x)) } -> std::same_as<typename M::tensor>;
} && std::is_nothrow_move_constructible_v<typename M::input>;

/// A staged model with dynamic loss scaling. When the schedule checks for overflow
/// (schedule_request::check_overflow), every IPU of a replica reports whether any of its stages'
/// accumulated (all-reduced) gradients is not finite; if one is, every stage calls skip_update(s)
/// instead of update(s, scale): the gradients are zeroed without a step and the loss scale is
/// lowered, on every stage alike. Models without these members always update.
template <class M>
concept OverflowCheckedModel = StagedModel<M> && requires(M& m, std::size_t s) {
    { m.gradients_finite(s) } -> std::convertible_to<bool>;
    m.skip_update(s);
};

/// A staged model that clips by the global gradient norm (optim's max_grad_norm). When the schedule
/// asks (schedule_request::gradient_norm), each IPU adds gradient_squares(s, scale) of its stages
/// (exact: optim::square_sum) into the vote, and gives the total to set_gradient_squares(s, total)
/// of each of them before their updates: every stage clips with the norm over all of them.
template <class M>
concept NormClippedModel = StagedModel<M> && requires(M& m, std::size_t s, const optim::square_sum& total) {
    { m.gradient_squares(s, 1.0f) } -> std::same_as<optim::square_sum>;
    m.set_gradient_squares(s, total);
};

/// A staged model with a table tied between stages (GPT-2's embedding and head). When the schedule
/// asks (schedule_request::tied_table), each IPU adds add_tied_gradient(s, sum) of its stages into a
/// buffer of tied_elements() zeros, the vote sums the buffers, and set_tied_gradient(s, sum) gives
/// each copy the total, before the overflow check, the gradient norm and the updates.
template <class M>
concept TiedStagesModel = StagedModel<M> && requires(M& m, const M& cm, std::size_t s, std::span<float> sum) {
    { cm.tied_elements() } -> std::convertible_to<std::size_t>;
    m.add_tied_gradient(s, sum);
    m.set_tied_gradient(s, std::span<const float>(sum));
};

/// A staged model whose replicas can each keep and step a shard of the optimiser state
/// (session_options::optimizer_sharding; staged_network is one): shard_optimizer_state(index, count)
/// makes it a replica's model, optimizer_shard(s) names the elements of stage s's weights it updates
/// (reduce_scatter brings their gradient sums), weights(s) / put_weights(s) expose the stage's
/// weights as float for the all-gather, and gather_optimizer_state(replicas) unshards a copy.
template <class M>
concept ShardedOptimizerModel =
    StagedModel<M> && requires(M& m, const M& cm, std::size_t s, std::span<const M> replicas) {
        m.shard_optimizer_state(s, s);
        { cm.optimizer_shards() } -> std::convertible_to<std::size_t>;
        { cm.optimizer_shard(s) } -> std::same_as<optim::element_range>;
        { m.weights(s) } -> std::same_as<std::span<float>>;
        m.put_weights(s);
        m.gather_optimizer_state(replicas);
    };

/// A staged model whose 16-bit activations can round stochastically (session_options::
/// stochastic_rounding; staged_network is one): set_stochastic_rounding(seed, replica) turns it on
/// for replica `replica` of them all; forward(s, x, m), recompute(s, x, m) and loss(y, t, m) take the
/// micro-batch's index in the step, which keys the random bits with the step and the replica.
template <class M>
concept StochasticRoundingModel =
    StagedModel<M> && requires(M& m, std::size_t s, typename M::tensor t, const typename M::label& y) {
        m.set_stochastic_rounding(std::uint64_t{}, s);
        { m.forward(s, std::move(t), s) } -> std::same_as<std::pair<typename M::tensor, typename M::stash>>;
        { m.loss(t, y, s) } -> std::same_as<std::pair<float, typename M::tensor>>;
    };

/// A staged model whose backward pass splits into the input gradient and the weight gradient, as
/// zero-bubble schedules run them (opcode::bwd, then opcode::bwd_weights): backward_input(s, dy, st)
/// returns the gradient of the stage's input and keeps in the stash what backward_weights(s, st)
/// needs; that call accumulates the rest of the stage's gradients and frees the stash. A model
/// without these runs its whole backward at bwd, and bwd_weights does nothing.
template <class M>
concept SplitBackwardModel = StagedModel<M> && requires(M& m, std::size_t s, typename M::tensor t, typename M::stash st) {
    { m.backward_input(s, std::move(t), st) } -> std::same_as<typename M::tensor>;
    m.backward_weights(s, std::move(st));
};

/// A staged model that scores the last stage's output against its label (top-1 hits over the real
/// samples): training calls then return a score beside each loss, selected by the same output mode.
template <class M>
concept ScoredModel = StagedModel<M> && requires(const M& m, const typename M::tensor& y, const typename M::label& t) {
    { m.score(y, t) } -> std::same_as<top1_score>;
};

/// Supplies micro-batch `micro_batch` of device iteration `iteration` for `replica`:
/// returns {input, label} (the input as input_t<M>). Called on the host feeder threads, one per replica.
template <class F, class M>
concept MicroBatchFeed = StagedModel<M> && requires(F& f, std::size_t r, std::size_t d, std::size_t m) {
    { f(r, d, m) } -> std::convertible_to<std::pair<input_t<M>, typename M::label>>;
};

/// The cost model of a staged model: its stages' costs at `bits`-bit arithmetic.
template <StagedModel M>
[[nodiscard]] cost_model costs_of(const M& model, int bits = 32, std::size_t label_bytes = 0) {
    cost_model c;
    for (std::size_t s = 0; s < model.stages(); ++s) c.stages.push_back(model.cost(s));
    c.bits = bits;
    c.label_bytes = label_bytes;
    return c;
}

}  // namespace tessera::exec
