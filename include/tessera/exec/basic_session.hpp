#pragma once
// The part of a session that does not depend on its configuration: calls, weights, reports.
#include <cstddef>
#include <memory>
#include <ostream>
#include <span>
#include <streambuf>
#include <string>
#include <utility>
#include <vector>

#include "tessera/config/batching.hpp"
#include "tessera/config/description.hpp"
#include "tessera/config/error.hpp"
#include "tessera/emulator/host_clock.hpp"
#include "tessera/exec/compile.hpp"
#include "tessera/exec/concepts.hpp"
#include "tessera/exec/executor.hpp"
#include "tessera/exec/host_work.hpp"
#include "tessera/exec/memory_plan.hpp"
#include "tessera/exec/non_finite_loss.hpp"
#include "tessera/exec/run_result.hpp"
#include "tessera/exec/schedule.hpp"
#include "tessera/exec/session_options.hpp"
#include "tessera/report/progress_bar.hpp"

namespace tessera::exec {

/// What a session is once compiled, whatever its configuration: the batching, the executor and its
/// IPUs, one model per replica, the output mode and the host's clock. Everything a caller does with a
/// session after graph compilation (calls, weights, reports, checkpoints, evaluate) is here, so it is
/// compiled once per model type; session<C, M> adds only what needs the configuration type.
/// Code that works on any configuration of one model (a training loop, a report) can take a
/// `basic_session<M>&`.
template <StagedModel M>
class basic_session {
public:
    using model_type = M;
    using tensor = typename M::tensor;
    using label = typename M::label;

    /// One host call: D device iterations (training: D weight updates). feed(group, d, m) -> {input, label}
    /// gives micro-batch m of iteration d for replica input group `group` (replicas in one input group
    /// receive the same slice). Runs on one host thread per replica.
    template <class Feed>
        requires MicroBatchFeed<Feed, M>
    run_result<tensor> operator()(Feed&& feed) {
        const std::size_t group = m_batching.input_group;
        const bool training = m_batching.training;
        // Inference runs the D iterations as one program of D micro-batches: program micro-batch m is iteration m.
        auto grouped = [&feed, group, training](std::size_t r, std::size_t d, std::size_t m) {
            return training ? feed(r / group, d, m) : feed(r / group, m, 0);
        };
        return call(typename executor<M>::feed_function(grouped));
    }

    /// One host call from a combined batch of micro-batches ordered [iteration][input group][micro-batch].
    run_result<tensor> operator()(std::span<const std::pair<tensor, label>> micro_batches) {
        const std::size_t groups = m_batching.local_replicas() / m_batching.input_group;
        const std::size_t per_group = m_batching.training ? m_batching.gradient_accumulation : 1;
        const std::size_t expected = m_batching.device_iterations * groups * per_group;
        if (micro_batches.size() != expected)
            throw config::batch_error("tessera::exec::session: a call takes " + std::to_string(expected) +
                                      " micro-batches (D × G × replicas / input group), got " +
                                      std::to_string(micro_batches.size()));
        return (*this)([&](std::size_t g, std::size_t d, std::size_t m) {
            return micro_batches[(d * groups + g) * per_group + m];
        });
    }

    /// A training session (an inference session has no weight update and G = 1).
    [[nodiscard]] bool training() const noexcept { return m_batching.training; }
    [[nodiscard]] const config::batching& batching() const noexcept { return m_batching; }
    [[nodiscard]] const schedule& program() const noexcept { return m_executor->program(); }
    [[nodiscard]] const memory_plan& plan() const noexcept { return m_executor->plan(); }
    [[nodiscard]] const cost_model& costs() const noexcept { return m_executor->costs(); }
    /// Sets every replica's and stage's learning rate (for schedules: call it between calls).
    void set_learning_rate(double lr)
        requires requires(M& m) { m.set_learning_rate(lr); }
    {
        for (auto& m : m_models) m.set_learning_rate(lr);
    }
    /// The output mode the calls use.
    [[nodiscard]] output_selection outputs() const noexcept { return m_outputs; }
    /// The host's side of the modelled clock over this session's calls so far.
    [[nodiscard]] const emulator::host_clock& host() const noexcept { return m_host; }
    /// What each call asks of the host (per process).
    [[nodiscard]] const host_work& host_work_per_call() const noexcept { return m_host_work; }
    /// The compiled executor (its IPUs, their clocks and memory).
    [[nodiscard]] executor<M>& device() noexcept { return *m_executor; }
    /// The weights on the device (replica 0; every replica holds the same after an update). With the
    /// optimiser state sharded, its optimiser holds replica 0's shard: see unsharded_model().
    [[nodiscard]] const M& model() const noexcept { return m_models.front(); }
    [[nodiscard]] const M& replica(std::size_t r) const { return m_models.at(r); }
    /// A copy of replica 0's model holding the whole optimiser state, gathered from the replicas'
    /// shards when it is sharded: what a run without sharding would hold (checkpoints use it).
    /// Throws config_error when the shards are spread over processes (gathering them is not done).
    [[nodiscard]] M unsharded_model() const {
        M m = m_models.front();
        if constexpr (ShardedOptimizerModel<M>) {
            if (m.optimizer_shards() > 1) {
                if (m.optimizer_shards() != m_models.size())
                    throw config::config_error("tessera::exec::session: the optimiser state is sharded over " +
                                               std::to_string(m.optimizer_shards()) + " replicas in " +
                                               std::to_string(m.optimizer_shards() / m_models.size()) +
                                               " processes; gathering it from other processes (for checkpoints or "
                                               "the host's copy) is not supported");
                m.gather_optimizer_state(std::span<const M>(m_models));
            }
        }
        return m;
    }
    /// Copies the device weights back to the host model. A model with assign_state (staged_network)
    /// moves its training state only: the host keeps its own mode and kernel threads. The host
    /// receives the whole optimiser state, gathered when it is sharded.
    void copy_weights_to(M& host) const {
        if constexpr (ShardedOptimizerModel<M>)
            if (m_models.front().optimizer_shards() > 1) return transfer(host, unsharded_model());
        transfer(host, m_models.front());
    }
    /// Replaces the device weights (every replica) by the host model's; with assign_state the
    /// replicas keep this session's options (evaluation mode, kernel threads, recomputation).
    void load_weights(const M& host) {
        for (auto& m : m_models) transfer(m, host);
    }

protected:
    /// Graph compilation of `model` for the configuration `c` describes, with the counts of
    /// `options`: the schedule and costs (compile_plan), then the memory plan and the IPU threads
    /// (the executor); each of the local replicas gets a copy of `model`.
    basic_session(const config::description& c, const M& model, const config::options& options,
                  const session_options& settings)
        : basic_session(c, model, config::make_batching(c, options), settings) {}
    // A session is a session<C, M>: never destroyed through this base (no virtual destructor).
    ~basic_session() = default;
    basic_session(basic_session&&) = default;
    basic_session& operator=(basic_session&&) = default;

private:
    basic_session(const config::description& c, const M& model, const config::batching& b, const session_options& settings)
        : m_batching(b), m_executor(compile(c, model, b, settings)), m_models(b.local_replicas(), model),
          m_outputs(settings.outputs.value_or(output_selection{c.outputs, c.output_period})),
          m_host(settings.host, settings.loading),
          m_host_work(host_work_of(m_executor->costs(), m_batching, settings.host)) {
        // Sharded optimiser state: local replica r of process p is replica p·R + r of them all.
        if constexpr (ShardedOptimizerModel<M>) {
            const schedule& sched = m_executor->program();
            if (sched.optimizer_sharded())
                for (std::size_t r = 0; r < m_models.size(); ++r)
                    m_models[r].shard_optimizer_state(settings.across.rank * m_models.size() + r, sched.request.replicas);
        }
        if constexpr (requires(M& m) { m.set_dropout(std::uint64_t{}, std::size_t{}, std::size_t{}); })
            if (m_batching.training)
                for (std::size_t r = 0; r < m_models.size(); ++r)
                    m_models[r].set_dropout(settings.dropout_seed, settings.across.rank * m_models.size() + r,
                                            m_batching.gradient_accumulation);
        if (settings.stochastic_rounding) {
            if constexpr (StochasticRoundingModel<M>)
                for (std::size_t r = 0; r < m_models.size(); ++r)
                    m_models[r].set_stochastic_rounding(*settings.stochastic_rounding, settings.across.rank * m_models.size() + r);
            else
                throw config::config_error("tessera::exec::session: session_options::stochastic_rounding needs a model "
                                           "that rounds its activations stochastically (StochasticRoundingModel)");
        }
    }

    static std::unique_ptr<executor<M>> compile(const config::description& c, const M& model, const config::batching& b,
                                                const session_options& settings) {
        report::progress_bar bar(progress_stream(settings), "Graph compilation", b.stages + 3,
                                 {.redraw = settings.progress ? report::redraw_mode::automatic : report::redraw_mode::never});
        compiled_plan plan = compile_plan(c, model, b, settings, [&] { bar.update(); });
        bar.update();  // memory plan and threads: checked and started by the executor
        auto ex = std::make_unique<executor<M>>(std::move(plan.program), std::move(plan.costs), b.local_replicas(),
                                                settings.device, c.accumulation_reduction, settings.record_trace,
                                                std::move(plan.across));
        bar.update();
        return ex;
    }

    /// The "Graph compilation" bar's stream: settings.progress, or one that drops what it is given.
    static std::ostream& progress_stream(const session_options& settings) {
        struct null_buffer : std::streambuf {
            int overflow(int c) override { return c; }
        };
        static thread_local null_buffer buffer;
        static thread_local std::ostream stream(&buffer);
        return settings.progress ? *settings.progress : stream;
    }

    run_result<tensor> call(typename executor<M>::feed_function feed) {
        const std::size_t iterations = m_batching.training ? m_batching.device_iterations : 1;
        ++m_calls;
        auto result = [&] {
            try {
                return m_executor->run_fed(std::span<M>(m_models), feed, iterations, m_outputs);
            } catch (const non_finite_loss& e) {  // say where: the caller counts epochs, the session calls
                throw non_finite_loss("host call " + std::to_string(m_calls) + " (weight updates " +
                                      std::to_string((m_calls - 1) * iterations + 1) + " to " +
                                      std::to_string(m_calls * iterations) + "): " + e.what());
            }
        }();
        result.host = m_host.call(m_host_work.prepare_seconds, m_host_work.feed_seconds, result.modelled_seconds);
        return result;
    }

    static void transfer(M& to, const M& from) {
        if constexpr (requires { to.assign_state(from); })
            to.assign_state(from);
        else
            to = from;
    }

    config::batching m_batching;
    std::unique_ptr<executor<M>> m_executor;  // owns threads: held by pointer so sessions move
    std::vector<M> m_models;
    output_selection m_outputs;
    std::size_t m_calls = 0;
    emulator::host_clock m_host;
    host_work m_host_work;
};

}  // namespace tessera::exec
