#pragma once
// Runs a static schedule on emulated IPU threads: R replicas, D device iterations, output modes.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tessera/config/counts.hpp"
#include "tessera/detail/function_ref.hpp"
#include "tessera/config/error.hpp"
#include "tessera/config/output_mode.hpp"
#include "tessera/emulator/collective_group.hpp"
#include "tessera/emulator/spsc_channel.hpp"
#include "tessera/emulator/cluster.hpp"
#include "tessera/emulator/worker.hpp"
#include "tessera/exec/concepts.hpp"
#include "tessera/exec/cost.hpp"
#include "tessera/exec/cross_process.hpp"
#include "tessera/exec/detail/slots.hpp"
#include "tessera/exec/detail/wiring.hpp"
#include "tessera/exec/memory_plan.hpp"
#include "tessera/exec/run_result.hpp"
#include "tessera/exec/schedule.hpp"
#include "tessera/exec/timing.hpp"
#include "tessera/optim/square_sum.hpp"

namespace tessera::exec {

/// The executor of one compiled schedule: owns the emulated IPUs (R × IPUs per replica).
/// @code
///   auto sched = make_schedule<config::pipelined<config::gpipe, 2>>(/*G=*/4);
///   executor<my_model> ex(sched, costs, /*replicas=*/2);
///   auto result = ex.run(models, feed, /*device_iterations=*/3, output_selection{});
/// @endcode
template <StagedModel M>
class executor {
public:
    using tensor = typename M::tensor;
    using label = typename M::label;

    /// Plans memory (out_of_device_memory when over budget, before anything runs) and starts the IPU threads.
    /// `record_trace`: keep every interval of the modelled clocks (for timelines); off saves time.
    executor(schedule sched, cost_model costs, std::size_t replicas = 1, emulator::device_spec spec = {},
             config::reduction reduce = config::reduction::mean, bool record_trace = true,
             cross_process_reduction across = {})
        : m_schedule(std::move(sched)), m_costs(std::move(costs)), m_replicas(replicas), m_reduce(reduce),
          m_across(std::move(across)),
          m_plan(check_and_plan(m_schedule, m_costs, replicas * m_across.processes, spec, m_across)),
          m_cluster(replicas * m_schedule.ipus, spec, record_trace), m_charges(m_schedule, m_costs, spec) {}

    [[nodiscard]] const schedule& program() const noexcept { return m_schedule; }
    [[nodiscard]] const memory_plan& plan() const noexcept { return m_plan; }
    [[nodiscard]] const cost_model& costs() const noexcept { return m_costs; }
    [[nodiscard]] std::size_t replicas() const noexcept { return m_replicas; }
    /// Messages each real IPU-to-IPU channel holds: at least the schedule's channel_capacity (so
    /// the lists cannot deadlock) and up to a step's micro-batches, at most max_link_depth and at
    /// most max_link_bytes of the largest message the cost model names, so a stage that is ahead
    /// keeps working instead of handing its core back at every message. Only the real clock sees
    /// the depth: the modelled clock follows each message's ready time, and the memory plan counts
    /// the schedule's channel_capacity, as the device would buffer.
    [[nodiscard]] std::size_t link_depth() const noexcept {
        std::size_t largest = 0;
        for (const auto& c : m_costs.stages) largest = std::max({largest, c.input_bytes, c.output_bytes});
        const std::size_t by_bytes = largest == 0 ? max_link_depth : std::max<std::size_t>(1, max_link_bytes / largest);
        return std::max(m_schedule.channel_capacity,
                        std::min({m_schedule.request.micro_batches, max_link_depth, by_bytes}));
    }
    static constexpr std::size_t max_link_depth = 256;
    static constexpr std::size_t max_link_bytes = std::size_t{64} << 20;
    [[nodiscard]] emulator::cluster& devices() noexcept { return m_cluster; }
    /// Whether each call keeps every instruction's wall-clock span on each emulated IPU's thread
    /// (run_result::wall_spans, for traces): two clock reads per instruction; off by default.
    void measure_wall_spans(bool on) noexcept { m_measure = on; }

    /// Runs the schedule `iterations` times (training: D weight updates) on `models` (one per replica).
    /// feed(r, d, m) -> {input, label} runs on one host thread per replica (kept between calls).
    /// Outputs the output mode drops stay on the devices (final and every_n send only what they
    /// return). Any failure (a stage, the feed) stops every thread and is rethrown here; the models
    /// then hold partly accumulated gradients and possibly some updated stages: reload their
    /// weights before running again.
    template <class Feed>
        requires MicroBatchFeed<Feed, M>
    run_result<tensor> run(std::span<M> models, Feed&& feed, std::size_t iterations, output_selection outputs) {
        return run_fed(models, feed_function(feed), iterations, outputs);
    }

    /// What run() calls any feed through: one indirect call per micro-batch, and run_fed compiled
    /// once per model type instead of once per feed type.
    using feed_function = tessera::detail::function_ref<std::pair<input_t<M>, label>(std::size_t, std::size_t, std::size_t)>;

    /// run() with the feed type-erased.
    run_result<tensor> run_fed(std::span<M> models, feed_function feed, std::size_t iterations, output_selection outputs) {
        if (models.size() != m_replicas)
            throw config::config_error("tessera::exec::executor::run: " + std::to_string(models.size()) +
                                       " models for " + std::to_string(m_replicas) + " replicas");
        for (const auto& m : models)
            if (m.stages() != m_schedule.stages)
                throw config::config_error("tessera::exec::executor::run: the model has " +
                                           std::to_string(m.stages()) + " stages, the schedule " +
                                           std::to_string(m_schedule.stages));
        if (iterations == 0) throw config::config_error("tessera::exec::executor::run: device iterations must be >= 1");
        if constexpr (ShardedOptimizerModel<M>)
            if (m_schedule.optimizer_sharded())
                for (std::size_t r = 0; r < models.size(); ++r) {
                    const std::size_t shards = models[r].optimizer_shards(), index = m_across.rank * m_replicas + r;
                    if (shards != m_schedule.request.replicas || models[r].optimizer_shard_index() != index)
                        throw config::config_error(
                            "tessera::exec::executor::run: replica " + std::to_string(index) + " of " +
                            std::to_string(m_schedule.request.replicas) + " must keep that shard of the optimiser "
                            "state (shard_optimizer_state), its model keeps shard " +
                            std::to_string(models[r].optimizer_shard_index()) + " of " + std::to_string(shards));
                }
        if (outputs.kind == config::output_kind::every_n && outputs.period == 0)
            throw config::config_error("tessera::exec::executor::run: every_n needs N > 0");
        const auto wall_start = std::chrono::steady_clock::now();
        const double wall_origin = std::chrono::duration<double>(wall_start.time_since_epoch()).count();
        const std::size_t R = m_replicas, I = m_schedule.ipus, M_ = m_schedule.request.micro_batches;
        const bool training = m_schedule.request.training;

        // The channels (IPU-to-IPU per replica and direction; infeed, labels and outfeed per replica),
        // collectives and per-IPU value tables, kept for the next call with the same device
        // iterations when this one succeeds (every channel drained, every table empty).
        if (!m_wiring || m_wired_iterations != iterations) {
            m_wiring.reset();
            m_wiring = wire(iterations);
            m_wired_iterations = iterations;
        }
        wiring& w = *m_wiring;
        for (auto& c : w.infeed) m_cluster.on_abort([p = c.get()] { p->close(); });
        for (auto& c : w.labels) m_cluster.on_abort([p = c.get()] { p->close(); });
        for (auto& c : w.outfeed) m_cluster.on_abort([p = c.get()] { p->close(); });
        for (auto& [k, c] : w.links) m_cluster.on_abort([p = c.get()] { p->close(); });
        for (auto& g : w.reduce) m_cluster.on_abort([p = g.get()] { p->abort(); });
        for (auto& g : w.gather) m_cluster.on_abort([p = g.get()] { p->abort(); });
        for (auto& g : w.votes) m_cluster.on_abort([p = g.get()] { p->abort(); });

        for (std::size_t d = 0; d < m_cluster.size(); ++d) m_cluster[d].clock().reset();
        m_wall_spans.assign(m_measure ? m_cluster.size() : 0, {});

        // The host side: one feeder thread per replica (kept between calls) does the real work of
        // preparing micro-batches. A failing feed aborts the devices; a closed infeed means a device
        // failed, and its error is the one reported.
        while (m_feeders.size() < R) m_feeders.push_back(std::make_unique<emulator::worker>());
        for (std::size_t r = 0; r < R; ++r)
            m_feeders[r]->launch(
                [&, r] {
                    try {
                        for (std::size_t d = 0; d < iterations; ++d)
                            for (std::size_t m = 0; m < M_; ++m) {
                                std::pair<input, label> xy = feed(r, d, m);
                                auto& [x, y] = xy;
                                const auto u = [](std::size_t v) { return static_cast<std::uint32_t>(v); };
                                w.infeed[r]->emplace(std::move(x), 0.0, 0u, u(m), u(d));
                                if (training) w.labels[r]->emplace(std::move(y), 0.0, 0u, u(m), u(d));
                            }
                    } catch (const emulator::channel_closed&) {
                    }
                },
                [this](std::exception_ptr) { m_cluster.abort(); });

        const std::size_t all_replicas = R * m_across.processes;
        const float scale = m_reduce == config::reduction::mean ? 1.0f / static_cast<float>(M_ * all_replicas) : 1.0f;
        std::vector<emulator::ipu::job> jobs;
        std::vector<detail::overlapped_io> io(R * I);  // each (replica, IPU)'s I/O tiles, used by its thread only
        for (std::size_t r = 0; r < R; ++r)
            for (std::size_t i = 0; i < I; ++i)
                jobs.push_back([&, r, i](emulator::ipu& dev) {
                    dev.clock().host_sync();
                    auto& tiles = io[r * I + i];
                    tiles.start(dev.clock().now());
                    for (std::size_t d = 0; d < iterations; ++d)
                        run_program(dev, models[r], w, r, i, d, iterations, outputs, scale, tiles);
                    if (m_costs.io_tiles > 0) tiles.drain(dev.clock());
                    dev.clock().host_sync();
                });
        std::exception_ptr device_error;
        try {
            m_cluster.run(std::move(jobs));
        } catch (...) {
            device_error = std::current_exception();
        }
        std::exception_ptr feed_error;
        for (std::size_t r = 0; r < R; ++r)
            if (auto e = m_feeders[r]->join(); e && !feed_error) feed_error = e;
        if (feed_error || device_error) m_wiring.reset();  // closed channels, values left behind: rebuild
        if (feed_error) std::rethrow_exception(feed_error);
        if (device_error) std::rethrow_exception(device_error);

        run_result<tensor> result = collect(w, iterations, outputs);
        if (m_schedule.lock_step_cycles()) {
            // Lock-step cycles: the IPU threads ran as dataflow, each pass as soon as its inputs
            // arrived (threads meeting at every cycle cost wall time: bench_pipeline_speedup), and
            // every replica's clocks are the cycle-by-cycle replay a dry run makes of the same
            // instructions and charges.
            const auto& first = m_cluster[0].clock();
            const auto replica = simulate(m_schedule, m_costs, first.spec(), iterations, outputs, first.recording());
            for (std::size_t r = 0; r < R; ++r) result.clocks.insert(result.clocks.end(), replica.begin(), replica.end());
        } else {
            for (std::size_t d = 0; d < m_cluster.size(); ++d) result.clocks.push_back(m_cluster[d].clock());
        }
        for (const auto& clock : result.clocks) result.modelled_seconds = std::max(result.modelled_seconds, clock.now());
        result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
        result.wall_start = wall_origin;
        result.wall_spans = std::move(m_wall_spans);
        return result;
    }

private:
    // Stage s recomputes from an input the executor keeps, not from the model's own stash.
    [[nodiscard]] bool executor_recomputes(std::size_t s) const noexcept {
        return m_costs.stages[s].recompute && !m_costs.stages[s].model_recomputes;
    }
    using input = input_t<M>;
    using wiring = detail::wiring<tensor, label, typename M::stash, input>;
    template <class T>
    using message = detail::message<T>;
    using out_message = detail::out_message<tensor>;
    using outcome = detail::outcome<tensor>;
    using program_state = typename wiring::program_state;

    std::unique_ptr<wiring> wire(std::size_t iterations) const {
        return detail::make_wiring<tensor, label, typename M::stash, input>(m_schedule, m_replicas, iterations,
                                                                            link_depth(), m_across);
    }

    // `replicas`: over all processes (the schedule's all-reduces and their modelled cost count them all).
    static memory_plan check_and_plan(const schedule& sched, const cost_model& costs, std::size_t replicas,
                                      const emulator::device_spec& spec, const cross_process_reduction& across) {
        if (replicas == 0) throw config::config_error("tessera::exec::executor: replicas and processes must be at least 1");
        if ((replicas > 1) != (sched.request.replicas > 1) || (replicas > 1 && sched.request.replicas != replicas))
            throw config::config_error("tessera::exec::executor: the schedule was made for " +
                                       std::to_string(sched.request.replicas) + " replicas, the executor has " +
                                       std::to_string(replicas));
        if (sched.optimizer_sharded()) {
            if (!ShardedOptimizerModel<M>)
                throw config::config_error("tessera::exec::executor: the schedule shards the optimiser state, and "
                                           "this model cannot keep a shard of it (see ShardedOptimizerModel)");
            if (across.processes > 1 && (!across.gather || ((sched.request.check_overflow || sched.request.gradient_norm || sched.request.tied_table) && !across.vote)))
                throw config::config_error("tessera::exec::executor: sharded optimiser state over " +
                                           std::to_string(across.processes) + " processes needs the cross-process "
                                           "all-gather and vote (dist::gradient_reduction gives them)");
        }
        if (sched.request.training && sched.request.tied_table && !TiedStagesModel<M>)
            throw config::config_error("tessera::exec::executor: the schedule adds a tied table's gradients, and this "
                                       "model has none to give (see TiedStagesModel)");
        if (sched.request.training && sched.request.gradient_norm) {
            if (!NormClippedModel<M>)
                throw config::config_error("tessera::exec::executor: the schedule clips by the global gradient norm, and "
                                           "this model cannot give its part of it (see NormClippedModel)");
            const std::size_t voters = sched.optimizer_sharded() ? replicas * sched.ipus : sched.ipus;
            if (voters > optim::square_sum::max_participants)
                throw config::config_error("tessera::exec::executor: the gradient-norm vote has " + std::to_string(voters) +
                                           " voters; its exact sums hold " +
                                           std::to_string(optim::square_sum::max_participants) + " at most");
        }
        return plan_memory(sched, costs, spec);
    }

    // The outfeed of each replica, in micro-batch order, selected by the output mode (`sum`: the
    // total the device sent with the last micro-batch).
    run_result<tensor> collect(wiring& w, std::size_t iterations, output_selection outputs) {
        const std::size_t R = m_replicas, M_ = m_schedule.request.micro_batches, count = iterations * M_;
        const bool training = m_schedule.request.training;
        run_result<tensor> result;
        result.losses.resize(R);
        result.outputs.resize(R);
        result.selected.resize(R);
        if (training && ScoredModel<M>) result.scores.resize(R);
        for (std::size_t r = 0; r < R; ++r) {
            // The outfeed holds what the device sent, usually in order.
            std::vector<out_message> sent;
            w.outfeed[r]->drain([&](out_message&& o) { sent.push_back(std::move(o)); });
            const auto index = [M_](const out_message& o) { return o.iteration * M_ + o.micro_batch; };
            std::vector<std::size_t> order(sent.size());
            std::iota(order.begin(), order.end(), std::size_t{0});
            std::sort(order.begin(), order.end(),
                      [&](std::size_t a, std::size_t b) { return index(sent[a]) < index(sent[b]); });
            std::size_t next = 0;
            for (std::size_t k = 0; k < count; ++k) {
                if (!outputs.sends(k, count)) continue;
                if (next == sent.size() || index(sent[order[next]]) != k)
                    throw std::logic_error("tessera::exec::executor: micro-batch " + std::to_string(k) +
                                           " produced no output");
                auto& o = sent[order[next++]];
                if (outputs.kind == config::output_kind::sum) {
                    for (std::size_t j = 0; j < count; ++j) result.selected[r].push_back(j);
                } else {
                    result.selected[r].push_back(k);
                }
                if (training) {
                    result.losses[r].push_back(o.loss);
                    if constexpr (ScoredModel<M>) result.scores[r].push_back(o.hits);
                } else if (o.output) {
                    result.outputs[r].push_back(std::move(*o.output));
                }
            }
            if (next != sent.size())
                throw std::logic_error("tessera::exec::executor: the outfeed holds " + std::to_string(sent.size()) +
                                       " outputs for " + std::to_string(next) + " selected micro-batches");
        }
        return result;
    }

    // `sum` of inference outputs: element-wise, on the device that computes them.
    static void add_output(std::optional<tensor>& into, tensor&& value) {
        if constexpr (requires(tensor& a, const tensor& b) { a.size(); a[0] += b[0]; }) {
            if (!into) {
                into.emplace(std::move(value));
                return;
            }
            auto& acc = *into;
            if (acc.size() != value.size())
                throw config::config_error("tessera::exec::executor: output mode 'sum' cannot add outputs of " +
                                           std::to_string(value.size()) + " and " + std::to_string(acc.size()) +
                                           " elements (the micro-batches of a padded tail are shorter: use 'all')");
            for (std::size_t j = 0; j < acc.size(); ++j) acc[j] += value[j];
        } else {
            throw config::config_error("tessera::exec::executor: output mode 'sum' needs outputs that can be "
                                       "added element-wise");
        }
    }

    // Receives instruction `in`'s message into `into` (stage s, micro-batch m) and waits for its
    // modelled arrival.
    // `convert` turns the payload into what the slot holds (identity but for prepared inputs).
    template <class T, class U, class Convert = std::identity>
    static void receive(emulator::spsc_channel<message<T>>& ch, detail::slots<U>& into, std::uint32_t s,
                        emulator::ipu& dev, const instruction& in, std::size_t d, Convert convert = {}) {
        double ready_at = 0;
        const bool got = ch.receive_into([&](message<T>& msg) {
            if (msg.micro_batch != in.micro_batch || msg.iteration != d) [[unlikely]]
                unexpected(&msg, dev, in);
            ready_at = msg.ready_at;
            into.put(s, in.micro_batch, convert(std::move(msg.payload)));
        });
        if (!got) [[unlikely]]
            unexpected<T>(nullptr, dev, in);
        if (dev.clock().recording())
            dev.clock().wait_until(ready_at, "wait " + to_string(in));
        else
            dev.clock().wait_until(ready_at);
    }
    template <class T>
    [[noreturn, gnu::cold, gnu::noinline]] static void unexpected(const message<T>* msg, const emulator::ipu& dev,
                                                                  const instruction& in) {
        if (!msg)
            throw emulator::channel_closed("tessera::exec::executor: IPU " + std::to_string(dev.id()) + ": '" +
                                           to_string(in) + "' found its channel closed");
        throw std::logic_error("tessera::exec::executor: IPU " + std::to_string(dev.id()) + ": '" + to_string(in) +
                               "' received micro-batch " + std::to_string(msg->micro_batch) + " of iteration " +
                               std::to_string(msg->iteration));
    }

    void run_program(emulator::ipu& dev, M& model, wiring& w, std::size_t r, std::size_t i, std::size_t d,
                     std::size_t iterations, output_selection outputs, float scale, detail::overlapped_io& io) {
        program_state& state = *w.state[r * m_schedule.ipus + i];
        auto& [inputs, grads, stashes, kept_inputs, labels, results, sums] = state;
        auto& clock = dev.clock();
        const bool training = m_schedule.request.training;
        const auto S = static_cast<std::uint32_t>(m_schedule.stages);
        const auto u = [](std::size_t v) { return static_cast<std::uint32_t>(v); };

        const std::size_t M_ = m_schedule.request.micro_batches;
        const auto& program = m_schedule.programs[i];
        const auto& links = w.link_of[r * m_schedule.ipus + i];
        bool skip_updates = false;  // set by this step's vote
        const bool split = m_schedule.backward_split();  // bwd, then bwd_weights
        // Each instruction's span on the modelled clock (when it records) and on the wall clock (when
        // measuring), closed when the next one starts: the loop's cases end with `continue` or not.
        std::vector<emulator::instruction_span>* wall = m_measure ? &m_wall_spans[r * m_schedule.ipus + i] : nullptr;
        const bool spans = clock.recording() || wall;
        double began = clock.now(), wall_began = wall ? wall_now() : 0.0;
        const auto close_span = [&](std::size_t at) {
            clock.record_span(u(at), u(d), began);
            began = clock.now();
            if (wall) {
                const double t = wall_now();
                wall->push_back({u(at), u(d), wall_began, t});
                wall_began = t;
            }
        };
        for (std::size_t pc = 0; pc < program.size(); ++pc) {
            if (spans && pc > 0) close_span(pc - 1);
            const instruction& in = program[pc];
            const std::uint32_t s = in.stage, m = in.micro_batch;
            switch (in.op) {
                case opcode::load:
                    if constexpr (PreparedInputModel<M>)  // e.g. 8-bit pixels, normalised here on the IPU
                        receive(*w.infeed[r], inputs, 0, dev, in, d, [&model, m](input&& x) {
                            if constexpr (requires { model.prepare(std::move(x), m); })
                                return model.prepare(std::move(x), m);
                            else
                                return model.prepare(std::move(x));
                        });
                    else
                        receive(*w.infeed[r], inputs, 0, dev, in, d);
                    if (m_costs.io_tiles > 0) io.receive(clock, detail::host_input_seconds(in, m_costs, clock.spec()), in);
                    break;
                case opcode::load_label:
                    receive(*w.labels[r], labels, 0, dev, in, d);
                    if (m_costs.io_tiles > 0) io.receive(clock, detail::host_input_seconds(in, m_costs, clock.spec()), in);
                    break;
                case opcode::recv_act:
                    receive(*links[pc], inputs, s, dev, in, d);
                    break;
                case opcode::recv_grad:
                    receive(*links[pc], grads, s, dev, in, d);
                    break;
                case opcode::fwd: {
                    tensor x = inputs.take(s, m, in);
                    const bool keeps_input = training && executor_recomputes(s);
                    if (keeps_input) kept_inputs.put(s, m, tensor(x));
                    auto [y, st] = [&] {
                        if constexpr (StochasticRoundingModel<M>)
                            return model.forward(s, std::move(x), m);
                        else
                            return model.forward(s, std::move(x));
                    }();
                    if (training && !keeps_input) stashes.put(s, m, std::move(st));
                    if (s + 1 < S) {
                        inputs.put(s + 1, m, std::move(y));
                    } else if (training) {
                        const label target = labels.take(0, m, in);
                        auto [loss, g] = [&] {
                            if constexpr (StochasticRoundingModel<M>)
                                return model.loss(y, target, m);
                            else
                                return model.loss(y, target);
                        }();
                        grads.put(s, m, std::move(g));
                        top1_score hits{};
                        if constexpr (ScoredModel<M>) hits = model.score(y, target);
                        results.put(0, m, outcome{loss, hits, std::nullopt});
                    } else {
                        results.put(0, m, outcome{0.0f, {}, std::move(y)});
                    }
                    break;
                }
                case opcode::send_act: {
                    m_charges.apply(clock, i, pc);
                    tensor y = inputs.take(s + 1, m, in);
                    links[pc]->emplace(std::move(y), clock.now(), s, m, u(d));
                    continue;  // already charged
                }
                case opcode::outfeed: {
                    auto result = results.take(0, m, in);
                    const std::size_t k = d * M_ + m, count = iterations * M_;
                    // Outputs the call's output mode drops stay on the device, as PopTorch's anchors do;
                    // `sum` adds them here, in micro-batch order, and sends the total with the last one.
                    if (outputs.kind == config::output_kind::sum) {
                        state.sum.loss += result.loss;
                        state.sum.hits += result.hits;
                        if (result.output) add_output(state.sum.output, std::move(*result.output));
                        if (k + 1 != count) continue;
                        result = std::exchange(state.sum, outcome{});
                    } else if (!outputs.selects(k, count)) {
                        continue;
                    }
                    detail::charge_outfeed(clock, in, m_schedule, m_costs, m_costs.io_tiles > 0 ? &io : nullptr);
                    w.outfeed[r]->emplace(d, m, result.loss, result.hits, std::move(result.output));
                    continue;
                }
                case opcode::bwd: {
                    tensor g = grads.take(s, m, in);
                    typename M::stash st = [&] {
                        if (executor_recomputes(s)) {
                            tensor x = kept_inputs.take(s, m, in);
                            if constexpr (requires { { model.recompute(s, std::move(x), m) } -> std::same_as<typename M::stash>; })
                                return model.recompute(s, std::move(x), m);
                            else if constexpr (requires { { model.recompute(s, std::move(x)) } -> std::same_as<typename M::stash>; })
                                return model.recompute(s, std::move(x));
                            else
                                return model.forward(s, std::move(x)).second;
                        }
                        return stashes.take(s, m, in);
                    }();
                    tensor gx = [&] {
                        if constexpr (SplitBackwardModel<M>) {
                            if (split) {  // the weight gradients wait in the stash for bwd_weights
                                tensor dx = model.backward_input(s, std::move(g), st);
                                stashes.put(s, m, std::move(st));
                                return dx;
                            }
                        }
                        return model.backward(s, std::move(g), std::move(st));
                    }();
                    if (s > 0) grads.put(s - 1, m, std::move(gx));
                    break;
                }
                case opcode::bwd_weights:
                    if constexpr (SplitBackwardModel<M>) model.backward_weights(s, stashes.take(s, m, in));
                    break;
                case opcode::send_grad: {
                    m_charges.apply(clock, i, pc);
                    tensor g = grads.take(s - 1, m, in);
                    links[pc]->emplace(std::move(g), clock.now(), s, m, u(d));
                    continue;
                }
                case opcode::all_reduce: {
                    const double latest = w.reduce[s]->reduce(r, model.gradients(s), clock.now());
                    clock.wait_until(latest, clock.recording() ? "wait all_reduce s" + std::to_string(s) : std::string());
                    break;
                }
                case opcode::reduce_scatter:
                case opcode::all_gather:
                    if constexpr (ShardedOptimizerModel<M>) {
                        const optim::element_range shard = model.optimizer_shard(s);
                        const bool gather = in.op == opcode::all_gather;
                        auto& group = gather ? *w.gather[s] : *w.reduce[s];
                        const auto data = gather ? model.weights(s) : model.gradients(s);
                        const double latest = gather ? group.all_gather(r, data, shard.begin, shard.end, clock.now())
                                                     : group.reduce_scatter(r, data, shard.begin, shard.end, clock.now());
                        if (gather) model.put_weights(s);
                        clock.wait_until(latest, clock.recording() ? "wait " + to_string(in) : std::string());
                    }
                    break;
                case opcode::vote: {
                    const bool across_replicas = m_schedule.optimizer_sharded();  // (each replica has its shard's sums)
                    auto& group = *w.votes[across_replicas ? 0 : r];
                    const std::size_t rank = across_replicas ? r * m_schedule.ipus + i : i;
                    const auto on_this_ipu = [&](std::size_t t) { return m_schedule.request.ipu_of_stage[t] == i; };
                    if constexpr (TiedStagesModel<M>)
                        if (m_schedule.request.tied_table) {  // first the tied table's two copies' gradients
                            std::vector<float> sum(model.tied_elements(), 0.0f);
                            for (std::size_t t = 0; t < m_schedule.stages; ++t)
                                if (on_this_ipu(t)) model.add_tied_gradient(t, sum);
                            clock.wait_until(group.reduce(rank, sum, clock.now()),
                                             clock.recording() ? "wait tied table" : std::string());
                            for (std::size_t t = 0; t < m_schedule.stages; ++t)
                                if (on_this_ipu(t)) model.set_tied_gradient(t, sum);
                        }
                    // The ballot: whether a gradient overflowed, then (clipping) the IPU's part of the
                    // squared global norm as exact chunks, whose float sums in the vote stay exact.
                    std::array<float, 1 + optim::square_sum::chunk_count> ballot{};
                    if constexpr (OverflowCheckedModel<M>)
                        if (m_schedule.request.check_overflow)
                            for (std::size_t t = 0; t < m_schedule.stages; ++t)
                                if (on_this_ipu(t) && !model.gradients_finite(t)) ballot[0] = 1.0f;
                    const bool norm = m_schedule.request.gradient_norm;
                    if constexpr (NormClippedModel<M>)
                        if (norm) {
                            optim::square_sum part;
                            for (std::size_t t = 0; t < m_schedule.stages; ++t)
                                if (on_this_ipu(t)) part += model.gradient_squares(t, scale);
                            part.to_chunks(std::span<float>(ballot).subspan(1));
                        }
                    // Sharded optimiser state: a replica checks its shard of the sums, so all replicas vote together.
                    const double latest = group.reduce(rank, std::span<float>(ballot).first(norm ? ballot.size() : 1), clock.now());
                    clock.wait_until(latest, clock.recording() ? "wait vote" : std::string());
                    skip_updates = ballot[0] > 0.0f;
                    if constexpr (NormClippedModel<M>)
                        if (norm) {
                            const auto total = optim::square_sum::from_chunks(std::span<const float>(ballot).subspan(1));
                            for (std::size_t t = 0; t < m_schedule.stages; ++t)
                                if (on_this_ipu(t)) model.set_gradient_squares(t, total);
                        }
                    break;
                }
                case opcode::update:
                    if constexpr (OverflowCheckedModel<M>) {
                        if (skip_updates) {
                            model.skip_update(s);
                            break;
                        }
                    }
                    if constexpr (requires(optim::replica_sum f) { model.update(s, scale, f); }) {
                        if (m_schedule.optimizer_sharded()) {  // sums over every replica's shard, on stage s's group
                            const auto across = [&](std::span<float> v) {
                                const double latest = w.reduce[s]->reduce(r, v, clock.now());
                                clock.wait_until(latest, clock.recording() ? "wait shard sums s" + std::to_string(s) : std::string());
                            };
                            model.update(s, scale, across);
                            break;
                        }
                    }
                    model.update(s, scale);
                    break;
                case opcode::sync: break;  // lock-step cycles: the call's clocks are replayed after it (run_fed)
                case opcode::stream_in:
                case opcode::stream_out: break;
            }
            m_charges.apply(clock, i, pc);
        }
        if (spans && !program.empty()) close_span(program.size() - 1);
    }

    // Seconds on the steady clock (the origin of run_result::wall_spans and wall_start).
    [[nodiscard]] static double wall_now() noexcept {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    }

    schedule m_schedule;
    cost_model m_costs;
    std::size_t m_replicas;
    config::reduction m_reduce;
    cross_process_reduction m_across;
    memory_plan m_plan;
    emulator::cluster m_cluster;
    detail::charge_table m_charges;
    std::unique_ptr<wiring> m_wiring;
    std::size_t m_wired_iterations = 0;
    std::vector<std::unique_ptr<emulator::worker>> m_feeders;  // one host thread per replica
    bool m_measure = false;  // keep each instruction's wall-clock span (measure_wall_spans)
    std::vector<std::vector<emulator::instruction_span>> m_wall_spans;  // per device, this call's
};

}  // namespace tessera::exec
