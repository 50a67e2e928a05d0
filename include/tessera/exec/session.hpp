#pragma once
// Training and inference sessions: a config, a staged model and its compiled executor.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <streambuf>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tessera/config/batching.hpp"
#include "tessera/config/config.hpp"
#include "tessera/config/error.hpp"
#include "tessera/emulator/device_spec.hpp"
#include "tessera/exec/concepts.hpp"
#include "tessera/exec/executor.hpp"
#include "tessera/exec/host_work.hpp"
#include "tessera/exec/compile.hpp"
#include "tessera/exec/memory_plan.hpp"
#include "tessera/exec/schedule.hpp"
#include "tessera/exec/session_options.hpp"
#include "tessera/report/progress_bar.hpp"

namespace tessera::exec {

/// A compiled model: R replicas of a staged model on R × IPUs-per-replica emulated IPUs.
/// Graph compilation (schedule, memory plan, threads) happens in the constructor: configuration
/// and memory errors are raised there, before anything runs.
/// @code
///   using c = cfg::config<cfg::pipelined<cfg::one_f_one_b, 2>, cfg::gradient_accumulation<4>,
///                         cfg::device_iterations<2>, cfg::replication<2>>;
///   auto run = exec::training_model<c>(model, {.micro_batch = 8});
///   auto result = run(feed);              // D = 2 weight updates; losses by the output mode
///   run.copy_weights_to(model);           // back to the host
/// @endcode
template <config::Config C, StagedModel M>
class session {
    // A model with a precision runs at the config's: the design choice is to refuse a mismatch here,
    // at compile time, rather than train silently at another precision or convert weights behind
    // the user's back (nn::resnet20<typename Config::precision> builds the model at the config's).
    static constexpr bool precision_matches = [] {
        if constexpr (requires { typename M::precision::data_type; typename M::precision::weight_type; })
            return std::is_same_v<typename M::precision::data_type, typename C::precision::data_type> &&
                   std::is_same_v<typename M::precision::weight_type, typename C::precision::weight_type>;
        else
            return true;
    }();
    static_assert(precision_matches,
                  "tessera::exec::session: the model's precision must be the config's (its data and weight types): "
                  "build the model at Config::precision, e.g. nn::resnet20<typename Config::precision>");

public:
    using model_type = M;
    using tensor = typename M::tensor;
    using label = typename M::label;

    session(const M& model, config::options options = {}, session_options settings = {})
        : m_batching(config::make_batching<C>(options)),
          m_executor(compile(model, m_batching, settings)),
          m_models(m_batching.local_replicas(), model),
          m_outputs(settings.outputs.value_or(output_selection::of<typename C::output_mode>())),
          m_host(settings.host, settings.loading),
          m_host_work(host_work_of(m_executor->costs(), m_batching, settings.host)) {}

    /// One host call: D device iterations (training: D weight updates). feed(group, d, m) -> {input, label}
    /// gives micro-batch m of iteration d for replica input group `group` (replicas in one input group
    /// receive the same slice). Runs on one host thread per replica.
    template <class Feed>
        requires MicroBatchFeed<Feed, M>
    run_result<tensor> operator()(Feed&& feed) {
        const std::size_t group = m_batching.input_group;
        // Inference runs the D iterations as one program of D micro-batches: program micro-batch m is iteration m.
        auto grouped = [&feed, group](std::size_t r, std::size_t d, std::size_t m) {
            return C::is_training ? feed(r / group, d, m) : feed(r / group, m, 0);
        };
        const std::size_t iterations = C::is_training ? m_batching.device_iterations : 1;
        ++m_calls;
        auto result = [&] {
            try {
                return m_executor->run(std::span<M>(m_models), grouped, iterations, m_outputs);
            } catch (const non_finite_loss& e) {  // say where: the caller counts epochs, the session calls
                throw non_finite_loss("host call " + std::to_string(m_calls) + " (weight updates " +
                                      std::to_string((m_calls - 1) * iterations + 1) + " to " +
                                      std::to_string(m_calls * iterations) + "): " + e.what());
            }
        }();
        result.host = m_host.call(m_host_work.prepare_seconds, m_host_work.feed_seconds, result.modelled_seconds);
        return result;
    }

    /// One host call from a combined batch of micro-batches ordered [iteration][input group][micro-batch].
    run_result<tensor> operator()(std::span<const std::pair<tensor, label>> micro_batches) {
        const std::size_t groups = m_batching.local_replicas() / m_batching.input_group;
        const std::size_t per_group = C::is_training ? m_batching.gradient_accumulation : 1;
        const std::size_t expected = m_batching.device_iterations * groups * per_group;
        if (micro_batches.size() != expected)
            throw config::batch_error("tessera::exec::session: a call takes " + std::to_string(expected) +
                                      " micro-batches (D × G × replicas / input group), got " +
                                      std::to_string(micro_batches.size()));
        return (*this)([&](std::size_t g, std::size_t d, std::size_t m) {
            return micro_batches[(d * groups + g) * per_group + m];
        });
    }

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
    /// The weights on the device (replica 0; every replica holds the same after an update).
    [[nodiscard]] const M& model() const noexcept { return m_models.front(); }
    [[nodiscard]] const M& replica(std::size_t r) const { return m_models.at(r); }
    /// Copies the device weights back to the host model. A model with assign_state (staged_network)
    /// moves its training state only: the host keeps its own mode and kernel threads.
    void copy_weights_to(M& host) const { transfer(host, m_models.front()); }
    /// Replaces the device weights (every replica) by the host model's; with assign_state the
    /// replicas keep this session's options (evaluation mode, kernel threads, recomputation).
    void load_weights(const M& host) {
        for (auto& m : m_models) transfer(m, host);
    }

private:
    static void transfer(M& to, const M& from) {
        if constexpr (requires { to.assign_state(from); })
            to.assign_state(from);
        else
            to = from;
    }

    static std::unique_ptr<executor<M>> compile(const M& model, const config::batching& b, const session_options& settings) {
        report::progress_bar bar(settings.progress ? *settings.progress : null_stream(), "Graph compilation",
                                 b.stages + 3, {.redraw = settings.progress ? report::redraw_mode::automatic
                                                                                       : report::redraw_mode::never});
        compiled_plan plan = compile_plan<C>(model, b, settings, [&] { bar.update(); });
        bar.update();  // memory plan and threads: checked and started by the executor
        auto ex = std::make_unique<executor<M>>(std::move(plan.program), std::move(plan.costs), b.local_replicas(),
                                                settings.device, C::accumulation_reduction, settings.record_trace,
                                                std::move(plan.across));
        bar.update();
        return ex;
    }

    static std::ostream& null_stream() {
        struct null_buffer : std::streambuf {
            int overflow(int c) override { return c; }
        };
        static thread_local null_buffer buffer;
        static thread_local std::ostream stream(&buffer);
        return stream;
    }

    config::batching m_batching;
    std::unique_ptr<executor<M>> m_executor;  // owns threads: held by pointer so sessions move
    std::vector<M> m_models;
    output_selection m_outputs;
    std::size_t m_calls = 0;
    emulator::host_clock m_host;
    host_work m_host_work;
};

/// A training session of `model` under config `C` (PopTorch's poptorch.trainingModel).
template <config::Config C, StagedModel M>
[[nodiscard]] session<C, M> training_model(const M& model, config::options options = {}, session_options settings = {}) {
    static_assert(C::is_training, "tessera::exec::training_model: the config is for inference (use inference_model)");
    return session<C, M>(model, options, settings);
}

/// An inference session: the config's inference form (G = 1, default outputs `all`).
template <config::Config C, StagedModel M>
[[nodiscard]] session<typename C::for_inference, M> inference_model(const M& model, config::options options = {},
                                                                     session_options settings = {}) {
    options.gradient_accumulation.reset();
    return session<typename C::for_inference, M>(model, options, settings);
}

}  // namespace tessera::exec
