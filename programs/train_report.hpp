#pragma once
// What tessera-train prints and writes: sizes, the configuration (as text for checkpoints and as
// JSON for --metrics-json), and at the end of training the test accuracy, both clocks' throughput,
// each IPU's memory, --metrics-json and --timeline.
#include <tessera/tessera.hpp>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "train_loop.hpp"
#include "train_request.hpp"

namespace tessera::programs {

inline std::string mib(std::size_t bytes) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
    return b;
}

/// What was compiled, read from the configuration type `C`, the network, the optimizer and the
/// session made from them (not from the flags): precision, parameters, optimizer, strategy and
/// schedule, stages and where they start, I/O, output mode, loss scale, recomputation.
/// tessera-train prints it after "Graph compilation".
template <config::Config C, class Model, class Net, class Optimizer>
[[nodiscard]] std::string compiled_text(const exec::basic_session<Model>& session, const exec::session_options& settings,
                                        Net& net, const Optimizer& optimizer) {
    using strategy = typename C::strategy;
    std::size_t parameters = 0;
    if constexpr (requires { net.parameters(); })
        parameters = net.parameters();  // a tied table counted once
    else
        net.visit_parameters([&](std::string_view, auto values, auto) { parameters += values.size(); });
    std::string text = "compiled: " + std::string(C::precision::name) + ", " + std::to_string(parameters) +
                       " parameters, " + optimizer.name() + " (" + std::to_string(optimizer.state_values_per_parameter()) +
                       " state values per parameter), " + std::string(strategy::name);
    if constexpr (strategy::kind == config::strategy_kind::pipelined) {
        const std::size_t chunks = session.batching().virtual_stages;  // run-time model chunks per IPU
        const auto zero_bubble = session.batching().zero_bubble;  // run-time split backward passes
        const bool breadth_first = config::detail::breadth_first<typename strategy::schedule>;
        text += chunks > 1 ? (breadth_first ? " looped-bfs<" : " interleaved<") + std::to_string(chunks) + ">"
                : zero_bubble == config::zero_bubble_kind::h1 ? std::string(" zero-bubble-h1")
                : zero_bubble == config::zero_bubble_kind::h2 ? std::string(" zero-bubble-h2")
                                                              : " " + std::string(strategy::schedule::name);
    }
    const std::size_t stages = session.batching().stages;
    text += ", " + std::to_string(stages) + (stages == 1 ? " stage" : " stages");
    if (!settings.first_units.empty()) {
        text += " from";
        for (std::size_t s = 0; s < settings.first_units.size(); ++s)
            text += (s == 0 ? " " : ", ") + net.unit_name(settings.first_units[s]);
    }
    text += C::io_policy::is_eight_bit ? ", 8-bit I/O" : ", float I/O";
    const exec::output_selection outputs = session.outputs();
    text += ", output mode ";
    switch (outputs.kind) {
        case config::output_kind::final: text += "final"; break;
        case config::output_kind::all: text += "all"; break;
        case config::output_kind::sum: text += "sum"; break;
        case config::output_kind::every_n: text += "every " + std::to_string(outputs.period); break;
    }
    const auto scale = session.model().loss_scaling_state().scale;
    char figure[64];
    std::snprintf(figure, sizeof figure, ", loss scale %g%s", scale.empty() ? 1.0 : double(scale.front()),
                  settings.dynamic_loss_scaling.value_or(false) ? " (dynamic)" : "");
    text += figure;
    std::size_t recomputed = 0;
    for (const bool r : settings.recompute) recomputed += r ? 1 : 0;
    if (recomputed > 0) text += ", recomputation on " + std::to_string(recomputed) + " of " + std::to_string(stages) + " stages";
    if (!settings.recompute_checkpoints.empty())
        text += ", recomputation checkpoints at " + std::to_string(settings.recompute_checkpoints.size()) + " units";
    // What rounds stochastically: 16-bit weights (the optimizer's option) and 16-bit activations and
    // their gradients (the session's).
    constexpr bool half_weights = C::precision::weight_bits == 16;
    const bool weights = half_weights && optimizer.rounding().stochastic, activations = settings.stochastic_rounding.has_value();
    if (weights || activations)
        text += std::string(", stochastic rounding of ") + (weights ? (activations ? "weights, " : "weights") : "") +
                (activations ? "activations and gradients" : "");
    if (session.program().optimizer_sharded())
        text += ", optimiser state sharded over " + std::to_string(session.program().request.replicas) + " replicas";
    if (session.program().request.gradient_norm) {
        std::snprintf(figure, sizeof figure, ", gradients clipped to a global norm of %g", optimizer.options().max_grad_norm);
        text += figure;
    }
    return text;
}

/// What a checkpoint must have been made for: everything that shapes the weights and the data order.
/// The input replica group is in it (replicas that share an input slice see other samples); not in
/// it, as they change no bit of the weights: optimiser sharding, --eight-bit-io (8-bit images are
/// normalised on the device by the arithmetic the host applies to float I/O: a checkpoint is the same
/// file either way), the loader's workers and --async-dataloader.
inline std::string configuration_text(const train_request& r, std::size_t images) {
    std::string split;
    for (const auto& c : r.split) split += c + ",";
    return r.model + " " + r.dataset + " images=" + std::to_string(images) + " b=" + std::to_string(r.batch_size) +
           " " + r.precision + " " + r.loss_scaling + " G=" + std::to_string(r.gradient_accumulation) +
           " D=" + std::to_string(r.device_iterations) + " R=" + std::to_string(r.replicas) +
           " input-group=" + std::to_string(r.input_replica_group) + " " + r.strategy + " " +
           r.schedule + (runs_chunks(r) ? " chunks=" + std::to_string(r.virtual_stages) : std::string()) +
           " ipus=" + std::to_string(r.ipus_per_replica) + " split=" + split + " " + r.optimizer +
           " lr=" + std::to_string(r.lr) +
           (std::isfinite(r.max_grad_norm) ? " max-grad-norm=" + std::to_string(r.max_grad_norm) : std::string()) +
           " epochs=" + std::to_string(r.epochs) + " seed=" + std::to_string(r.seed) +
           (r.stochastic_rounding ? " stochastic-rounding" : "");
}

/// The "configuration" member of --metrics-json: every flag that shapes the run. `images`: the
/// samples of an epoch (of a text model: sequences, with their length and tokenizer).
inline void write_configuration(report::json_writer& j, const train_request& r, std::size_t images, bool text = false) {
    std::string split;
    for (const auto& s : r.split) split += (split.empty() ? "" : ",") + s;
    j.key("configuration").begin_object();
    j.member("model", r.model).member("dataset", r.dataset).member("batch_size", r.batch_size);
    j.member("precision", r.precision).member("loss_scaling", r.loss_scaling);
    j.member("gradient_accumulation", r.gradient_accumulation).member("device_iterations", r.device_iterations);
    j.member("replicas", r.replicas).member("instances", r.instances).member("strategy", r.strategy);
    j.member("schedule", r.schedule).member("ipus_per_replica", ipus_per_replica_of(r)).member("split", split);
    j.member("virtual_stages", virtual_stages_of(r));
    j.key("layers_per_ipu").begin_array();
    for (const std::size_t n : r.layers_per_ipu) j.value(n);
    j.end_array();
    if (!r.layers_per_ipu.empty()) j.member("head_ipu", r.head_ipu);
    j.member("recompute", r.recompute).member("stochastic_rounding", r.stochastic_rounding);
    j.key("recompute_checkpoints").begin_array();
    for (const auto& name : r.recompute_checkpoints) j.value(name);
    j.end_array();
    j.member("optimizer_sharding", r.optimizer_sharding).member("optimizer_state_offchip", r.optimizer_state_offchip);
    j.member("io_tiles", r.io_tiles).member("partials", r.partials);
    if (r.available_memory_proportion.size() == 1) {
        j.member("available_memory_proportion", r.available_memory_proportion.front());
    } else {
        j.key("available_memory_proportion").begin_array();  // one per IPU of a replica
        for (const double amp : r.available_memory_proportion) j.value(amp);
        j.end_array();
    }
    j.member("dataflow", r.dataflow);
    j.member("eight_bit_io", r.eight_bit_io);
    j.member("async_dataloader", r.async_dataloader).member("workers", r.workers).member("host", r.host).member("ipu", r.ipu).member("device", r.device);
    j.member("output_mode", r.output_mode).member("epochs", r.epochs).member("lr", r.lr);
    j.member("optimizer", r.optimizer).member("seed", r.seed);
    if (text)
        j.member("sequences", images).member("seq_len", r.seq_len).member("tokenizer", r.tokenizer).member("dropout", r.dropout)
            .member("serialize_matmul", r.serialize_matmul).member("packing", r.packing).member("mask_tokens", r.mask_tokens);
    else
        j.member("images", images);
    if (std::isfinite(r.max_grad_norm)) j.member("max_grad_norm", r.max_grad_norm);  // absent: never clipped
    j.end_object();
}

/// The run's speed on both clocks (`trained` samples, called `noun`, in `wall` seconds here and
/// `modelled` seconds on the modelled IPUs and host) and each IPU's memory.
inline void print_speed_and_memory(const char* noun, double trained, double wall, double modelled,
                                   const config::batching& b, const exec::memory_plan& memory) {
    std::printf("throughput: %.0f %s/s on this machine, %.0f %s/s modelled on %zu IPUs and their host\n",
                wall > 0 ? trained / wall : 0.0, noun, modelled > 0 ? trained / modelled : 0.0, noun,
                b.replicas * b.ipus_per_replica);
    for (const auto& ipu : memory.ipus)
        std::printf("IPU %zu memory: %s of %s%s\n", ipu.ipu, mib(ipu.on_chip()).c_str(), mib(ipu.budget).c_str(),
                    b.replicas > 1 ? " (each replica)" : "");
}

/// What a finished training run reports (rank 0): the test accuracy, images/s on this machine and
/// on the modelled IPUs with their host, each IPU's memory; --metrics-json and --timeline
/// (`timeline`: the last call's modelled clocks, when kept).
inline void report_training(const train_request& r, std::size_t images, const config::batching& b,
                            const exec::memory_plan& memory, const std::vector<epoch_metrics>& history,
                            const exec::evaluation& test, const std::vector<emulator::modelled_clock>* timeline) {
    double wall = 0, modelled = 0, trained = 0;
    for (const auto& m : history) {
        wall += m.wall_seconds, modelled += m.modelled_seconds;
        trained += m.images_per_second * m.wall_seconds;
    }
    std::printf("test accuracy: %.2f%% of %zu images (loss %.3f)\n", 100.0 * test.accuracy(), test.samples, test.loss);
    print_speed_and_memory("images", trained, wall, modelled, b, memory);
    if (!r.metrics_json.empty()) {
        std::ofstream out(r.metrics_json);
        if (!out) throw std::runtime_error("cannot write " + r.metrics_json);
        report::json_writer j(out);
        j.begin_object();
        write_configuration(j, r, images);
        j.key("epochs").begin_array();
        for (std::size_t e = 0; e < history.size(); ++e) {
            const auto& m = history[e];
            j.begin_object().member("epoch", e + 1).member("loss", m.loss).member("accuracy", m.accuracy);
            j.member("wall_seconds", m.wall_seconds).member("modelled_seconds", m.modelled_seconds);
            j.member("images_per_second", m.images_per_second);
            j.member("modelled_images_per_second", m.modelled_images_per_second).end_object();
        }
        j.end_array();
        j.member("test_accuracy", test.accuracy()).member("test_loss", test.loss).member("test_images", test.samples);
        j.key("ipus").begin_array();
        for (const auto& ipu : memory.ipus)
            j.begin_object().member("ipu", ipu.ipu).member("memory_bytes", ipu.on_chip()).member("budget_bytes", ipu.budget).end_object();
        j.end_array();
        j.end_object();
        out << '\n';
    }
    if (!r.timeline.empty() && timeline) {
        std::ofstream out(r.timeline);
        if (!out) throw std::runtime_error("cannot write " + r.timeline);
        out << exec::timeline_svg(*timeline);
    }
}

}  // namespace tessera::programs
