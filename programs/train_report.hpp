#pragma once
// What tessera-train prints and writes: sizes, the configuration (as text for checkpoints and as
// JSON for --metrics-json), each IPU's memory.
#include <tessera/tessera.hpp>

#include <cstddef>
#include <cstdio>
#include <string>

#include "train_request.hpp"

namespace tessera::programs {

inline std::string mib(std::size_t bytes) {
    char b[32];
    std::snprintf(b, sizeof b, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
    return b;
}

/// What a checkpoint must have been made for: everything that shapes the weights and the data order.
inline std::string configuration_text(const train_request& r, std::size_t images) {
    std::string split;
    for (const auto& c : r.split) split += c + ",";
    return r.model + " " + r.dataset + " images=" + std::to_string(images) + " b=" + std::to_string(r.batch_size) +
           " " + r.precision + " " + r.loss_scaling + " G=" + std::to_string(r.gradient_accumulation) +
           " D=" + std::to_string(r.device_iterations) + " R=" + std::to_string(r.replicas) + " " + r.strategy + " " +
           r.schedule + " ipus=" + std::to_string(r.ipus_per_replica) + " split=" + split + " " + r.optimizer +
           " lr=" + std::to_string(r.lr) + " epochs=" + std::to_string(r.epochs) + " seed=" + std::to_string(r.seed);
}

/// The "configuration" member of --metrics-json: every flag that shapes the run.
inline void write_configuration(report::json_writer& j, const train_request& r, std::size_t images) {
    std::string split;
    for (const auto& s : r.split) split += (split.empty() ? "" : ",") + s;
    j.key("configuration").begin_object();
    j.member("model", r.model).member("dataset", r.dataset).member("batch_size", r.batch_size);
    j.member("precision", r.precision).member("loss_scaling", r.loss_scaling);
    j.member("gradient_accumulation", r.gradient_accumulation).member("device_iterations", r.device_iterations);
    j.member("replicas", r.replicas).member("instances", r.instances).member("strategy", r.strategy);
    j.member("schedule", r.schedule).member("ipus_per_replica", stages_of(r)).member("split", split);
    j.member("recompute", r.recompute).member("eight_bit_io", r.eight_bit_io);
    j.member("async_dataloader", r.async_dataloader).member("workers", r.workers).member("host", r.host);
    j.member("output_mode", r.output_mode).member("epochs", r.epochs).member("lr", r.lr);
    j.member("optimizer", r.optimizer).member("seed", r.seed).member("images", images);
    j.end_object();
}

}  // namespace tessera::programs
