#pragma once
// From a request to what a session needs: its counts, loader, host and session options. Shared by
// training, the dry run and tessera-plan, so that a plan's command line dry-runs as it was planned.
#include <tessera/tessera.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "any_optimizer.hpp"
#include "train_device.hpp"
#include "train_request.hpp"

namespace tessera::programs {

namespace cfg = tessera::config;

/// The output mode of --output-mode: final, all, sum or every:N (N read whole: output_period_of).
inline exec::output_selection parse_output_mode(const std::string& s) {
    if (s == "final") return {cfg::output_kind::final, 0};
    if (s == "all") return {cfg::output_kind::all, 0};
    if (s == "sum") return {cfg::output_kind::sum, 0};
    if (const auto n = output_period_of(s)) return {cfg::output_kind::every_n, *n};
    throw usage_error("--output-mode '" + s + "' is not one of final, all, sum, every:N");
}

/// The loss scale a --loss-scaling value gives (empty: none, or dynamic's initial scale).
inline std::optional<double> static_scale(const std::string& s) {
    if (s == "none" || s == "dynamic") return std::nullopt;
    if (s.rfind("static:", 0) == 0) {
        double f = 0;
        const std::string factor = s.substr(7);
        // The whole factor, or nothing: 'static:128x' is not 128.
        const auto [end, error] = std::from_chars(factor.data(), factor.data() + factor.size(), f);
        if (error != std::errc{} || end != factor.data() + factor.size()) f = 0;
        if (!(f > 0) || !std::isfinite(f)) throw usage_error("--loss-scaling static:F needs a positive factor, got '" + s + "'");
        return f;
    }
    throw usage_error("--loss-scaling '" + s + "' is not one of none, static:F, dynamic");
}

/// The host of --host: "tutorial" (the PopTorch tutorials' Python loader, calibrated on seed 000),
/// "native" (tessera's own C++ loader, measured) or a JSON file of host_spec's fields.
[[nodiscard]] inline emulator::host_spec host_of(const train_request& r) {
    if (r.host == "tutorial") return emulator::tutorial_host();
    if (r.host == "native") return emulator::native_host();
    try {
        return emulator::read_host_spec(r.host);
    } catch (const emulator::host_spec_error& e) {
        throw usage_error(std::string("--host: ") + e.what() + " (or give tutorial or native)");
    }
}

/// The request's counts (every count of a dispatched configuration is dynamic).
[[nodiscard]] inline config::options counts_of(const train_request& r) {
    return {.micro_batch = r.batch_size, .gradient_accumulation = r.gradient_accumulation,
            .device_iterations = r.device_iterations, .replicas = r.replicas, .instances = r.instances,
            .input_group = r.input_replica_group, .stages = stages_of(r), .ipu_map = ipu_map_of(r),
            .virtual_stages = virtual_stages_of(r), .zero_bubble = zero_bubble_of(r)};
}

/// The training loader's options of configuration C (8-bit I/O normalises on the device, float on the host).
template <class C>
[[nodiscard]] data::loader_options loader_options_of(const train_request& r, const data::normalization& norm) {
    data::loader_options loading{.shuffle = true, .seed = r.seed, .num_workers = r.workers,
                                 .mode = r.async_dataloader ? data::loader_mode::async : data::loader_mode::sync,
                                 .rank = r.processes.rank, .augment = data::horizontal_flip{}};
    if constexpr (!std::is_same_v<typename C::io_type, std::uint8_t>) loading.normalize = norm;
    return loading;
}

/// The optimizer of --optimizer, --lr, --max-grad-norm and --stochastic-rounding (keyed by --seed).
[[nodiscard]] inline any_optimizer optimizer_of(const train_request& r) {
    const optim::weight_rounding rounding{.stochastic = r.stochastic_rounding, .seed = r.seed};
    const double clip = r.max_grad_norm;
    if (r.optimizer == "sgd")
        return optim::sgd({.learning_rate = r.lr, .momentum = 0.9, .weight_decay = 5e-4, .nesterov = true, .rounding = rounding,
                           .max_grad_norm = clip});
    if (r.optimizer == "adamw")
        return optim::adamw({.learning_rate = r.lr, .weight_decay = 0.05, .rounding = rounding, .max_grad_norm = clip});
    if (r.optimizer == "lamb")  // poptorch.optim.LAMB's defaults but the learning rate
        return optim::lamb({.learning_rate = r.lr, .rounding = rounding, .max_grad_norm = clip});
    throw usage_error("--optimizer '" + r.optimizer + "' is not one of sgd, adamw, lamb");
}

/// The session options of a request for network `net` cut into `b.stages` stages: output mode, loss
/// scaling, host and loading, the cuts (--split), recomputation, optimiser sharding and stochastic
/// rounding of activations.
template <class Net>
[[nodiscard]] exec::session_options session_options_of(const train_request& r, const Net& net, const config::batching& b,
                                                       const data::loader_options& loading) {
    // Set member by member: GCC 12 warns (falsely) that a designated initializer leaves `across`
    // uninitialised in some of the dispatched instantiations.
    exec::session_options settings;
    settings.record_trace = !r.timeline.empty() || !r.trace.empty();
    check_output_mode(r);  // every:N with 1 <= N <= D × G
    settings.outputs = parse_output_mode(r.output_mode);
    settings.loss_scale = static_scale(r.loss_scaling);
    settings.dynamic_loss_scaling = r.loss_scaling == "dynamic";
    settings.host = host_of(r);
    settings.device = device_of(r);
    settings.loading = exec::loading_of(loading);
    settings.loading.instances = b.instances;
    // A unit the network lacks: refused, naming the flag that named it.
    const auto unit_of = [&](const char* flag, const std::string& name) {
        try {
            return net.unit_index(name);
        } catch (const std::exception& e) {
            throw usage_error(std::string(flag) + " " + name + ": " + e.what());
        }
    };
    if (!r.split.empty()) {
        settings.first_units.push_back(0);
        for (const auto& name : r.split) settings.first_units.push_back(unit_of("--split", name));
        if (settings.first_units.size() != b.stages)
            throw usage_error("--split names " + std::to_string(r.split.size()) + " cuts, the strategy has " +
                              std::to_string(b.stages) + " stages (give " + std::to_string(b.stages - 1) + ")");
    }
    if (!r.layers_per_ipu.empty()) {  // the embedding (unit 0) and IPU 0's blocks, ..., the last IPU's; the head
        // with the last IPU's blocks, or a stage of its own on the first IPU
        const bool head_apart = head_stage_on_first_ipu(r);
        const std::size_t block_stages = b.stages - (head_apart ? 1 : 0);
        if (r.layers_per_ipu.size() != block_stages)
            throw usage_error("--layers-per-ipu gives " + std::to_string(r.layers_per_ipu.size()) + " IPUs' blocks, the "
                              "strategy has " + std::to_string(block_stages) + " stages (--ipus-per-replica " +
                              std::to_string(block_stages) + " with one model chunk each)");
        std::size_t first = 1;
        for (std::size_t i = 0; i < r.layers_per_ipu.size(); ++i) {
            settings.first_units.push_back(i == 0 ? 0 : first);
            first += r.layers_per_ipu[i];
        }
        if (head_apart) settings.first_units.push_back(net.units() - 1);
        if (first != net.units() - 1)
            throw usage_error("--layers-per-ipu places " + std::to_string(first - 1) + " blocks, and " + r.model + " has " +
                              std::to_string(net.units() - 2));
        for (std::size_t i = 1; i < settings.first_units.size(); ++i)
            if (settings.first_units[i] == settings.first_units[i - 1])
                throw usage_error("--layers-per-ipu: IPU " + std::to_string(i - 1) + " has no block (only the first "
                                  "may hold the embedding alone, and the last the head)");
    }
    if (r.recompute) settings.recompute.assign(b.stages, true);
    if (r.recompute_checkpoints.size() == 1 && r.recompute_checkpoints.front() == "every-unit")
        settings.recompute_checkpoints = exec::checkpoint_every_unit(net);
    else
        for (const auto& name : r.recompute_checkpoints) {
            if (name == "every-unit")
                throw usage_error("--recompute-checkpoints every-unit stands alone (it names every unit already)");
            settings.recompute_checkpoints.push_back(unit_of("--recompute-checkpoints", name));
        }
    settings.optimizer_sharding = r.optimizer_sharding;
    if (r.optimizer_state_offchip) settings.locations.optimiser_state = exec::location::streaming_memory;
    settings.io_tiles = r.io_tiles;
    settings.lock_step = !r.dataflow;
    if (r.partials != "float" && r.partials != "half")
        throw usage_error("--partials takes float or half, got '" + r.partials + "'");
    settings.partials = r.partials == "half" ? emulator::partials_type::float16 : emulator::partials_type::float32;
    if (r.available_memory_proportion.size() == 1)
        settings.available_memory_proportion = r.available_memory_proportion.front();
    else if (r.available_memory_proportion.size() != b.ipus_per_replica)
        throw usage_error("--available-memory-proportion gives " + std::to_string(r.available_memory_proportion.size()) +
                          " shares, and a replica has " + std::to_string(b.ipus_per_replica) +
                          " IPUs (give one for all, or one per IPU)");
    else
        settings.ipu_available_memory_proportion = r.available_memory_proportion;
    if (r.stochastic_rounding) settings.stochastic_rounding = r.seed;  // activations; optimizer_of rounds the weights
    return settings;
}

}  // namespace tessera::programs
