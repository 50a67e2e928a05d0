#pragma once
// tessera-plan's search for BERT and GPT-2 (--model bert-<size>|gpt-<size> --dataset wikipedia):
// pipelines split by blocks per IPU, as Graphcore's BERT and GPT-2 ran, each configuration judged by
// tessera-train --dry-run's own path.
//
// The device phase: IPUs per replica (1, or each count dividing --ipus up to --max-stages) × the
// blocks per IPU (layer_splits) × schedule (1F1B, GPipe, zero-bubble on request) × recomputation
// (none, a checkpoint at every block) × micro-batch (powers of two, the first that does not fit ends
// the larger ones) × G, replicas filling the IPUs. What does not fit is tried again with the optimiser
// state sharded across replicas, then in Streaming Memory, then with the vocabulary projection
// serialized into 2, 3, ... pieces (divisors of the vocabulary up to 8): the first that fits is kept.
// The host phase is the image search's (refine_host), without 8-bit I/O.
#include <tessera/tessera.hpp>

#include <algorithm>
#include <cstddef>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "plan_search.hpp"
#include "train_text.hpp"

namespace tessera::programs {

/// The blocks per IPU the search tries for `blocks` blocks on `ipus` IPUs of a replica: IPU 0, which
/// holds the embedding and the head beside its blocks, takes k of them for each k from 0 to an even
/// share; the rest are spread evenly, the extra blocks on the last IPUs. Graphcore's BERT-Large splits
/// are among them: 3,7,7,7 on 4 IPUs and MLPerf's 0,3,3,3,3,4,4,4 on 8. None for one IPU.
[[nodiscard]] inline std::vector<std::vector<std::size_t>> layer_splits(std::size_t blocks, std::size_t ipus) {
    std::vector<std::vector<std::size_t>> splits;
    if (ipus < 2) return splits;
    const std::size_t share = (blocks + ipus - 1) / ipus, others = ipus - 1;
    for (std::size_t first = 0; first <= share && first <= blocks; ++first) {
        const std::size_t rest = blocks - first;
        if (rest < others) break;  // every IPU after the first holds a block
        std::vector<std::size_t> split{first};
        for (std::size_t i = 0; i < others; ++i) split.push_back(rest / others + (i >= others - rest % others ? 1 : 0));
        splits.push_back(std::move(split));
    }
    return splits;
}

/// The IPUs per replica the transformer search tries: 1 (the whole model on one IPU, --strategy
/// single) and the pipelines whose replicas fill `ipus` exactly, up to `max_stages`.
[[nodiscard]] inline std::vector<std::size_t> transformer_stage_counts(std::size_t ipus, std::size_t max_stages) {
    std::vector<std::size_t> v;
    for (std::size_t s = 1; s <= std::min(ipus, max_stages); ++s)
        if (ipus % s == 0) v.push_back(s);
    return v;
}

/// The schedules of `q` a split by blocks per IPU can run (one model chunk per IPU: not interleaved
/// or looped BFS).
[[nodiscard]] inline std::vector<std::string> transformer_schedules(const plan_request& q) {
    std::vector<std::string> v;
    for (const auto& s : q.schedules)
        if (s != "interleaved" && s != "looped-bfs") v.push_back(s);
    return v;
}

/// The G values the transformer search tries: the least a pipeline allows (1 without one; S IPUs run
/// S + 1 stages, the head's on IPU 0: 2S + 1) and 4, 16, 64 and 256 times it (Graphcore's BERT
/// accumulated hundreds to thousands of micro-batches: 1,751 to 2,048 at 128 tokens on 4 IPUs).
[[nodiscard]] inline std::vector<std::size_t> transformer_accumulations(std::size_t ipus_per_replica) {
    const std::size_t least = ipus_per_replica == 1 ? 1 : 2 * (ipus_per_replica + 1) - 1;
    return {least, 4 * least, 16 * least, 64 * least, 256 * least};
}

/// Whether `q` allows strategy `s` (--strategies).
[[nodiscard]] inline bool allows(const plan_request& q, std::string_view s) {
    return std::find(q.strategies.begin(), q.strategies.end(), s) != q.strategies.end();
}

/// The device configurations the transformer search considers, before memory ends any (the
/// progress bar's size): `blocks` blocks.
[[nodiscard]] inline std::size_t transformer_candidates(const plan_request& q, std::size_t blocks) {
    std::size_t n = 0;
    const std::size_t batch_sizes = detail::powers_of_two_to(q.max_batch_size).size();
    for (const std::size_t s : transformer_stage_counts(q.ipus, q.max_stages)) {
        if (!allows(q, s == 1 ? "single" : "pipelined")) continue;
        const std::size_t layouts = s == 1 ? 1 : layer_splits(blocks, s).size() * transformer_schedules(q).size();
        n += layouts * 2 * batch_sizes * transformer_accumulations(s).size();
    }
    return n;
}

/// The vocabulary's serializations tried in turn when a configuration does not fit: 1, then each
/// divisor of `vocab` up to 8.
[[nodiscard]] inline std::vector<std::size_t> serializations_of(std::size_t vocab) {
    std::vector<std::size_t> v{1};
    for (std::size_t f = 2; f <= 8; ++f)
        if (vocab % f == 0) v.push_back(f);
    return v;
}

namespace detail {

/// Calls f.template operator()<C>() with the configuration a transformer plan runs: single, or a
/// pipeline of 1F1B (zero-bubble too) or GPipe, its tokens fed as integers (float I/O).
template <class P, class F>
decltype(auto) dispatch_text(const train_request& r, F&& f) {
    using config::dispatched_config, config::float_io;
    const config::choice c = choice_of(r);
    if (c.strategy == "single") return f.template operator()<dispatched_config<P, config::single, float_io>>();
    if (c.strategy == "pipelined" && c.schedule == "gpipe")
        return f.template operator()<dispatched_config<P, config::pipelined<config::gpipe, config::dynamic>, float_io>>();
    if (c.strategy == "pipelined" && c.schedule == "1f1b")
        return f.template operator()<dispatched_config<P, config::pipelined<config::one_f_one_b, config::dynamic>, float_io>>();
    throw usage_error("tessera-plan: a transformer's plans run single or pipelined (1f1b, gpipe, zero-bubble), not '" +
                      r.strategy + "' with schedule '" + r.schedule + "'");
}

}  // namespace detail

/// Both phases of the transformer search at precision P (see the top of this file); the results go
/// to `out` as search_precision's do, every plan judged by tessera-train's dry run (dry_run_request).
template <class P>
void search_transformer(const plan_request& q, plan_outcome& out, const std::function<void()>& tick) {
    const text_dry_run_inputs base = text_inputs_of(q.base);
    const std::size_t blocks = base.spec.layers;
    const std::size_t epoch = epoch_images(q.base, base.shape), least = detail::least_trained(q, epoch);
    // A configuration by its device settings, without the fallbacks for memory (sharding, off chip,
    // serialization): what fitted at a smaller serialization is not tried again.
    using key_t = std::tuple<std::size_t, std::vector<std::size_t>, std::string, bool, std::size_t, std::size_t>;
    std::set<key_t> considered, fitted, refused;  // refused: by a rule or --max-samples-per-update
    std::vector<plan_candidate> mine;
    // Calls f(estimate): estimate(r, epochs, breakdown) is tessera-train's dry run of request r on
    // the network built from shapes with its vocabulary in `serialization` pieces.
    const auto with_estimate = [&](std::size_t serialization, const auto& f) {
        train_request r = q.base;
        r.serialize_matmul = serialization;
        const text_dry_run_inputs in = text_inputs_of(r);
        const auto on = [&](const auto& net) {
            f([&](const train_request& t, std::size_t epochs, bool breakdown = false) {
                return detail::dispatch_text<P>(t, [&]<class C>() {
                    return dry_run_request<C>(t, net, in.shape, breakdown, exec::token_loss<P>{}, epochs);
                });
            });
        };
        if (in.bert)
            on(nn::make_bert<P>(in.spec, nn::shapes_only));
        else
            on(nn::make_gpt2<P>(in.spec, nn::shapes_only));
    };
    const std::vector<std::size_t> serializations = serializations_of(base.spec.vocab);
    for (const std::size_t serialization : serializations)
        with_estimate(serialization, [&](const auto& estimate) {
            const bool first_pass = serialization == serializations.front();
            for (const std::size_t stages : transformer_stage_counts(q.ipus, q.max_stages)) {
                if (!allows(q, stages == 1 ? "single" : "pipelined")) continue;
                std::vector<std::vector<std::size_t>> splits = layer_splits(blocks, stages);
                if (stages == 1) splits = {{}};
                const std::vector<std::string> schedules =
                    stages == 1 ? std::vector<std::string>{"1f1b"} : transformer_schedules(q);
                for (const auto& split : splits)
                    for (const auto& schedule : schedules)
                        for (const bool checkpoints : {false, true}) {
                            bool any_fits = true;  // the smallest micro-batch that fits nothing ends the larger
                            for (const std::size_t mb : detail::powers_of_two_to(q.max_batch_size)) {
                                const auto gs = transformer_accumulations(stages);
                                if (!any_fits) {
                                    if (first_pass)
                                        for (const std::size_t g : gs) considered.insert({stages, split, schedule, checkpoints, mb, g}), tick();
                                    continue;
                                }
                                any_fits = false;
                                bool g_fits = true;  // GPipe stashes G micro-batches: a G that does not fit ends the larger
                                for (const std::size_t g : gs) {
                                    const key_t key{stages, split, schedule, checkpoints, mb, g};
                                    if (first_pass) considered.insert(key), tick();
                                    if (fitted.contains(key)) {
                                        any_fits = true;
                                        continue;
                                    }
                                    if (!g_fits) continue;
                                    train_request r = q.base;
                                    r.strategy = stages == 1 ? "single" : "pipelined";
                                    r.schedule = schedule, r.ipus_per_replica = stages, r.layers_per_ipu = split;
                                    r.head_ipu = "first";
                                    r.recompute = false, r.recompute_checkpoints.clear();
                                    if (checkpoints) r.recompute_checkpoints = {"every-unit"};
                                    r.batch_size = mb, r.gradient_accumulation = g, r.serialize_matmul = serialization;
                                    r.device_iterations = 1, r.eight_bit_io = false, r.async_dataloader = true;
                                    r.replicas = q.ipus / stages, r.instances = 1, r.split.clear();
                                    if (q.max_samples_per_update && mb * g * r.replicas > q.max_samples_per_update) {
                                        if (first_pass) ++out.refused["over --max-samples-per-update"], refused.insert(key);
                                        continue;
                                    }
                                    try {
                                        std::vector<train_request> tries{r};  // as it is, sharded, off chip
                                        if (r.replicas > 1) {
                                            tries.push_back(r);
                                            tries.back().optimizer_sharding = true;
                                        }
                                        tries.push_back(tries.back());
                                        tries.back().optimizer_state_offchip = true;
                                        bool fits = false;
                                        for (const train_request& t : tries) {
                                            const exec::epoch_estimate e = estimate(t, 1);
                                            if (!e.fits) continue;
                                            fits = any_fits = true;
                                            if (e.samples < least) {  // D = 1: the least a call takes
                                                if (refused.insert(key).second) ++out.refused[detail::left_out_refusal];
                                                break;
                                            }
                                            mine.push_back(detail::device_candidate(t, e));
                                            fitted.insert(key);
                                            break;
                                        }
                                        // No schedule holds less with a larger G (GPipe holds more).
                                        if (!fits) g_fits = false;
                                    } catch (const config::config_error& e) {
                                        if (first_pass) ++out.refused[detail::refusal_kind(e.what())], refused.insert(key);
                                    } catch (const usage_error& e) {
                                        if (first_pass) ++out.refused[detail::refusal_kind(e.what())], refused.insert(key);
                                    }
                                }
                            }
                        }
            }
        });
    // What fitted at no serialization (or was not tried, a smaller micro-batch or G not fitting):
    // refused as not fitting.
    out.considered += considered.size();
    std::size_t over = 0;
    for (const key_t& key : considered) over += !fitted.contains(key) && !refused.contains(key);
    if (over > 0) out.refused["does not fit"] += over;
    std::sort(mine.begin(), mine.end(),
              [](const auto& a, const auto& b) { return a.device_images_per_second > b.device_images_per_second; });
    for (std::size_t k = q.refine; k < mine.size(); ++k) out.device.push_back(std::move(mine[k]));
    if (mine.size() > q.refine) mine.resize(q.refine);
    // The host phase, on the network of each candidate's serialization; every plan's figures are
    // tessera-train --dry-run's.
    const std::size_t cores = host_of(q.base).cores;
    const std::size_t first = out.plans.size();
    for (const std::size_t serialization : serializations) {
        const auto of_it = [&](const plan_candidate& c) { return c.request.serialize_matmul == serialization; };
        if (std::none_of(mine.begin(), mine.end(), of_it)) continue;  // no network to build
        with_estimate(serialization, [&](const auto& estimate) {
            for (const plan_candidate& c : mine)
                if (of_it(c))
                    if (auto best = refine_host(c, estimate, cores, false, least)) {
                        best->judged = true, best->epoch_samples = epoch;
                        out.plans.push_back(std::move(*best));
                    }
        });
    }
    std::sort(out.plans.begin() + std::ptrdiff_t(first), out.plans.end(),
              [](const auto& a, const auto& b) { return a.images_per_second > b.images_per_second; });
}

/// tessera-plan --trace-top for a transformer: tessera-train's dry run of plan `r` (precision P,
/// r.trace naming the file) with its trace, on the network built from its shapes.
template <class P>
void trace_transformer_plan(const train_request& r) {
    const text_dry_run_inputs in = text_inputs_of(r);
    const auto on = [&](const auto& net) {
        detail::dispatch_text<P>(r, [&]<class C>() {
            write_dry_run_trace(r, dry_run_request<C>(r, net, in.shape, true, exec::token_loss<P>{}));
            return 0;
        });
    };
    if (in.bert)
        on(nn::make_bert<P>(in.spec, nn::shapes_only));
    else
        on(nn::make_gpt2<P>(in.spec, nn::shapes_only));
}

/// The transformer search of each precision, one file each (plan_fp32.cpp, ...).
void plan_text_fp32(const plan_request&, plan_outcome&, const std::function<void()>&);
void plan_text_mixed(const plan_request&, plan_outcome&, const std::function<void()>&);
void plan_text_half(const plan_request&, plan_outcome&, const std::function<void()>&);

}  // namespace tessera::programs
