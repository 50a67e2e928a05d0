#pragma once
// A network of units (nn::resnet) cut into pipeline stages: the StagedModel the executor runs.
#include <algorithm>
#include <concepts>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/config/error.hpp"
#include "tessera/config/loss_scaling.hpp"
#include "tessera/exec/activation_rounding.hpp"
#include "tessera/exec/cost.hpp"
#include "tessera/exec/host_input.hpp"
#include "tessera/exec/ipu_kernel_pools.hpp"
#include "tessera/exec/loss_scale_rule.hpp"
#include "tessera/exec/partition.hpp"
#include "tessera/exec/recomputation.hpp"
#include "tessera/exec/run_result.hpp"
#include "tessera/exec/spare_pool.hpp"
#include "tessera/exec/staged_activation.hpp"
#include "tessera/exec/staged_loss.hpp"
#include "tessera/exec/unit_stage_cost.hpp"
#include "tessera/exec/non_finite_loss.hpp"
#include "tessera/exec/unit_network.hpp"
#include "tessera/kernels/loss.hpp"
#include "tessera/kernels/thread_pool.hpp"
#include "tessera/nn/layer.hpp"
#include "tessera/nn/loss.hpp"
#include "tessera/optim/shard.hpp"
#include "tessera/optim/clip.hpp"
#include "tessera/optim/square_sum.hpp"
#include "tessera/tensor/dense.hpp"

namespace tessera::exec {

/// Stages of a UnitNetwork with a loss (Loss: exec::class_loss, a class per sample, the default;
/// exec::token_loss, a token per position) and one optimizer per stage. Satisfies StagedModel. A
/// network with a tied table (nn::transformer's head: its embedding on stage 0, its decoder on the
/// last) has its two copies' gradients added once a step, after the all-reduce, in the schedule's
/// vote (add_tied_gradient, set_tied_gradient), and both copies are stepped under the table's name,
/// so that they take the same update, stochastic rounding included. In training, every micro-batch's
/// context carries a dropout stream (set_dropout).
/// @code
///   nn::resnet20<> net(3, 10);
///   auto model = exec::staged_network(net, exec::balanced_units(net, {32, 32, 32, 3}, 2), {32, 32, 32, 3}, sgd);
/// @endcode
template <UnitNetwork N, StageOptimizer<N> O, StagedLoss<typename N::precision> Loss = class_loss<typename N::precision>>
class staged_network {
public:
    using precision = typename N::precision;
    /// An activation with its micro-batch's sequence mask, which every stage's context reads.
    using tensor = staged_activation<precision>;
    using loss_type = Loss;
    using label = typename Loss::label;
    using input = host_input<precision>;  ///< what the host sends: values, or 8-bit pixels (see prepare)
    struct stage_state {
        tensor input;                // kept alive until backward, as nn's layers require
        typename N::state state;
        tessera::tensor::rounding rounding{};  // the micro-batch's, for its backward
        kernels::dropout_stream dropout{};     // likewise (a recomputed forward draws the same masks)
        tensor grad_output;  // backward_input to backward_weights: the gradient the weight gradients read
        recomputed_segments<N> recomputed{};  // a recomputing stage's checkpoints and, split, its segments
    };
    // A stable address (layer states point at their inputs); dropped, it goes back to the stage's
    // pool of spare states (m_spare).
    using stash = typename spare_pool<stage_state>::handle;
    static_assert(std::is_same_v<typename precision::accumulate_type, float>,
                  "tessera::exec::staged_network: gradients are all-reduced as float (accumulate_type must be float)");

    /// first_units[s]: the first unit of stage s (first_units[0] == 0, increasing);
    /// input_shape: the shape of one micro-batch entering the network.
    /// loss_scale: the loss gradient is multiplied by it and the update divides it out again
    /// (static loss scaling for 16-bit activations).
    staged_network(N net, std::vector<std::size_t> first_units, tessera::tensor::shape input_shape, O optimizer,
                   double loss_scale = 1.0)
        : staged_network(std::move(net), std::move(first_units), input_shape, std::move(optimizer),
                         loss_scale_rule{.initial = loss_scale}) {}

    /// With a loss-scaling rule: dynamic scaling skips overflowing steps when the schedule votes
    /// (exec::schedule_request::check_overflow; sessions ask for it from the config).
    staged_network(N net, std::vector<std::size_t> first_units, tessera::tensor::shape input_shape, O optimizer,
                   loss_scale_rule scaling)
        : m_net(std::move(net)), m_first(std::move(first_units)), m_input(input_shape), m_rule(scaling),
          m_optimizers(m_first.size(), optimizer), m_flat(m_first.size()), m_gathered(m_first.size(), 0),
          m_flat_weights(m_first.size()), m_spare(m_first.size()),
          m_scale(m_first.size(), scaling.initial), m_good_steps(m_first.size(), 0), m_skipped(m_first.size(), 0),
          m_norm(m_first.size()), m_tie_given(m_first.size(), 0) {
        if (!(scaling.initial > 0) || !std::isfinite(scaling.initial))
            throw config::config_error("tessera::exec::staged_network: loss scale must be positive and finite, got " +
                                       std::to_string(scaling.initial));
        if (scaling.dynamic && (!(scaling.factor > 1) || scaling.growth_interval == 0))
            throw config::config_error("tessera::exec::staged_network: dynamic loss scaling needs factor > 1 and "
                                       "growth_interval >= 1, got " + std::to_string(scaling.factor) + " and " +
                                       std::to_string(scaling.growth_interval));
        if (m_first.empty() || m_first.front() != 0)
            throw config::config_error("tessera::exec::staged_network: stage 0 must start at unit 0");
        // Shape inference through every unit now: a wrong sample shape fails at compilation, not in a worker.
        (void)m_net.output_shape(m_input);
        for (std::size_t s = 1; s < m_first.size(); ++s)
            if (m_first[s] <= m_first[s - 1] || m_first[s] >= m_net.units())
                throw config::config_error("tessera::exec::staged_network: stage " + std::to_string(s) +
                                           " starts at unit " + std::to_string(m_first[s]) +
                                           " (stages need increasing first units below " +
                                           std::to_string(m_net.units()) + ")");
        if constexpr (TiedNetwork<N>)
            if (m_net.tied())
                m_net.visit_unit_parameters(0, 1, [&, first = true](std::string_view name, auto, auto) mutable {
                    if (first) m_tied_name = std::string(name);  // the table, the embedding's first parameter
                    first = false;
                });
        visit_tied(0, [&](std::size_t, auto grad) { m_tied_elements = grad.size(); });
        // A network of shapes alone has no gradients to visit: its table's size, for the dry run's vote.
        if constexpr (requires(const N& n) { { n.tied_table_elements() } -> std::convertible_to<std::size_t>; })
            if (m_tied_elements == 0) m_tied_elements = m_net.tied_table_elements();
        // Until set_kernel_threads says which IPU runs which stage: each stage a scratch of its own.
        std::vector<std::size_t> own(m_first.size());
        std::iota(own.begin(), own.end(), std::size_t{0});
        m_pools = ipu_kernel_pools(1, std::move(own));
    }

    [[nodiscard]] std::size_t stages() const noexcept { return m_first.size(); }
    [[nodiscard]] std::size_t first_unit(std::size_t s) const { return m_first.at(s); }
    [[nodiscard]] std::size_t last_unit(std::size_t s) const {
        return s + 1 < m_first.size() ? m_first[s + 1] : m_net.units();
    }
    /// Training (batch statistics, the default) or evaluation (running statistics) for every stage.
    void set_mode(nn::mode m) noexcept { m_context.mode = m; }
    [[nodiscard]] nn::mode mode() const noexcept { return m_context.mode; }
    /// Runs each stage's kernels on `threads` threads of its IPU (ipu_of_stage[s]: the IPU of stage s):
    /// the IPU's own thread and a pool of threads - 1 workers per IPU, for machines with more cores
    /// than emulated IPUs. Results are bit-identical to one thread (the kernels' sums do not depend
    /// on the thread count). Sessions set it from session_options::kernel_threads_per_ipu.
    void set_kernel_threads(std::size_t threads, std::vector<std::size_t> ipu_of_stage) {
        if (ipu_of_stage.size() != m_first.size())
            throw config::config_error("tessera::exec::staged_network::set_kernel_threads: " +
                                       std::to_string(ipu_of_stage.size()) + " IPUs for " +
                                       std::to_string(m_first.size()) + " stages");
        m_pools = ipu_kernel_pools(threads, std::move(ipu_of_stage));
    }
    [[nodiscard]] std::size_t kernel_threads() const noexcept { return m_pools.threads(); }
    /// Sets every stage's optimizer's learning rate.
    void set_learning_rate(double lr)
        requires requires(O& o) { o.set_learning_rate(lr); }
    {
        for (auto& o : m_optimizers) o.set_learning_rate(lr);
    }
    /// Every stage's optimizer seen as one, for checkpoints (optim::save_checkpoint, load_checkpoint):
    /// its state is named "stage<s>.<name>", its step count is stage 0's.
    class stage_optimizers {
    public:
        explicit stage_optimizers(staged_network& net) noexcept : m_net(&net) {}
        template <class F>
        void visit_state(F&& f) {
            for (std::size_t s = 0; s < m_net->m_optimizers.size(); ++s)
                if constexpr (requires(O& o) { o.visit_state(f); })
                    m_net->m_optimizers[s].visit_state([&](std::string_view name, std::span<float> v) {
                        f("stage" + std::to_string(s) + "." + std::string(name), v);
                    });
        }
        [[nodiscard]] std::uint64_t steps() const {
            if constexpr (requires(const O& o) { o.steps(); })
                return m_net->m_optimizers.front().steps();
            else
                return 0;
        }
        void set_steps(std::uint64_t n) {
            if constexpr (requires(O& o) { o.set_steps(n); })
                for (auto& o : m_net->m_optimizers) o.set_steps(n);
        }
        template <class S>
        void prepare(S&) {
            if constexpr (requires(O& o, unit_parameters<N>& p, optim::element_range r) { o.prepare(p, r); })
                for (std::size_t s = 0; s < m_net->m_optimizers.size(); ++s) {
                    unit_parameters<N> p(m_net->m_net, m_net->first_unit(s), m_net->last_unit(s));
                    m_net->m_optimizers[s].prepare(p, m_net->optimizer_shard(s));
                }
            else if constexpr (requires(O& o, unit_parameters<N>& p) { o.prepare(p); })
                for (std::size_t s = 0; s < m_net->m_optimizers.size(); ++s) {
                    unit_parameters<N> p(m_net->m_net, m_net->first_unit(s), m_net->last_unit(s));
                    m_net->m_optimizers[s].prepare(p);
                }
        }

    private:
        staged_network* m_net;
    };
    [[nodiscard]] stage_optimizers optimizers() noexcept { return stage_optimizers(*this); }
    /// The loss scaling state of each stage: scale, clean steps since the last change, skipped steps.
    struct scaling_state {
        std::vector<double> scale;
        std::vector<std::size_t> good_steps, skipped;
    };
    [[nodiscard]] scaling_state loss_scaling_state() const { return {m_scale, m_good_steps, m_skipped}; }
    void set_loss_scaling_state(const scaling_state& st) {
        if (st.scale.size() != m_scale.size() || st.good_steps.size() != m_scale.size() || st.skipped.size() != m_scale.size())
            throw config::config_error("tessera::exec::staged_network: loss scaling state of " +
                                       std::to_string(st.scale.size()) + " stages for " + std::to_string(m_scale.size()));
        m_scale = st.scale, m_good_steps = st.good_steps, m_skipped = st.skipped;
    }

    /// The loss scale of the next step (every stage holds the same value between steps).
    [[nodiscard]] double loss_scale() const noexcept { return m_scale.back(); }
    /// Steps skipped because a gradient overflowed (dynamic loss scaling).
    [[nodiscard]] std::size_t skipped_steps() const noexcept { return m_skipped.back(); }
    [[nodiscard]] const loss_scale_rule& loss_scaling() const noexcept { return m_rule; }
    [[nodiscard]] N& network() noexcept { return m_net; }
    [[nodiscard]] const N& network() const noexcept { return m_net; }
    /// The input shape the model is compiled for: cost() counts its micro-batch (n), and a forward
    /// takes up to that many samples.
    [[nodiscard]] const tessera::tensor::shape& input_shape() const noexcept { return m_input; }
    /// Compiles the model for micro-batches of `n` samples, keeping its weights, stages and
    /// recomputation: what a search over micro-batch sizes asks of one network, where a model per
    /// size would copy the weights each time. Not while a session runs the model.
    void set_micro_batch(std::size_t n) {
        if (n == 0)
            throw config::config_error("tessera::exec::staged_network::set_micro_batch: a micro-batch needs at least "
                                       "one sample, got 0");
        m_input.n = n;
    }

    /// Takes other's training state: the network's weights and buffers (batch-norm running
    /// statistics), the optimizers' state and the loss scale; keeps how this model runs (mode,
    /// kernel threads, recomputation). Sessions move weights between host and device with it, so a
    /// replica keeps its session's options. The two must be cut into the same stages.
    void assign_state(const staged_network& other) {
        if (other.m_first != m_first)
            throw config::config_error("tessera::exec::staged_network::assign_state: the models are cut into " +
                                       std::to_string(other.m_first.size()) + " and " + std::to_string(m_first.size()) +
                                       " stages at different units");
        if (other.m_shard_count > 1 && (other.m_shard_count != m_shard_count || other.m_shard_index != m_shard_index))
            throw config::config_error("tessera::exec::staged_network::assign_state: the other model keeps shard " +
                                       std::to_string(other.m_shard_index) + " of " + std::to_string(other.m_shard_count) +
                                       " of the optimiser state (gather it first: gather_optimizer_state)");
        m_net = other.m_net;
        m_optimizers = other.m_optimizers;
        if (m_shard_count > 1 && other.m_shard_count == 1) keep_own_shards();  // a replica takes its part
        m_scale = other.m_scale;
        m_good_steps = other.m_good_steps;
        m_skipped = other.m_skipped;
    }

    /// Rounds the 16-bit activations and activation gradients of training stochastically, as the IPU
    /// does with stochastic rounding on: micro-batch m of step t draws micro_batch_rounding(seed,
    /// replica, t, m), t counting the optimiser's steps and the skipped ones (so a resumed run draws
    /// what an unbroken one draws). `replica` counts over every process. Evaluation (nn::mode::eval)
    /// rounds to nearest. config_error when activations are not 16-bit or the optimiser counts no steps.
    void set_stochastic_rounding(std::uint64_t seed, std::size_t replica) {
        if constexpr (!std::is_same_v<typename precision::data_type, tessera::half>)
            throw config::config_error("tessera::exec::staged_network::set_stochastic_rounding: activations are stored "
                                       "in " + std::to_string(8 * sizeof(typename precision::data_type)) +
                                       "-bit floats, not halves: nothing rounds to 16 bits (use 16-bit data, e.g. 16.16)");
        else if constexpr (!requires(const O& o) { o.steps(); })
            throw config::config_error("tessera::exec::staged_network::set_stochastic_rounding: the optimiser counts no "
                                       "steps (steps()), which key the random bits");
        m_rounding_seed = seed;
        m_rounding_replica = replica;
    }
    /// The seed of stochastic rounding of activations, if set_stochastic_rounding was called.
    [[nodiscard]] std::optional<std::uint64_t> stochastic_rounding() const noexcept { return m_rounding_seed; }

    /// Makes this model replica `replica` (over every process) of a run whose steps take
    /// `micro_batches` micro-batches a replica (G), its dropout drawing from `seed`: micro-batch m of
    /// a step draws the stream of its samples' place in the step's combined batch,
    /// ((replica · G + m) · micro-batch size onwards; kernels::dropout_stream), so R replicas and one
    /// replica with R × G micro-batches draw the same masks. Until called: seed 0, replica 0, and
    /// micro-batch m at m · micro-batch size. Sessions call it (session_options::dropout_seed).
    void set_dropout(std::uint64_t seed, std::size_t replica, std::size_t micro_batches) {
        if (micro_batches == 0)
            throw config::config_error("tessera::exec::staged_network::set_dropout: a step of 0 micro-batches");
        m_dropout = {seed, replica, micro_batches};
    }

    /// Makes this model replica `index` of `count` whose optimiser state is sharded (PopTorch's
    /// replicated tensor sharding, ZeRO stage 1): of each stage's weights, counted in visiting order,
    /// it keeps the optimiser state of shard `index` of `count` (optim::shard_of) and updates those
    /// alone; the executor's reduce_scatter brings it the sums of their gradients and its all_gather
    /// the other replicas' updated weights. Any state it holds is cut to its shard. The optimiser
    /// must step shards (optim::sgd and optim::adamw do): otherwise config_error.
    void shard_optimizer_state(std::size_t index, std::size_t count) {
        if (count == 0 || index >= count)
            throw config::config_error("tessera::exec::staged_network::shard_optimizer_state: shard " +
                                       std::to_string(index) + " of " + std::to_string(count));
        if (m_shard_count > 1)
            throw config::config_error("tessera::exec::staged_network::shard_optimizer_state: already shard " +
                                       std::to_string(m_shard_index) + " of " + std::to_string(m_shard_count));
        if constexpr (!requires(O& o, unit_parameters<N>& p, optim::element_range r, kernels::parallelism par,
                                std::span<const O* const> parts) {
                          o.step(p, 1.0, par, r);
                          o.keep_shard(p, r);
                          o.gather_shards(p, parts);
                      }) {
            if (count > 1)
                throw config::config_error("tessera::exec::staged_network::shard_optimizer_state: this optimiser "
                                           "cannot step a shard of the weights (it needs step(params, scale, "
                                           "parallelism, element_range), keep_shard and gather_shards, as optim::sgd has)");
        }
        m_shard_index = index;
        m_shard_count = count;
        m_shards.clear();
        for (std::size_t s = 0; s < stages(); ++s) {
            unit_parameters<N> p(m_net, first_unit(s), last_unit(s));
            m_shards.push_back(optim::shard_of(optim::parameter_count(p), index, count));
        }
        if (count > 1) keep_own_shards();
    }
    /// How many replicas share the optimiser state (1: not sharded), and which of them this is.
    [[nodiscard]] std::size_t optimizer_shards() const noexcept { return m_shard_count; }
    [[nodiscard]] std::size_t optimizer_shard_index() const noexcept { return m_shard_index; }
    /// The elements of stage s's weights (visiting order) whose optimiser state this replica keeps.
    [[nodiscard]] optim::element_range optimizer_shard(std::size_t s) const {
        return m_shard_count > 1 ? m_shards.at(s) : optim::element_range{};
    }
    /// Takes the optimiser state of every shard from `replicas` (each replica of a sharded run, in
    /// shard order, count of them): this model then holds the whole state, unsharded, as a run
    /// without sharding would have it (for checkpoints and for the host's copy of the weights).
    void gather_optimizer_state(std::span<const staged_network> replicas) {
        if (replicas.empty() || replicas.size() != replicas.front().m_shard_count)
            throw config::config_error("tessera::exec::staged_network::gather_optimizer_state: " +
                                       std::to_string(replicas.size()) + " replicas for " +
                                       std::to_string(replicas.empty() ? 0 : replicas.front().m_shard_count) + " shards");
        for (std::size_t r = 0; r < replicas.size(); ++r)
            if (replicas[r].m_shard_index != r || replicas[r].m_first != m_first)
                throw config::config_error("tessera::exec::staged_network::gather_optimizer_state: replica " +
                                           std::to_string(r) + " keeps shard " + std::to_string(replicas[r].m_shard_index) +
                                           " or is cut into other stages");
        if constexpr (requires(O& o, unit_parameters<N>& p, std::span<const O* const> parts) { o.gather_shards(p, parts); }) {
            for (std::size_t s = 0; s < stages(); ++s) {
                std::vector<const O*> parts;
                for (const auto& r : replicas) parts.push_back(&r.m_optimizers[s]);
                unit_parameters<N> p(m_net, first_unit(s), last_unit(s));
                m_optimizers[s].gather_shards(p, std::span<const O* const>(parts));
            }
        }
        m_shard_index = 0;
        m_shard_count = 1;
        m_shards.clear();
    }
    /// Stage s's weights as float, gathered into one buffer (for the all-gather of a sharded
    /// optimiser state); put_weights(s) stores them back (exactly: 16-bit weights widen and narrow
    /// without loss).
    std::span<float> weights(std::size_t s) {
        auto& flat = m_flat_weights.at(s);
        flat.clear();
        unit_parameters<N> p(m_net, first_unit(s), last_unit(s));
        p.visit_parameters([&](std::string_view, auto value, auto) {
            for (const auto v : value) flat.push_back(static_cast<float>(v));
        });
        return flat;
    }
    void put_weights(std::size_t s) {
        const auto& flat = m_flat_weights.at(s);
        std::size_t k = 0;
        unit_parameters<N> p(m_net, first_unit(s), last_unit(s));
        p.visit_parameters([&](std::string_view, auto value, auto) {
            using W = typename decltype(value)::value_type;
            for (auto& v : value) v = static_cast<W>(flat.at(k++));
        });
    }

    /// Runs stage s on micro-batch `micro_batch` of the step, of any size from 0 to the compiled one (a
    /// short one is the padded tail of an epoch: batch statistics over its real samples only). An
    /// empty micro-batch (all padding) does not run the network: its output is empty and no running
    /// statistic moves. The micro-batch's index keys stochastic rounding (set_stochastic_rounding).
    std::pair<tensor, stash> forward(std::size_t s, tensor x, std::size_t micro_batch = 0) {
        return run_forward(s, std::move(x), micro_batch_context(s, micro_batch));
    }

    /// Stages that stash only their input and recompute their forward during backward (PopTorch's
    /// RecomputeAll within a stage): less activation memory, more FLOPs, the same results.
    void set_recompute(std::vector<bool> stages) { m_recompute.set_stages(std::move(stages), m_first.size()); }
    /// Recomputation checkpoints (PopTorch's poptorch.recomputationCheckpoint on a unit's input): a
    /// stage holding unit u (not as its first) stashes u's input beside its own and recomputes
    /// during its backward one segment between checkpoints at a time, so it holds the checkpoints of
    /// every micro-batch in flight and the activations of one segment; results are the same as
    /// without. A checkpoint at a stage's first unit changes nothing (the input is stashed anyway).
    void set_recompute_checkpoints(std::vector<std::size_t> units) {
        m_recompute.set_checkpoints(std::move(units), m_net.units());
    }
    [[nodiscard]] const std::vector<std::size_t>& recompute_checkpoints() const noexcept {
        return m_recompute.checkpoints();
    }
    /// Whether stage s recomputes its forward during backward (set_recompute, or a checkpoint inside it).
    [[nodiscard]] bool recomputes(std::size_t s) const { return m_recompute.recomputes(s, first_unit(s), last_unit(s)); }

    /// Mean cross-entropy over the real samples and its gradient × loss scale (zero for padded samples).
    /// No real sample (an empty micro-batch, or one of padding only): loss 0 and a zero gradient.
    /// The loss of a micro-batch and its gradient. A loss that is not finite throws non_finite_loss
    /// unless the loss scaling is dynamic (then the step's overflow vote skips it).
    std::pair<float, tensor> loss(const tensor& logits, const label& labels, std::size_t micro_batch = 0) {
        const nn::context ctx = micro_batch_context(stages() - 1, micro_batch);
        auto result = loss_unchecked(logits, labels, loss_gradient_rounding(ctx.rounding));
        if (!std::isfinite(result.first) && !m_rule.dynamic) [[unlikely]]
            throw non_finite_loss("tessera::exec::staged_network: the loss of a micro-batch of " +
                                  std::to_string(m_loss.samples(labels)) + " samples is " + std::to_string(result.first) +
                                  " (not finite): training would go on with garbage weights; lower the learning "
                                  "rate, check the data, or use dynamic loss scaling to skip such steps");
        return result;
    }

private:
    std::pair<float, tensor> loss_unchecked(const tensor& logits, const label& labels,
                                            const tessera::tensor::rounding& rounding) {
        return m_loss.compute(logits, labels, m_scale.back(), rounding);
    }

public:
    /// Top-1 hits of the logits over what the loss counts (real samples, or labelled positions): a ScoredModel.
    [[nodiscard]] top1_score score(const tensor& logits, const label& labels) const { return m_loss.score(logits, labels); }

    /// Accumulates the stage's weight gradients; an empty micro-batch adds nothing and returns an empty gradient.
    tensor backward(std::size_t s, tensor dy, stash st) {
        if (std::optional<tensor> empty = empty_backward("backward", s, dy, *st)) return std::move(*empty);
        if (recomputes(s))
            return m_recompute.backward<false>(m_net, first_unit(s), last_unit(s), dy, st->input, st->recomputed,
                                               backward_context(s, *st), s > 0);
        const auto& dx = m_net.backward_units(first_unit(s), last_unit(s), dy, st->state, backward_context(s, *st), s > 0);
        return s > 0 ? tensor(dx) : tensor{};
    }

    /// The input-gradient half of backward (zero-bubble pipelines run it as B): returns the gradient
    /// of the stage's input, accumulates the gradients that need no weight-gradient pass (batch norm),
    /// and keeps `dy` in the stash for backward_weights. A network that does not split
    /// (SplitBackwardNetwork) runs its whole backward here.
    tensor backward_input(std::size_t s, tensor dy, stash& st) {
        if (std::optional<tensor> empty = empty_backward("backward_input", s, dy, *st)) return std::move(*empty);
        const nn::context ctx = backward_context(s, *st);
        st->grad_output = std::move(dy);
        if (recomputes(s))
            return m_recompute.backward<SplitBackwardNetwork<N>>(m_net, first_unit(s), last_unit(s), st->grad_output,
                                                                 st->input, st->recomputed, ctx, s > 0);
        const auto& dx = [&]() -> decltype(auto) {
            if constexpr (SplitBackwardNetwork<N>)
                return m_net.backward_units_input(first_unit(s), last_unit(s), st->grad_output, st->state, ctx, s > 0);
            else
                return m_net.backward_units(first_unit(s), last_unit(s), st->grad_output, st->state, ctx, s > 0);
        }();
        return s > 0 ? tensor(dx) : tensor{};
    }

    /// The weight-gradient half of backward (W), after backward_input on the same stash: accumulates
    /// the stage's weight gradients and frees the stash.
    void backward_weights(std::size_t s, stash st) {
        if constexpr (SplitBackwardNetwork<N>) {
            if (tessera::tensor::shape_of(st->input).n == 0) return;
            if (!st->recomputed.states.empty()) {  // recomputed segment by segment by backward_input
                const auto bounds = m_recompute.segment_bounds(first_unit(s), last_unit(s));
                for (std::size_t k = st->recomputed.states.size(); k-- > 0;)
                    m_net.backward_units_weights(bounds[k], bounds[k + 1], st->recomputed.states[k],
                                                 backward_context(s, *st));
                return;
            }
            m_net.backward_units_weights(first_unit(s), last_unit(s), st->state, backward_context(s, *st));
        }
    }

    /// The stage's gradients gathered into one contiguous buffer (for the all-reduce); update() puts them back.
    std::span<float> gradients(std::size_t s) {
        auto& flat = m_flat.at(s);
        flat.clear();
        unit_parameters<N> p(m_net, first_unit(s), last_unit(s));
        p.visit_parameters([&](std::string_view, auto, auto grad) { flat.insert(flat.end(), grad.begin(), grad.end()); });
        m_gathered[s] = 1;
        return flat;
    }

    /// Steps the stage's optimizer with gradients × scale, then zeroes the gradients. The executor's
    /// scale is 1 / (micro-batches × replicas) whatever the micro-batches' sizes: each micro-batch
    /// contributes the gradient of the mean loss over its real samples (nothing when it has none).
    void update(std::size_t s, float scale) { update_stage(s, scale, nullptr); }
    /// The same with the optimiser state sharded: `across_replicas` sums what the optimiser's step
    /// needs from the other replicas' shards (optim::lamb's norms), in a fixed order.
    void update(std::size_t s, float scale, optim::replica_sum across_replicas) { update_stage(s, scale, &across_replicas); }

    /// Whether the optimiser clips by the global gradient norm (a finite max_grad_norm): then the
    /// schedule's vote carries every stage's gradient_squares and update() clips with their total.
    [[nodiscard]] bool clips_gradients() const {
        if constexpr (requires(const O& o) { { o.options().max_grad_norm } -> std::convertible_to<double>; }) {
            if (m_optimizers.front().options().max_grad_norm < std::numeric_limits<double>::infinity()) {
                if constexpr (!requires(O& o, unit_parameters<N>& p) {
                                  o.step(p, 1.0, kernels::parallelism{}, optim::element_range{}, std::optional<double>{});
                              })
                    throw config::config_error("tessera::exec::staged_network: the optimiser has a max_grad_norm but no "
                                               "step(params, scale, parallelism, element_range, global norm) to take the "
                                               "norm over every stage");
                return true;
            }
        }
        return false;
    }
    /// Stage s's part of the squared global gradient norm: Σ (g · scale / loss scale)² over its
    /// accumulated gradients (after the all-reduce; sharded, this replica's shard of them), the tied
    /// table's second copy left out (one parameter, counted once). Exact (optim::square_sum): the
    /// parts of any stage split, shard split and thread count add up to the same bits.
    [[nodiscard]] optim::square_sum gradient_squares(std::size_t s, float scale) {
        const double gs = static_cast<double>(scale) / m_scale.at(s);
        const void* const skip = tied_copy(s);
        const bool gathered = m_gathered.at(s) != 0;
        const optim::element_range shard = gathered ? optimizer_shard(s) : optim::element_range{};
        const kernels::parallelism par = m_pools.context(s, m_context).parallel();
        optim::square_sum total;
        std::size_t at = 0;
        unit_parameters<N> p(m_net, first_unit(s), last_unit(s));
        p.visit_parameters([&](std::string_view, auto, auto grad) {
            const std::size_t n = grad.size(), lo = std::clamp(shard.begin, at, at + n), hi = std::clamp(shard.end, at, at + n);
            if (hi > lo && static_cast<const void*>(grad.data()) != skip)
                total += gathered ? optim::squares_of(std::span<const float>(m_flat[s]).subspan(lo, hi - lo), gs, par)
                                  : optim::squares_of(grad.subspan(lo - at, hi - lo), gs, par);
            at += n;
        });
        return total;
    }
    /// Elements of the tied table (0: no table is tied): what the vote adds first.
    [[nodiscard]] std::size_t tied_elements() const noexcept { return m_tied_elements; }
    /// Adds stage s's copies of the tied table's accumulated gradient (after the all-reduce; sharded,
    /// this replica's shard of them) into `sum`: the embedding's on stage 0, the decoder's on the last
    /// stage, in that order when one stage holds both. Over every stage (the vote), `sum` holds the
    /// table's gradient, its two uses added once.
    void add_tied_gradient(std::size_t s, std::span<float> sum) {
        const bool gathered = m_gathered.at(s) != 0;
        const optim::element_range shard = gathered ? optimizer_shard(s) : optim::element_range{};
        visit_tied(s, [&](std::size_t at, auto grad) {
            check_tied(sum.size(), grad.size());
            const std::size_t n = grad.size();
            const std::size_t lo = std::clamp(shard.begin, at, at + n) - at, hi = std::clamp(shard.end, at, at + n) - at;
            for (std::size_t k = lo; k < hi; ++k) sum[k] += gathered ? m_flat[s][at + k] : static_cast<float>(grad[k]);
        });
    }
    /// Gives stage s's copies of the tied table the vote's sum (add_tied_gradient over every stage).
    void set_tied_gradient(std::size_t s, std::span<const float> sum) {
        const bool gathered = m_gathered.at(s) != 0;
        m_tie_given.at(s) = 1;
        visit_tied(s, [&](std::size_t at, auto grad) {
            check_tied(sum.size(), grad.size());
            using G = typename decltype(grad)::value_type;
            if (gathered)
                std::copy(sum.begin(), sum.end(), m_flat[s].begin() + static_cast<std::ptrdiff_t>(at));
            else
                for (std::size_t k = 0; k < grad.size(); ++k) grad[k] = static_cast<G>(sum[k]);
        });
    }

    /// The vote's total of every stage's (and shard's) gradient_squares: stage s's next update clips
    /// with its square root.
    void set_gradient_squares(std::size_t s, const optim::square_sum& total) { m_norm.at(s) = std::sqrt(total.value()); }

    /// Whether the stage's accumulated gradients (after the all-reduce, when there was one) are all finite.
    [[nodiscard]] bool gradients_finite(std::size_t s) {
        bool finite = true;
        const auto check = [&](std::span<const float> g) {
            for (const float v : g) finite = finite && std::isfinite(v);
        };
        if (m_gathered.at(s)) {  // sharded: the sums of this replica's shard (the vote spans the replicas)
            const optim::element_range shard = optimizer_shard(s);
            const std::span<const float> flat(m_flat[s]);
            check(shard.whole() ? flat : flat.subspan(shard.begin, shard.size()));
        } else {
            unit_parameters<N> p(m_net, first_unit(s), last_unit(s));
            p.visit_parameters([&](std::string_view, auto, auto grad) { check(grad); });
        }
        return finite;
    }

    /// The step overflowed somewhere: zero the stage's gradients without stepping, and lower its scale.
    /// Every stage does the same in the same step (the executor's vote), so their scales stay equal.
    void skip_update(std::size_t s) {
        m_norm.at(s).reset();
        m_tie_given.at(s) = 0;
        unit_parameters<N> p(m_net, first_unit(s), last_unit(s));
        p.visit_parameters([](std::string_view, auto, auto grad) { std::fill(grad.begin(), grad.end(), 0.0f); });
        m_gathered.at(s) = 0;
        ++m_skipped[s];
        m_good_steps[s] = 0;
        if (m_rule.dynamic) m_scale[s] = std::max(1.0, m_scale[s] / m_rule.factor);
    }

    /// Stage s's figures for one micro-batch: FLOPs, bytes, and its layers' passes for the IPU model
    /// (exec::unit_stage_cost).
    [[nodiscard]] stage_cost cost(std::size_t s) const {
        std::size_t state_values = 0;
        if constexpr (requires(const O& o) { { o.state_values_per_parameter() } -> std::convertible_to<std::size_t>; })
            state_values = m_optimizers.at(s).state_values_per_parameter();
        stage_cost c = unit_stage_cost(m_net, first_unit(s), last_unit(s), m_input, s + 1 == stages(), state_values,
                                       recomputes(s) ? &m_recompute : nullptr);
        // The embedding's copy on stage 0, the head's on the last (both: one stage).
        c.tied_copies = (s == 0 ? 1 : 0) + (s + 1 == stages() ? 1 : 0);
        if constexpr (requires(const N& n) { { n.tied_table_elements() } -> std::convertible_to<std::size_t>; })
            c.tied_parameters = m_net.tied_table_elements();  // shapes-only networks too
        else
            c.tied_parameters = holds_tied(s) ? m_tied_elements : 0;
        if (c.tied_parameters == 0) c.tied_copies = 0;
        return c;
    }

    /// The first stage's IPU prepares what the host sent for micro-batch m (8-bit I/O: normalises the
    /// pixels, rounding them as stochastic rounding says: exec::input_rounding).
    [[nodiscard]] tensor prepare(input x, std::size_t micro_batch = 0) {
        auto mask = x.mask();
        return {std::move(x).prepare(input_rounding(micro_batch_context(0, micro_batch).rounding)), std::move(mask)};
    }

private:
    void update_stage(std::size_t s, float scale, const optim::replica_sum* across) {
        if (holds_tied(s) && !std::exchange(m_tie_given.at(s), 0))  // the copies would part
            throw config::config_error("tessera::exec::staged_network::update: stage " + std::to_string(s) + " holds a "
                                       "copy of the tied table, and the vote gave it no sum of the two copies' gradients "
                                       "(the schedule needs schedule_request::tied_table)");
        unit_parameters<N> units(m_net, first_unit(s), last_unit(s));
        tied_names p{units, tied_copy(s), m_tied_name};  // the tied copy stepped under the table's name
        if (m_gathered.at(s)) {
            std::size_t k = 0;
            p.visit_parameters([&](std::string_view, auto, auto grad) {
                std::copy_n(m_flat[s].begin() + static_cast<std::ptrdiff_t>(k), grad.size(), grad.begin());
                k += grad.size();
            });
            m_gathered[s] = 0;
        }
        // The stage's kernel threads split large parameters (each element's update is its own: the same
        // result on any number of threads); an optimiser without that overload steps on one.
        const kernels::parallelism par = m_pools.context(s, m_context).parallel();
        auto& opt = m_optimizers[s];
        const double grad_scale = static_cast<double>(scale) / m_scale[s];
        std::optional<double> norm;  // the global norm from the vote (gradient_squares of every stage and shard)
        if (clips_gradients()) {
            if (!m_norm[s])
                throw config::config_error("tessera::exec::staged_network::update: the optimiser clips by the global "
                                           "gradient norm (max_grad_norm) but stage " + std::to_string(s) + " was given "
                                           "none (the schedule needs schedule_request::gradient_norm)");
            norm = std::exchange(m_norm[s], std::nullopt);
        }
        const optim::element_range shard = optimizer_shard(s);
        if constexpr (requires { opt.step(p, grad_scale, par, shard, norm, *across); }) {
            if (across != nullptr && !shard.whole())
                opt.step(p, grad_scale, par, shard, norm, *across);
            else
                opt.step(p, grad_scale, par, shard, norm);
        } else if constexpr (requires { opt.step(p, grad_scale, par, shard, norm); }) {
            opt.step(p, grad_scale, par, shard, norm);
        } else if constexpr (requires { opt.step(p, grad_scale, par, shard); }) {
            opt.step(p, grad_scale, par, shard);  // clips_gradients() refused max_grad_norm for it
        } else if constexpr (requires { opt.step(p, grad_scale, par); }) {
            opt.step(p, grad_scale, par);
        } else {
            opt.step(p, grad_scale);
        }
        optim::zero_grad(p, par);
        if (m_rule.dynamic && ++m_good_steps[s] >= m_rule.growth_interval) {
            if (m_scale[s] < max_loss_scale) m_scale[s] = std::min(m_scale[s] * m_rule.factor, max_loss_scale);
            m_good_steps[s] = 0;
        }
    }

    // A stage's parameters as its optimiser steps them: the tied table's second copy (the decoder)
    // under the first's name, so that stochastic rounding, whose stream the name keys, rounds both
    // copies alike and they stay equal without a copy between stages.
    struct tied_names {
        unit_parameters<N>& units;
        const void* copy;
        std::string_view table;
        template <class F>
        void visit_parameters(F&& f) {
            units.visit_parameters([&](std::string_view name, auto value, auto grad) {
                f(copy != nullptr && static_cast<const void*>(grad.data()) == copy ? table : name, value, grad);
            });
        }
    };
    // Calls f(offset, gradient) for each copy of the tied table stage s holds (the embedding's, the
    // first parameter of stage 0; the decoder's, on the last stage), offset counted in the stage's
    // flat gradients.
    template <class F>
    void visit_tied(std::size_t s, F&& f) {
        if (m_tied_name.empty()) return;
        const void* const copy = tied_copy(s);
        std::size_t at = 0;
        bool first = true;
        unit_parameters<N> p(m_net, first_unit(s), last_unit(s));
        p.visit_parameters([&](std::string_view, auto, auto grad) {
            if ((s == 0 && first) || static_cast<const void*>(grad.data()) == copy) f(at, grad);
            first = false;
            at += grad.size();
        });
    }
    static void check_tied(std::size_t given, std::size_t copy) {
        if (given != copy)
            throw config::config_error("tessera::exec::staged_network: " + std::to_string(given) + " values given for the "
                                       "tied table's " + std::to_string(copy));
    }
    // Whether stage s holds a copy of the tied table (the first stage, the last).
    [[nodiscard]] bool holds_tied(std::size_t s) const noexcept {
        return !m_tied_name.empty() && (s == 0 || s + 1 == m_first.size());
    }
    // The tied table's second copy's gradient (its data) when stage s holds it, else nullptr.
    [[nodiscard]] const void* tied_copy(std::size_t s) {
        if constexpr (TiedNetwork<N>)
            if (m_net.tied() && last_unit(s) == m_net.units()) return m_net.tied_copy();
        return nullptr;
    }
    void keep_own_shards() {
        if constexpr (requires(O& o, unit_parameters<N>& p, optim::element_range r) { o.keep_shard(p, r); })
            for (std::size_t s = 0; s < stages(); ++s) {
                unit_parameters<N> p(m_net, first_unit(s), last_unit(s));
                m_optimizers[s].keep_shard(p, m_shards.at(s));
            }
    }

    /// Stage s's context for micro-batch m: with stochastic rounding in training, m's stream at the
    /// stage's step (every stage steps alike, so any stage's count is the step's).
    [[nodiscard]] nn::context micro_batch_context(std::size_t s, std::size_t m) {
        nn::context ctx = m_pools.context(s, m_context);
        std::uint64_t step = 0;
        if constexpr (requires(const O& o) { o.steps(); }) step = m_optimizers.at(s).steps() + m_skipped.at(s);
        if constexpr (requires(const O& o) { o.steps(); })
            if (m_rounding_seed && m_context.mode == nn::mode::train)
                ctx.rounding = micro_batch_rounding(*m_rounding_seed, m_rounding_replica, step, m);
        if (m_context.mode == nn::mode::train)
            ctx.dropout = {.active = true, .seed = m_dropout.seed, .step = step, .stream = 0,
                           .first_sample = (m_dropout.replica * m_dropout.micro_batches + m) * m_input.n};
        return ctx;
    }

    // Checks that dy has as many samples as the forward `st` keeps; the input gradient of an empty
    // micro-batch (nothing to run), or nothing.
    std::optional<tensor> empty_backward(const char* who, std::size_t s, const tensor& dy, const stage_state& st) const {
        const auto in = tessera::tensor::shape_of(st.input);
        if (tessera::tensor::shape_of(dy).n != in.n)
            throw config::config_error(std::string("tessera::exec::staged_network::") + who + ": a gradient of " +
                                       std::to_string(tessera::tensor::shape_of(dy).n) + " samples for a forward of " +
                                       std::to_string(in.n));
        if (in.n > 0) return std::nullopt;
        return s > 0 ? tessera::tensor::make_nhwc<typename precision::data_type>(in) : tensor{};
    }
    // Stage s's context for the backward of the micro-batch `st` keeps (its rounding).
    [[nodiscard]] nn::context backward_context(std::size_t s, const stage_state& st) {
        nn::context ctx = m_pools.context(s, m_context);
        ctx.rounding = st.rounding;
        ctx.dropout = st.dropout;
        st.input.use_mask(ctx);
        return ctx;
    }

    std::pair<tensor, stash> run_forward(std::size_t s, tensor x, nn::context ctx) {
        x.use_mask(ctx);  // the stash keeps x, so the tables outlive the backward
        const auto in = tessera::tensor::shape_of(x);
        if (in.n > m_input.n)
            throw config::config_error("tessera::exec::staged_network::forward: a micro-batch of " +
                                       std::to_string(in.n) + " samples for a model compiled for " +
                                       std::to_string(m_input.n));
        // A spare state keeps its layers' buffers (see m_spare); what only some
        // micro-batches fill is emptied.
        stash st = spare_pool<stage_state>::take(m_spare.pools.at(s));
        st->input = std::move(x);
        st->rounding = ctx.rounding;
        st->dropout = ctx.dropout;
        st->grad_output = tensor{};
        st->recomputed.clear();
        if (in.n == 0) {
            tessera::tensor::shape out = in.with_batch(1);  // shape inference only (checks the sample shape)
            for (std::size_t u = first_unit(s); u < last_unit(s); ++u) out = m_net.unit_output_shape(u, out);
            return {tessera::tensor::make_nhwc<typename precision::data_type>(out.with_batch(0)), std::move(st)};
        }
        if (m_context.mode == nn::mode::train && recomputes(s))
            return {tensor(m_recompute.forward(m_net, first_unit(s), last_unit(s), st->input, st->recomputed, ctx),
                           st->input.mask()),
                    std::move(st)};
        const auto& y = m_net.forward_units(first_unit(s), last_unit(s), st->input, st->state, ctx);
        return {tensor(y, st->input.mask()), std::move(st)};
    }

    N m_net;
    std::vector<std::size_t> m_first;
    tessera::tensor::shape m_input;
    loss_scale_rule m_rule;
    std::vector<O> m_optimizers;
    Loss m_loss;
    nn::context m_context{};
    ipu_kernel_pools m_pools;  // one thread and one scratch per stage unless set_kernel_threads
    std::vector<std::vector<float>> m_flat;
    std::vector<char> m_gathered;
    std::vector<std::vector<float>> m_flat_weights;  // per stage: its weights for the all-gather
    std::size_t m_shard_index = 0, m_shard_count = 1;  // of the optimiser state (1: not sharded)
    std::vector<optim::element_range> m_shards;       // per stage, when sharded
    // Per stage, the states of micro-batches whose stash was dropped (after their backward, or after
    // an inference's forward), for the next forwards: a new state for each micro-batch allocated
    // every activation of the stage again (the main job spent about a tenth of its time zeroing the
    // fresh pages, perf on a 2-vCPU AMD EPYC, Zen 4). A copy of the model starts with pools of its own.
    struct spare_states {
        std::vector<std::shared_ptr<spare_pool<stage_state>>> pools;
        explicit spare_states(std::size_t stages) {
            for (std::size_t s = 0; s < stages; ++s) pools.push_back(std::make_shared<spare_pool<stage_state>>());
        }
        spare_states(const spare_states& other) : spare_states(other.pools.size()) {}
        spare_states(spare_states&&) noexcept = default;
        spare_states& operator=(const spare_states& other) {
            if (this != &other) *this = spare_states(other.pools.size());
            return *this;
        }
        spare_states& operator=(spare_states&&) noexcept = default;
        ~spare_states() = default;
    };
    spare_states m_spare;
    // Each stage keeps its own copy of the loss scale and the count of clean steps: a stage changes
    // only its own (on its IPU's thread), and the vote makes every copy take the same steps.
    std::vector<double> m_scale;
    std::vector<std::size_t> m_good_steps, m_skipped;
    std::vector<std::optional<double>> m_norm;  // per stage: the global gradient norm from this step's vote
    recomputation m_recompute;  // which stages recompute their forward during backward
    struct dropout_key {
        std::uint64_t seed = 0;
        std::size_t replica = 0, micro_batches = 0;
    } m_dropout{};
    std::string m_tied_name;  // the tied table's parameter name (empty: none)
    std::size_t m_tied_elements = 0;
    std::vector<char> m_tie_given;  // per stage: the vote gave it the tied sum this step (its IPU's thread alone)
    std::optional<std::uint64_t> m_rounding_seed;  // stochastic rounding of activations, when set
    std::size_t m_rounding_replica = 0;
    static constexpr double max_loss_scale = 65536.0 * 65536.0;
};

/// The first unit of each of `stages` stages balancing the units' FLOPs (forward + backward):
/// automatic partition, where PopTorch needs hand-placed blocks.
template <UnitNetwork N>
[[nodiscard]] std::vector<std::size_t> balanced_units(const N& net, tessera::tensor::shape input, std::size_t stages) {
    std::vector<double> costs;
    tessera::tensor::shape shape = input;
    for (std::size_t u = 0; u < net.units(); ++u) {
        costs.push_back(net.unit_cost(u, shape).flops());
        shape = net.unit_output_shape(u, shape);
    }
    return balance_stages(costs, stages).first_layer;
}

}  // namespace tessera::exec
