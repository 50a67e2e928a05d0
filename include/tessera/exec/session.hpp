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
#include <utility>
#include <vector>

#include "tessera/config/batching.hpp"
#include "tessera/config/config.hpp"
#include "tessera/config/error.hpp"
#include "tessera/emulator/device_spec.hpp"
#include "tessera/exec/concepts.hpp"
#include "tessera/exec/executor.hpp"
#include "tessera/exec/memory_plan.hpp"
#include "tessera/exec/schedule.hpp"
#include "tessera/exec/staged_network.hpp"
#include "tessera/report/progress_bar.hpp"

namespace tessera::exec {

/// Settings of a session that are not policies.
struct session_options {
    emulator::device_spec device{};       ///< the emulated IPU's figures
    std::ostream* progress = nullptr;     ///< where the "Graph compilation" bar goes (none by default)
    bool record_trace = true;             ///< keep the modelled clocks' intervals (timeline reports)
    tensor_locations locations{};         ///< on chip or in Streaming Memory, per kind of tensor
    cross_process_reduction across{};     ///< instances > 1: the reduction across processes (tessera::dist)
    std::vector<std::size_t> first_units{};  ///< networks: the first unit of each stage (PopTorch's block
                                              ///< marks); empty = balanced automatically by FLOPs
    std::vector<bool> recompute{};  ///< networks: per stage, recompute the forward during backward instead of
                                    ///< stashing activations (PopTorch's recomputation checkpoints); empty = none
    std::size_t kernel_threads_per_ipu = 1;  ///< networks: threads for each IPU's kernels (more cores than
                                             ///< IPUs); results are the same as with one
};

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
public:
    using tensor = typename M::tensor;
    using label = typename M::label;

    session(const M& model, config::options options = {}, session_options settings = {})
        : m_batching(config::make_batching<C>(options)),
          m_executor(compile(model, m_batching, settings)),
          m_models(m_batching.local_replicas(), model) {}

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
        return m_executor->run(std::span<M>(m_models), grouped, iterations,
                               output_selection::of<typename C::output_mode>());
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
        using strategy = typename C::strategy;
        const std::size_t replicas = b.local_replicas();
        const std::size_t stages = strategy::stages;
        report::progress_bar bar(settings.progress ? *settings.progress : null_stream(), "Graph compilation",
                                 stages + 3, {.redraw = settings.progress ? report::redraw_mode::automatic
                                                                          : report::redraw_mode::never});
        if (model.stages() != stages)
            throw config::config_error("tessera::exec::session: the strategy has " + std::to_string(stages) +
                                       " stages, the model " + std::to_string(model.stages()));
        const std::size_t micro_batches = C::is_training ? b.gradient_accumulation : b.device_iterations;
        cross_process_reduction across = settings.across;
        if (b.instances > 1 && !across.reduce)
            throw config::config_error("tessera::exec::session: " + std::to_string(b.instances) +
                                       " instances need a cross-process reduction (session_options::across, from "
                                       "tessera::dist); without one the replicas of different processes would diverge");
        if (across.reduce) across.processes = b.instances;
        schedule_request request = request_for<strategy>(micro_batches, C::is_training, replicas * across.processes);
        // Dynamic loss scaling: a step's updates wait for its overflow vote, so all stages skip together.
        request.check_overflow = C::is_training && C::precision::loss_scaling::is_dynamic;
        schedule sched = make_schedule(request);
        bar.update();
        cost_model costs;
        costs.bits = C::precision::storage_bits;
        costs.locations = settings.locations;
        for (std::size_t s = 0; s < stages; ++s) {
            costs.stages.push_back(model.cost(s));
            bar.update();
        }
        describe_host_io(costs, b);
        bar.update();  // memory plan and threads: checked and started by the executor
        auto ex = std::make_unique<executor<M>>(std::move(sched), std::move(costs), replicas, settings.device,
                                                C::accumulation_reduction, settings.record_trace, std::move(across));
        bar.update();
        return ex;
    }
    // What crosses the host link per micro-batch, as the config's I/O policy sends it: the input at
    // its bytes per value (8-bit I/O: one, and the first IPU normalises it; float I/O to a 16-bit
    // model: four, and the IPU casts), class labels as 32-bit integers, and per selected micro-batch
    // the loss and top-1 score (training) or the output (inference).
    static void describe_host_io(cost_model& costs, const config::batching& b) {
        using io = typename C::io_policy;
        const double values = double(costs.stages.front().input_bytes) / (C::precision::storage_bits / 8.0);
        costs.infeed_bytes = static_cast<std::size_t>(values) * io::bytes_per_value;
        if (io::is_eight_bit || io::bytes_per_value * 8 != std::size_t(C::precision::storage_bits))
            costs.infeed_passes.push_back(nn::pass::elementwise(nn::pass_phase::forward, values, 2));
        if constexpr (C::is_training && std::is_same_v<label, class_labels>) costs.label_bytes = b.micro_batch * sizeof(std::int32_t);
        costs.output_bytes_to_host = sizeof(float) * (ScoredModel<M> ? 2 : 1);  // a loss, and an accuracy
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
