#pragma once
// tessera-plan's search: configurations of one model on N IPUs and a host, each judged by the dry
// run tessera-train --dry-run makes, keeping the fastest that fit.
//
// The search in two phases (each phase's figures are the modelled clock's, nothing is guessed):
//  1. the device: precision × strategy (and schedule: GPipe, 1F1B, interleaved with 2 chunks per IPU)
//     × IPUs per replica × recomputation × micro-batch × G,
//     replicas filling the IPUs, stages balanced by FLOPs; one that does not fit with replicas is
//     tried again with the optimiser state sharded across them. Each is compiled once, as a session would
//     (rules broken: refused; memory over budget: "does not fit"), with one staged network per
//     (precision, stages, micro-batch, recomputation) shared by every strategy and G (memoised). The
//     candidates are ranked by their IPUs' images/s without the host;
//  2. the host: for the best `refine` of them, D × I/O × loader (sync, async) × workers through the
//     same dry run with the host; the fewest workers within 1 % of the most is kept.
// The plans printed are dry-run again through tessera-train's own path (dry_run_request), so each
// plan's command line with --dry-run gives the plan's figure.
#include <tessera/tessera.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <tuple>
#include <type_traits>
#include <cstddef>
#include <functional>
#include <map>
#include <stdexcept>
#include <optional>
#include <string>
#include <vector>

#include "train_datasets.hpp"
#include "train_dry_run.hpp"
#include "train_request.hpp"
#include "train_runner.hpp"
#include "train_settings.hpp"

namespace tessera::programs {

/// What tessera-plan was asked.
struct plan_request {
    train_request base;                    ///< model, dataset, images, host, optimizer...
    std::size_t ipus = 16;                 ///< IPUs of the system
    std::vector<std::string> precisions{"16.16", "16.32", "32.32"};
    std::vector<std::string> strategies{"single", "sharded", "pipelined", "phased"};
    std::vector<std::string> schedules{"1f1b", "gpipe", "interleaved"};
    std::size_t max_batch_size = 32;       ///< largest micro-batch tried (powers of two from 1)
    std::size_t max_stages = 8;            ///< most stages tried per replica
    std::size_t max_samples_per_update = 0;  ///< micro-batch × G × R at most (0: no limit)
    double max_left_out = 0.01;            ///< share of an epoch's samples a plan may leave out (drop_last)
    std::size_t top = 5;                   ///< plans printed
    std::size_t refine = 24;               ///< device candidates whose host settings are searched
};

/// One configuration judged: its request (a tessera-train command line) and what the dry run said.
struct plan_candidate {
    train_request request;
    double epoch_seconds = 0, images_per_second = 0, device_images_per_second = 0;
    std::size_t max_ipu_memory_bytes = 0, overshoot_bytes = 0;
    std::size_t images = 0;        // trained per epoch: whole combined batches only (drop_last)
    std::size_t epoch_samples = 0; // the epoch's samples (the dataset's, or --images): images + those left out
    bool fits = true;
    std::string bottleneck;
    double bubble_fraction = 0;
    bool judged = false;  // its figures are tessera-train's dry run's (judge_on)
};

/// What the search tries for a stage's activations: stash them all, recompute each stage whole
/// (--recompute), or recompute between checkpoints at every unit (--recompute-checkpoints every-unit).
enum class recomputation { none, whole_stages, every_unit };
inline constexpr recomputation recomputations[] = {recomputation::none, recomputation::whole_stages, recomputation::every_unit};

/// The device candidates search_precision considers for one precision (sizes the progress bar).
[[nodiscard]] inline std::size_t device_candidates(const plan_request& q) {
    std::size_t n = 0, batch_sizes = 0;
    for (std::size_t x = 1; x <= q.max_batch_size; x *= 2) ++batch_sizes;
    for (std::size_t stages = 1; stages <= q.max_stages; ++stages)
        for (const auto& strategy : q.strategies) {
            if ((strategy == "single") != (stages == 1) || (strategy != "phased" && stages > q.ipus)) continue;
            n += (strategy == "pipelined" ? q.schedules.size() : 1) * std::size(recomputations) * batch_sizes *
                 (strategy == "pipelined" ? 4 : 5);
        }
    return n;
}

/// What the search saw: every candidate that fits, and the counts of those refused and why.
struct plan_outcome {
    std::vector<plan_candidate> device;   ///< phase 1: fitting candidates (host not yet searched)
    std::vector<plan_candidate> plans;    ///< phase 2: best first
    std::vector<plan_candidate> lost;     ///< phase 2's others, and phase 1's that were not refined
    std::size_t considered = 0;
    std::map<std::string, std::size_t> refused;  ///< "does not fit", "rule: ..." -> count
};

namespace detail {

[[nodiscard]] inline std::vector<std::size_t> powers_of_two_to(std::size_t max) {
    std::vector<std::size_t> v;
    for (std::size_t x = 1; x <= max; x *= 2) v.push_back(x);
    return v;
}

/// The G values tried: the least a pipeline allows and its multiples; 1, 2, 4, 8, 16 otherwise.
/// An interleaved or looped BFS pipeline on `stages` IPUs needs a multiple of them, at least 2·IPUs − 1: 2·IPUs.
[[nodiscard]] inline std::vector<std::size_t> accumulations(const std::string& strategy, std::size_t stages,
                                                            const std::string& schedule = "1f1b") {
    if (strategy != "pipelined") return {1, 2, 4, 8, 16};
    const std::size_t least = schedule == "interleaved" || schedule == "looped-bfs" ? 2 * stages : 2 * stages - 1;
    return {least, 2 * least, 4 * least, 8 * least};
}

/// A refusal's kind for the counts: the rule's error, up to its first number (values vary).
[[nodiscard]] inline std::string refusal_kind(const std::string& what) {
    std::string s = what;
    if (s.rfind("tessera::", 0) == 0)
        if (auto colon = s.find(": "); colon != std::string::npos) s = s.substr(colon + 2);
    const auto digit = s.find_first_of("0123456789");
    if (digit != std::string::npos) s = s.substr(0, digit);
    while (!s.empty() && (s.back() == ' ' || s.back() == '(')) s.pop_back();
    return "rule: " + s;
}

/// The fewest samples an epoch of `epoch` samples may train under --max-left-out (whole combined
/// batches only, as tessera-train trains: drop_last).
[[nodiscard]] inline std::size_t least_trained(const plan_request& q, std::size_t epoch) noexcept {
    return std::size_t(std::ceil((1.0 - q.max_left_out) * double(epoch) - 1e-9));
}

/// The count of refusals for leaving out too much of an epoch.
inline constexpr const char* left_out_refusal = "leaves out over --max-left-out of the epoch";

/// A device candidate: request `r` and its IPUs' figures in dry run `e` (samples/s of a call on the
/// IPUs alone, the fullest IPU).
[[nodiscard]] inline plan_candidate device_candidate(const train_request& r, const exec::epoch_estimate& e) {
    plan_candidate c;
    c.request = r;
    c.device_images_per_second = double(e.samples) / double(std::max<std::size_t>(e.calls, 1)) / e.call_device_seconds;
    for (const auto& ipu : e.memory.ipus) c.max_ipu_memory_bytes = std::max(c.max_ipu_memory_bytes, ipu.on_chip());
    return c;
}

}  // namespace detail

/// The figures of request `r` (of precision P) from tessera-train's own dry run on `net` (with the
/// breakdown): what the plan printed says is what `tessera-train --dry-run` prints.
template <class P, class Net>
[[nodiscard]] plan_candidate judge_on(const train_request& r, const Net& net, const dataset_shape& shape) {
    return config::dispatch_for<P>(choice_of(r), [&]<class C>() {
        const exec::epoch_estimate e = dry_run_request<C>(r, net, shape, true);
        plan_candidate c;
        c.request = r;
        c.epoch_seconds = e.seconds, c.images_per_second = e.samples_per_second(), c.images = e.samples;
        c.epoch_samples = epoch_images(r, shape);
        c.device_images_per_second = e.call_device_seconds > 0 ? double(e.samples) / double(e.calls) / e.call_device_seconds : 0;
        c.fits = e.fits, c.overshoot_bytes = e.overshoot_bytes;
        for (const auto& ipu : e.memory.ipus) c.max_ipu_memory_bytes = std::max(c.max_ipu_memory_bytes, ipu.on_chip());
        c.bottleneck = std::string(exec::bottleneck_of(e.device_breakdown, std::max(0.0, e.seconds - e.device_seconds)));
        c.bubble_fraction = e.device_breakdown.bubble_fraction;
        c.judged = true;
        return c;
    });
}

/// The host phase for `device`, a device candidate: D × I/O × loader through `estimate(r, epochs,
/// breakdown)` (a dry run), then the fewest loader workers whose epoch is within 1 % of the most's
/// on the same host clock; nothing when no setting runs. `eight_bit_too`: 8-bit I/O is tried (images).
/// A D whose epoch trains fewer than `least_samples` (--max-left-out) is not a plan.
template <class Estimate>
[[nodiscard]] std::optional<plan_candidate> refine_host(const plan_candidate& device, const Estimate& estimate,
                                                        std::size_t cores, bool eight_bit_too, std::size_t least_samples) {
    plan_candidate best = device;
    best.epoch_seconds = std::numeric_limits<double>::infinity(), best.images_per_second = 0;
    exec::epoch_estimate best_e;
    for (std::size_t d = 1; d <= 64; d *= 2)
        for (const bool eight_bit : {true, false})
            for (const bool async : {true, false}) {
                if (eight_bit && !eight_bit_too) continue;
                train_request r = device.request;
                r.device_iterations = d, r.eight_bit_io = eight_bit, r.async_dataloader = async;
                r.workers = cores;
                try {
                    const auto e = estimate(r, 2, false);
                    if (e.fits && e.samples >= least_samples && e.samples_per_second() > best.images_per_second)
                        best.request = r, best.epoch_seconds = e.seconds, best.images_per_second = e.samples_per_second(), best_e = e;
                } catch (const config::config_error&) {  // e.g. a combined batch over the dataset
                }
            }
    if (best.images_per_second <= 0) return std::nullopt;
    const auto epoch_with = [&](std::size_t workers) {
        emulator::host_loading loading;  // as session_options_of makes it (exec::loading_of)
        loading.async = best.request.async_dataloader, loading.workers = workers;
        loading.instances = best.request.instances;
        emulator::host_clock host(host_of(best.request), loading);
        double start = 0;
        for (int epoch = 0; epoch < 2; ++epoch) {
            start = host.now();
            for (std::size_t c = 0; c < best_e.calls; ++c)
                (void)host.call(best_e.host_per_call.prepare_seconds, best_e.host_per_call.feed_seconds,
                                best_e.call_device_seconds);
        }
        return host.now() - start;
    };
    const double fastest = epoch_with(cores);
    for (std::size_t w = 1; w <= cores; w *= 2)
        if (const double seconds = epoch_with(w); seconds <= fastest * 1.01) {
            best.request.workers = w, best.epoch_seconds = seconds;  // the epoch of the workers chosen
            break;
        }
    best.images = best_e.samples;
    best.images_per_second = double(best_e.samples) / best.epoch_seconds;
    const auto e = estimate(best.request, 2, true);  // what limits it
    best.bottleneck = std::string(exec::bottleneck_of(e.device_breakdown, std::max(0.0, e.seconds - e.device_seconds)));
    best.bubble_fraction = e.device_breakdown.bubble_fraction;
    return best;
}

/// Both phases for precision P: every device candidate of `q`, then the host settings of the best
/// `q.refine` of them; the results go to `out` (device: fitting candidates; plans: refined ones,
/// fastest first, the best `q.top` judged by tessera-train's dry run: judge_on). `tick()` is called
/// once per candidate considered (the progress bar).
template <class P>
void search_precision(const plan_request& q, const dataset_shape& shape, plan_outcome& out,
                      const std::function<void()>& tick) {
    with_dry_run_network<P>(q.base, shape.channels, shape.classes, [&](const auto& net) {
        using net_t = std::remove_cvref_t<decltype(net)>;
        using model_t = exec::staged_network<net_t, any_optimizer>;
        const std::size_t images = epoch_images(q.base, shape), least = detail::least_trained(q, images);
        // The memo: the staged network of the last cut and recomputation asked for,
        // one for one model chunk per IPU and one for interleaved pipelines (twice the stages on as
        // many IPUs), built as a session and tessera-train's dry run build it
        // (exec::detail::staged_for_training) and compiled again for each micro-batch asked for
        // (set_micro_batch); the search asks in that order, so each is built once (a network copy is
        // hundreds of MB). The loss-scale rule is the search's precision's and flags', the same for all.
        using memo_key = std::tuple<std::vector<std::size_t>, std::vector<bool>, std::vector<std::size_t>>;
        std::array<memo_key, 2> key{};
        std::array<std::optional<model_t>, 2> staged;
        const auto model_for = [&](const train_request& r, const config::description& c, const config::batching& b,
                                   const exec::session_options& settings) -> const model_t& {
            const std::size_t slot = virtual_stages_of(r) > 1 ? 1 : 0;
            tessera::tensor::shape sample = shape.sample();
            sample.n = b.micro_batch;
            memo_key wanted{settings.first_units.empty() ? exec::balanced_units(net, sample, b.stages) : settings.first_units,
                            settings.recompute, settings.recompute_checkpoints};
            if (staged[slot] && key[slot] == wanted) {
                staged[slot]->set_micro_batch(b.micro_batch);
            } else {
                staged[slot].reset();
                exec::session_options building = settings;
                building.first_units = std::get<0>(wanted);
                building.kernel_threads_per_ipu = 1;  // nothing runs (as exec::dry_run builds it): no IPU map kept
                staged[slot].emplace(exec::detail::staged_for_training<net_t, any_optimizer>(
                    c, net, optimizer_of(r), shape.sample(), b, building));
                key[slot] = std::move(wanted);
            }
            return *staged[slot];
        };
        // The dry run of `r` on the memoised network (what dry_run_request computes, without
        // building the network again). Throws what a session would throw, but memory: reported.
        const auto estimate = [&](const train_request& r, std::size_t epochs, bool breakdown = false) {
            const config::options counts = counts_of(r);
            return config::dispatch_for<P>(choice_of(r), [&]<class C>() {
                const config::batching b = config::make_batching<C>(counts);
                exec::session_options settings = session_options_of(r, net, b, loader_options_of<C>(r, {}));
                settings.record_trace = breakdown;
                const config::description c = config::description::of<C>();
                return exec::dry_run(c, model_for(r, c, b, settings), counts, images, settings, epochs,
                                     exec::over_budget::reported);
            });
        };
        std::vector<plan_candidate> mine;
        const std::size_t most = std::min(q.max_stages, net.units());
        for (std::size_t stages = 1; stages <= most; ++stages)
            for (const recomputation recompute : recomputations)
                for (const std::size_t mb : detail::powers_of_two_to(q.max_batch_size))
                    for (const auto& strategy : q.strategies) {
                        if ((strategy == "single") != (stages == 1)) continue;
                        const std::size_t per_replica = strategy == "phased" ? 1 : stages;
                        if (per_replica > q.ipus) continue;  // not a configuration of this system
                        const std::vector<std::string> schedules =
                            strategy == "pipelined" ? q.schedules : std::vector<std::string>{"1f1b"};
                        for (const auto& schedule : schedules)
                            for (const std::size_t g : detail::accumulations(strategy, stages, schedule)) {
                                train_request r = q.base;
                                r.strategy = strategy, r.schedule = schedule, r.ipus_per_replica = stages;
                                r.virtual_stages = 2;  // interleaved: two model chunks per IPU
                                r.recompute = recompute == recomputation::whole_stages;
                                r.recompute_checkpoints.clear();
                                if (recompute == recomputation::every_unit) r.recompute_checkpoints = {"every-unit"};
                                r.batch_size = mb, r.gradient_accumulation = g;
                                r.device_iterations = 1, r.eight_bit_io = true, r.async_dataloader = true;
                                r.split.clear();
                                r.replicas = std::max<std::size_t>(1, q.ipus / per_replica);
                                r.instances = 1;
                                ++out.considered;
                                tick();
                                if (q.max_samples_per_update && mb * g * r.replicas > q.max_samples_per_update) {
                                    ++out.refused["over --max-samples-per-update"];
                                    continue;
                                }
                                try {
                                    auto e = estimate(r, 1);
                                    // Over budget with replicas: 1/R of the optimiser state per IPU may fit.
                                    if (!e.fits && r.replicas > 1) {
                                        train_request sharded = r;
                                        sharded.optimizer_sharding = true;
                                        if (auto es = estimate(sharded, 1); es.fits) r = sharded, e = std::move(es);
                                    }
                                    if (!e.fits) {
                                        ++out.refused["does not fit"];
                                        continue;
                                    }
                                    if (e.samples < least) {  // D = 1: the least a call takes
                                        ++out.refused[detail::left_out_refusal];
                                        continue;
                                    }
                                    mine.push_back(detail::device_candidate(r, e));
                                } catch (const config::config_error& e) {
                                    ++out.refused[detail::refusal_kind(e.what())];
                                } catch (const usage_error& e) {
                                    ++out.refused[detail::refusal_kind(e.what())];
                                }
                            }
                    }
        std::sort(mine.begin(), mine.end(), [](const auto& a, const auto& b) {
            return a.device_images_per_second > b.device_images_per_second;
        });
        // The host phase: D × I/O × loader for the best, then the fewest workers within 1 % of the most
        // (in the memo's order, so that each staged network is built once).
        const std::size_t cores = host_of(q.base).cores;
        for (std::size_t k = q.refine; k < mine.size(); ++k) out.device.push_back(std::move(mine[k]));
        if (mine.size() > q.refine) mine.resize(q.refine);
        std::stable_sort(mine.begin(), mine.end(), [](const auto& a, const auto& b) {
            return std::tuple{stages_of(a.request), a.request.batch_size, a.request.recompute,
                              a.request.recompute_checkpoints.empty()} <
                   std::tuple{stages_of(b.request), b.request.batch_size, b.request.recompute,
                              b.request.recompute_checkpoints.empty()};
        });
        const std::size_t first = out.plans.size();
        for (std::size_t k = 0; k < mine.size(); ++k)
            if (auto best = refine_host(mine[k], estimate, cores, true, least)) {
                best->epoch_samples = images;
                out.plans.push_back(std::move(*best));
            }
        // The best `q.top` of this precision dry-run again through tessera-train's path, on this network
        // (building one draws every weight: most of a dry run's time); the plans printed, the best of
        // every precision, are among them.
        std::sort(out.plans.begin() + std::ptrdiff_t(first), out.plans.end(),
                  [](const auto& a, const auto& b) { return a.images_per_second > b.images_per_second; });
        for (std::size_t k = first; k < out.plans.size() && k < first + q.top; ++k) {
            const double searched = out.plans[k].epoch_seconds;
            out.plans[k] = judge_on<P>(out.plans[k].request, net, shape);
            // One path from a request to its figures: the search's and tessera-train's are the same.
            if (std::abs(out.plans[k].epoch_seconds - searched) > 1e-9 * searched)
                throw std::logic_error("tessera-plan: the search's epoch of plan " + std::to_string(k - first + 1) +
                                       " (" + out.plans[k].request.strategy + ", " +
                                       std::to_string(stages_of(out.plans[k].request)) + " stages) is " +
                                       std::to_string(searched) + " s, tessera-train's dry run's " +
                                       std::to_string(out.plans[k].epoch_seconds) + " s");
        }
    });
}

/// tessera-plan --trace-top: tessera-train's dry run of plan `r` (precision P, r.trace naming the
/// file) with its trace, on the network the search built for it.
template <class P>
void trace_plan(const train_request& r, const dataset_shape& shape) {
    with_dry_run_network<P>(r, shape.channels, shape.classes, [&](const auto& net) {
        config::dispatch_for<P>(choice_of(r), [&]<class C>() {
            write_dry_run_trace(r, dry_run_request<C>(r, net, shape, true));
            return 0;
        });
    });
}

/// The search of each precision, its plans judged, one file each (plan_fp32.cpp, ...).
void plan_fp32(const plan_request&, const dataset_shape&, plan_outcome&, const std::function<void()>&);
void plan_mixed(const plan_request&, const dataset_shape&, plan_outcome&, const std::function<void()>&);
void plan_half(const plan_request&, const dataset_shape&, plan_outcome&, const std::function<void()>&);
/// trace_plan (or, for a transformer, trace_transformer_plan) at plan `r`'s precision.
void trace_plan_fp32(const train_request& r, const dataset_shape& shape);
void trace_plan_mixed(const train_request& r, const dataset_shape& shape);
void trace_plan_half(const train_request& r, const dataset_shape& shape);

}  // namespace tessera::programs
