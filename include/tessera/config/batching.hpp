#pragma once
// Run-time counts: a config's dynamic counts filled from options, and every rule checked again with
// the actual values, throwing a typed error that names them.
#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "tessera/config/config.hpp"
#include "tessera/config/description.hpp"
#include "tessera/config/error.hpp"

namespace tessera::config {

/// Counts a user sweeps from the command line. A count the config fixes at compile time may be
/// repeated here only with the same value.
struct options {
    std::optional<std::size_t> micro_batch{};
    std::optional<std::size_t> gradient_accumulation{};
    std::optional<std::size_t> device_iterations{};
    std::optional<std::size_t> available_ipus{};  ///< IPUs the (emulated) system has; unchecked if empty
    std::optional<std::size_t> replicas{};        ///< replication<dynamic>
    std::optional<std::size_t> instances{};       ///< instances<dynamic>
    std::optional<std::size_t> input_group{};     ///< replication<R, dynamic>: replicas sharing an input slice
    std::optional<std::size_t> stages{};          ///< sharded<dynamic>, pipelined<S, dynamic>, phased<dynamic>
    std::vector<std::size_t> ipu_map{};           ///< the IPU of each stage (dynamic stages); empty: the strategy's default
    /// pipelined<one_f_one_b or gpipe, dynamic>: model chunks per IPU when > 1, interleaving the 1F1B
    /// pipeline (as pipelined<interleaved<V>, S> does) or looping the GPipe one breadth first (as
    /// pipelined<looped_bfs<V>, S> does); the default map then puts stage s on IPU s mod (stages / V).
    std::optional<std::size_t> virtual_stages{};
    /// pipelined<one_f_one_b, dynamic>: split its backward passes as ZB-H1 or ZB-H2 do (as
    /// pipelined<zero_bubble_h1 or _h2, S> does).
    std::optional<zero_bubble_kind> zero_bubble{};
};

/// The validated counts of one configuration, all known.
struct batching {
    std::size_t micro_batch = 1;
    std::size_t gradient_accumulation = 1;
    std::size_t device_iterations = 1;
    std::size_t replicas = 1;
    std::size_t instances = 1;
    std::size_t input_group = 1;
    std::size_t stages = 1;
    std::size_t ipus_per_replica = 1;
    std::vector<std::size_t> ipu_of_stage{0};  ///< the IPU of each stage within its replica
    std::size_t virtual_stages = 1;            ///< pipelined: model chunks per IPU (interleaved or looped BFS when > 1)
    zero_bubble_kind zero_bubble = zero_bubble_kind::none;  ///< pipelined: split backward passes (ZB-H1, ZB-H2)
    bool training = true;

    [[nodiscard]] constexpr std::size_t local_replicas() const noexcept { return replicas / instances; }
    /// Micro-batches one host call consumes on this instance: D × G × R_local / input group (inference drops G).
    [[nodiscard]] constexpr std::size_t micro_batches_per_call() const noexcept {
        return device_iterations * (training ? gradient_accumulation : 1) * (local_replicas() / input_group);
    }
    /// Samples one host call consumes on this instance (PopTorch's combined batch).
    [[nodiscard]] constexpr std::size_t combined_batch() const noexcept { return micro_batch * micro_batches_per_call(); }
    /// Distinct samples whose gradients make one weight update: micro_batch × G × R / input group.
    [[nodiscard]] constexpr std::size_t samples_per_update() const noexcept {
        return micro_batch * gradient_accumulation * (replicas / input_group);
    }

    /// Throws batch_error unless `samples` is exactly one combined batch of this configuration.
    void check_batch(std::size_t samples) const;
    /// Throws batch_error unless a dataset of `samples` gives every instance at least one combined batch.
    void check_fits_dataset(std::size_t samples) const;
};

/// The counts of `Config` with its dynamic ones taken from `opts`; throws a config_error subclass
/// naming the values when a rule is broken or a count is missing or contradicts the config.
/// @code
///   auto b = tessera::config::make_batching<cfg>({.micro_batch = 32, .gradient_accumulation = g});
///   loader_batch_size = b.combined_batch();
/// @endcode
template <Config C>
[[nodiscard]] batching make_batching(const options& opts = {});

/// make_batching of the configuration `c` describes (one function for every configuration type).
[[nodiscard]] inline batching make_batching(const description& c, const options& opts = {});

// ---------------------------------------------------------------------------------------------
// implementation

namespace detail {

inline std::string str(std::size_t v) { return std::to_string(v); }

inline std::size_t resolve_count(const char* name, std::size_t fixed, const std::optional<std::size_t>& given) {
    if (fixed != dynamic) {
        if (given && *given != fixed)
            throw config_error(std::string("tessera::config: ") + name + " is fixed to " + str(fixed) +
                               " by the config, but options give " + str(*given) +
                               "; make it config::dynamic to choose it at run time");
        return fixed;
    }
    if (!given)
        throw config_error(std::string("tessera::config: ") + name +
                           " is config::dynamic, so options must give it (e.g. options{." + name + " = 4})");
    if (*given == 0) throw config_error(std::string("tessera::config: ") + name + " must be at least 1, got 0");
    return *given;
}

}  // namespace detail

template <Config C>
batching make_batching(const options& opts) {
    return make_batching(description::of<C>(), opts);
}

inline batching make_batching(const description& c, const options& opts) {
    batching b;
    b.micro_batch = detail::resolve_count("micro_batch", c.micro_batch, opts.micro_batch);
    b.gradient_accumulation =
        detail::resolve_count("gradient_accumulation", c.gradient_accumulation, opts.gradient_accumulation);
    b.device_iterations = detail::resolve_count("device_iterations", c.device_iterations, opts.device_iterations);
    b.replicas = detail::resolve_count("replicas", c.replicas, opts.replicas);
    b.instances = detail::resolve_count("instances", c.instances, opts.instances);
    b.input_group = detail::resolve_count("input_group", c.input_group, opts.input_group);
    b.stages = detail::resolve_count("stages", c.stages, opts.stages);
    b.training = c.training;
    using detail::str;
    b.virtual_stages = c.virtual_stages;
    if (opts.virtual_stages && *opts.virtual_stages != c.virtual_stages) {
        if (c.strategy != strategy_kind::pipelined || c.stages != dynamic || c.virtual_stages > 1)
            throw config_error("tessera::config: " + str(*opts.virtual_stages) + " model chunks per IPU interleave a 1F1B "
                               "pipeline, or loop a GPipe one, whose stage count is given at run time "
                               "(pipelined<one_f_one_b or gpipe, dynamic>); this strategy fixes them to " +
                               str(c.virtual_stages));
        if (*opts.virtual_stages == 0 || b.stages % *opts.virtual_stages != 0)
            throw config_error("tessera::config: " + str(*opts.virtual_stages) + " model chunks per IPU must divide the " +
                               str(b.stages) + " stages (each IPU holds the same number)");
        b.virtual_stages = *opts.virtual_stages;
    }
    b.zero_bubble = c.zero_bubble;
    if (opts.zero_bubble && *opts.zero_bubble != c.zero_bubble) {
        if (c.strategy != strategy_kind::pipelined || c.schedule_is_gpipe || c.stages != dynamic ||
            c.zero_bubble != zero_bubble_kind::none || c.virtual_stages > 1)
            throw config_error("tessera::config: a zero-bubble schedule splits the backward passes of a 1F1B pipeline "
                               "whose stage count is given at run time (pipelined<one_f_one_b, dynamic>); this "
                               "strategy fixes its schedule");
        if (b.virtual_stages > 1)
            throw config_error("tessera::config: a zero-bubble schedule runs one model chunk per IPU, not " +
                               str(b.virtual_stages));
        b.zero_bubble = *opts.zero_bubble;
    }
    b.ipu_of_stage.clear();
    for (std::size_t s = 0; s < b.stages; ++s)  // interleaved with a run-time count: stage s on IPU s mod (S / V)
        b.ipu_of_stage.push_back(c.stages == dynamic && b.virtual_stages > 1 ? s % (b.stages / b.virtual_stages)
                                                                             : c.ipu_of_stage(s));
    if (!opts.ipu_map.empty()) {
        if (c.stages != dynamic && opts.ipu_map != b.ipu_of_stage)
            throw config_error("tessera::config: the ipu_map is fixed by the config's strategy; make its stage count "
                               "config::dynamic to give the map at run time");
        if (opts.ipu_map.size() != b.stages)
            throw config_error("tessera::config: the ipu_map names " + str(opts.ipu_map.size()) + " IPUs for " +
                               str(b.stages) + " stages (one IPU per stage)");
        b.ipu_of_stage = opts.ipu_map;
    }
    b.ipus_per_replica = *std::max_element(b.ipu_of_stage.begin(), b.ipu_of_stage.end()) + 1;
    for (std::size_t ipu = 0; ipu < b.ipus_per_replica; ++ipu)
        if (std::find(b.ipu_of_stage.begin(), b.ipu_of_stage.end(), ipu) == b.ipu_of_stage.end())
            throw config_error("tessera::config: the ipu_map leaves IPU " + str(ipu) +
                               " without a stage; number the IPUs 0, 1, ... without gaps");
    if (c.strategy == strategy_kind::single && b.stages != 1)
        throw config_error("tessera::config: the single strategy has 1 stage, got " + str(b.stages));
    // The samples of one call over every process, and the IPUs, must be countable before anything is sized by them.
    const auto fits = [](std::initializer_list<std::size_t> factors) {
        std::size_t product = 1;
        for (const std::size_t f : factors) {
            if (f != 0 && product > std::numeric_limits<std::size_t>::max() / f) return false;
            product *= f;
        }
        return true;
    };
    if (!fits({b.micro_batch, b.device_iterations, b.gradient_accumulation, b.replicas}))
        throw batch_error("tessera::config: micro_batch × device_iterations × gradient_accumulation × replicas = " +
                          str(b.micro_batch) + " × " + str(b.device_iterations) + " × " + str(b.gradient_accumulation) +
                          " × " + str(b.replicas) + " samples per call is more than a size_t can count");
    if (!fits({b.replicas, b.ipus_per_replica}))
        throw replication_error("tessera::config: " + str(b.replicas) + " replicas × " + str(b.ipus_per_replica) +
                                " IPUs per replica is more IPUs than a size_t can count");

    if (b.replicas % b.instances != 0)
        throw replication_error("tessera::config: " + str(b.replicas) + " replicas cannot be divided among " +
                                str(b.instances) + " instances (every host process owns R / P whole replicas); "
                                "choose R as a multiple of P");
    if (b.local_replicas() % b.input_group != 0)
        throw replication_error("tessera::config: the input group of " + str(b.input_group) + " replicas does not "
                                "divide the " + str(b.local_replicas()) + " replicas of each instance");
    const std::size_t s = b.stages, g = b.gradient_accumulation, d = b.device_iterations;
    if (c.strategy == strategy_kind::pipelined && b.virtual_stages > 1) {
        const std::size_t i = b.ipus_per_replica, v = b.virtual_stages, n = b.training ? g : d;
        if (const std::size_t t = first_stage_off_round_robin(b.ipu_of_stage, v); t < s)
            throw config_error("tessera::config: an interleaved pipeline of " + str(s) + " stages with " + str(v) +
                               " per IPU puts stage s on IPU s mod " + str(s / v) + " (stage " + str(t) +
                               " is on IPU " + str(b.ipu_of_stage[t]) + ")");
        if (!interleaved_count_fits(n, i, b.training))
            throw pipeline_depth_error("tessera::config: an interleaved pipeline on " + str(i) + " IPUs runs its " +
                                       "micro-batches in groups of " + str(i) + ": " +
                                       (b.training ? "gradient_accumulation" : "device_iterations") + " must be a "
                                       "multiple of " + str(i) + (b.training ? " and at least " + str(2 * i - 1) : "") +
                                       ", got " + str(n));
    } else if (c.strategy == strategy_kind::pipelined) {
        if (b.training && g < 2 * s - 1)
            throw pipeline_depth_error("tessera::config: pipelined training with " + str(s) +
                                       " stages needs gradient_accumulation >= 2*" + str(s) + " - 1 = " +
                                       str(2 * s - 1) + ", got " + str(g) +
                                       " (the last forward and first backward stage are merged); raise it or use fewer stages");
        if (!b.training && d < s)
            throw pipeline_depth_error("tessera::config: pipelined inference with " + str(s) +
                                       " stages needs device_iterations >= " + str(s) + ", got " + str(d));
    }
    if (!b.training && g != 1)
        throw config_error("tessera::config: inference needs gradient_accumulation = 1, got " + str(g) +
                           " (there are no gradients to accumulate)");
    const std::size_t available = c.available_ipus != dynamic ? c.available_ipus : opts.available_ipus.value_or(dynamic);
    if (opts.available_ipus && c.available_ipus != dynamic && *opts.available_ipus != c.available_ipus)
        throw config_error("tessera::config: available_ipus is fixed to " + str(c.available_ipus) +
                           " by the config, but options give " + str(*opts.available_ipus));
    if (available != dynamic && b.replicas * b.ipus_per_replica > available)
        throw replication_error("tessera::config: the configuration needs " + str(b.replicas * b.ipus_per_replica) +
                                " IPUs (" + str(b.replicas) + " replicas × " + str(b.ipus_per_replica) +
                                " IPUs per replica) but the system has " + str(available));
    return b;
}

inline void batching::check_batch(std::size_t samples) const {
    using detail::str;
    const std::size_t per_call = micro_batches_per_call();
    // Replicas of one input group share a slice, so the slices per call are R_local / input group.
    const std::string slices = input_group == 1 ? "local replicas" : "input groups of the local replicas";
    const std::string formula =
        training ? "device_iterations × gradient_accumulation × " + slices + " = " + str(device_iterations) +
                       " × " + str(gradient_accumulation) + " × " + str(local_replicas() / input_group)
                 : "device_iterations × " + slices + " = " + str(device_iterations) + " × " +
                       str(local_replicas() / input_group);
    if (samples % per_call != 0)
        throw batch_error("tessera::config: a batch of " + str(samples) + " samples is not a multiple of " +
                          formula + " = " + str(per_call) + " micro-batches");
    if (samples != combined_batch())
        throw batch_error("tessera::config: a batch of " + str(samples) + " samples holds micro-batches of " +
                          str(samples / per_call) + ", but the micro-batch is " + str(micro_batch) +
                          "; the combined batch is " + str(micro_batch) + " × " + str(per_call) + " = " +
                          str(combined_batch()));
}

inline void batching::check_fits_dataset(std::size_t samples) const {
    using detail::str;
    const std::size_t needed = combined_batch() * instances;
    if (samples < needed)
        throw batch_error("tessera::config: a dataset of " + str(samples) + " samples is smaller than one combined batch (" +
                          str(combined_batch()) + " samples) for each of the " + str(instances) +
                          " instances (" + str(needed) + " in all); lower the micro-batch, D or G");
}

}  // namespace tessera::config
