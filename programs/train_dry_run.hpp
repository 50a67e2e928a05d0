#pragma once
// tessera-train --dry-run: the modelled epoch of a request, its memory and where its time goes,
// with nothing trained and no data read (the dataset by its shape). tessera-plan searches with it.
#include <tessera/tessera.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>

#include "train_datasets.hpp"
#include "train_report.hpp"
#include "train_request.hpp"
#include "train_settings.hpp"
#include "train_trace.hpp"

namespace tessera::programs {

/// The counts of request `r`'s dry run: an inference one (--inference) accumulates nothing (G = 1).
[[nodiscard]] inline config::options dry_run_counts(const train_request& r) {
    config::options counts = counts_of(r);
    if (r.inference) counts.gradient_accumulation = 1;
    return counts;
}

/// The dry run of request `r` with network `net` under configuration C, as a session would compile
/// it (the same counts, cuts, host and loading as training). A plan that does not fit is reported
/// (epoch_estimate::fits), not thrown; every other broken rule throws as training would. `epochs`:
/// the host's epochs simulated, the figure the last's (tessera-plan's device phase needs one).
template <class C, class Net, class Loss = exec::class_loss<typename Net::precision>>
[[nodiscard]] exec::epoch_estimate dry_run_request(const train_request& r, const Net& net, const dataset_shape& shape,
                                                   bool breakdown = true, Loss loss = {}, std::size_t epochs = 2) {
    const config::options counts = dry_run_counts(r);  // --inference: C is an inference form
    const config::batching b = config::make_batching<C>(counts);
    exec::session_options settings = session_options_of(r, net, b, loader_options_of<C>(r, {}));
    settings.record_trace = breakdown;
    if (r.inference) settings.outputs.reset();  // the inference form's: every output
    return exec::dry_run<C>(net, optimizer_of(r), shape.sample(), counts, epoch_images(r, shape), settings, epochs,
                            exec::over_budget::reported, loss);
}

/// Writes --trace of dry run `e`: the first --trace-calls calls of its epoch (2 by default), each
/// the call the dry run simulated, standing for its share of the epoch's calls.
inline void write_dry_run_trace(const train_request& r, const exec::epoch_estimate& e) {
    std::ofstream file(r.trace);
    if (!file) throw std::runtime_error("--trace: cannot write " + r.trace);
    report::trace_writer out(file);
    const std::size_t calls = exec::write_trace(out, e, trace_calls_of(r));
    out.close([&](report::json_writer& j) {
        j.member("what", "tessera-train --dry-run: one replica's IPUs (every replica runs the same) and the host");
        j.member("clocks", "modelled");
        j.member("calls_traced", calls).member("calls_in_epoch", e.calls);
        j.member("calls_each_traced_call_stands_for", calls > 0 ? double(e.calls) / double(calls) : 0.0);
    });
    file.close();
    if (!file) throw std::runtime_error("--trace: failed writing " + r.trace);
    std::printf("trace: %s (%zu of the epoch's %zu calls, each standing for %.4g; %zu events)\n", r.trace.c_str(), calls,
                e.calls, calls > 0 ? double(e.calls) / double(calls) : 0.0, out.events());
}

/// Prints dry run `e` of request `r` under batching `b` (and writes --metrics-json and --trace).
inline int print_dry_run(const train_request& r, const exec::epoch_estimate& e, const config::batching& b,
                         const dataset_shape& shape) {
    const std::size_t ipus = b.replicas * b.ipus_per_replica;
    const auto& d = e.device_breakdown;
    const double host_wait = std::max(0.0, e.seconds - e.device_seconds);
    const std::string bottleneck(exec::bottleneck_of(d, host_wait));
    const char* noun = shape.samples_noun();
    const double packing = shape.sequences_per_sample;  // sequences per sample (packed: several)
    if (shape.text && packing != 1)
        std::printf("dry run%s: nothing %s (--dataset %s: %.0f sequences in %zu packs of %zu tokens, %g a pack)\n",
                    r.inference ? " of inference" : "", r.inference ? "run" : "trained", r.dataset.c_str(),
                    double(epoch_images(r, shape)) * packing, epoch_images(r, shape), shape.width, packing);
    else if (shape.text)
        std::printf("dry run%s: nothing %s (--dataset %s: %zu sequences of %zu tokens)\n", r.inference ? " of inference" : "",
                    r.inference ? "run" : "trained", r.dataset.c_str(), epoch_images(r, shape), shape.width);
    else
        std::printf("dry run%s: nothing %s, no data read (--dataset %s: %zu images of %zu x %zu x %zu)\n",
                    r.inference ? " of inference" : "", r.inference ? "run" : "trained", r.dataset.c_str(),
                    epoch_images(r, shape), shape.channels, shape.height, shape.width);
    std::printf("modelled epoch: %.3f s, %.0f %s/s on %zu IPUs (%zu replicas x %zu IPUs) and their host (%s)\n",
                e.seconds, e.samples_per_second() * packing, noun, ipus, b.replicas, b.ipus_per_replica, r.host.c_str());
    if (shape.text && packing != 1)
        std::printf("packs: %.0f a second; tokens: %.0f a second, the packs' padding included\n", e.samples_per_second(),
                    e.samples_per_second() * double(shape.width));
    else if (shape.text)
        std::printf("tokens: %.0f a second\n", e.samples_per_second() * double(shape.width));
    const double ipu_images_per_second = packing * double(b.combined_batch() * b.instances) / e.call_device_seconds;
    if (r.inference)
        std::printf("inference: %.0f %s/s on the IPUs alone; latency %.3f ms from a call's start to its first "
                    "micro-batch of %zu at the host\n",
                    ipu_images_per_second, noun, 1e3 * e.first_output_seconds, b.micro_batch);
    for (const auto& ipu : e.memory.ipus) {
        const std::size_t used = ipu.on_chip();
        std::printf("IPU %zu memory: %s of %s%s, %s\n", ipu.ipu, mib(used).c_str(), mib(ipu.budget).c_str(),
                    b.replicas > 1 ? " (each replica)" : "",
                    used <= ipu.budget ? "fits" : ("does not fit: over by " + mib(used - ipu.budget)).c_str());
    }
    const double host_prepare = std::min(e.host_prepare_seconds, host_wait), host_dispatch = host_wait - host_prepare;
    std::printf("where the epoch goes (s): compute %.3f, exchange %.3f, sync %.3f, pass overhead %.3f, update %.3f, "
                "IPU links %.3f, all-reduce %.3f, host link %.3f, streaming %.3f, idle %.3f, waiting for the host %.3f "
                "(for batches %.3f, for feeding and dispatch %.3f)\n",
                d.compute, d.exchange, d.sync, d.pass_overhead, d.update, d.ipu_links, d.all_reduce, d.host_io, d.streaming,
                d.idle, host_wait, host_prepare, host_dispatch);
    std::printf("bubble: %.1f%% of the IPUs' time; bottleneck: %s%s\n", 100.0 * d.bubble_fraction, bottleneck.c_str(),
                e.fits ? "" : "; the configuration does not fit the IPUs' memory");
    if (!r.trace.empty()) write_dry_run_trace(r, e);
    if (r.metrics_json.empty()) return 0;
    std::ofstream out(r.metrics_json);
    if (!out) throw std::runtime_error("cannot write " + r.metrics_json);
    report::json_writer j(out);
    j.begin_object();
    write_configuration(j, r, epoch_images(r, shape), shape.text);
    j.key("modelled").begin_object();
    j.member("epoch_seconds", e.seconds);
    if (shape.text) {  // a sequence of --seq-len tokens is a sample, or with --packing a pack of several
        j.member("sequences_per_second", e.samples_per_second() * packing);
        j.member("tokens_per_second", e.samples_per_second() * double(shape.width));
        j.member("sequences", std::llround(double(e.samples) * packing)).member("sequence_length", shape.width);
        if (packing != 1)
            j.member("packs_per_second", e.samples_per_second()).member("packs", e.samples).member("packing", packing);
    } else {
        j.member("images_per_second", e.samples_per_second()).member("images", e.samples);
    }
    j.member("calls", e.calls).member("ipu_count", ipus);
    j.member("inference", r.inference)
        .member(shape.text ? "ipu_sequences_per_second" : "ipu_images_per_second", ipu_images_per_second);
    j.member("first_output_seconds", e.first_output_seconds);
    j.member("fits", e.fits).member("overshoot_bytes", e.overshoot_bytes);
    j.key("breakdown").begin_object();
    j.member("compute", d.compute).member("exchange", d.exchange).member("sync", d.sync);
    j.member("pass_overhead", d.pass_overhead).member("update", d.update).member("ipu_links", d.ipu_links);
    j.member("all_reduce", d.all_reduce).member("host_io", d.host_io).member("streaming", d.streaming);
    j.member("idle", d.idle).member("host_wait", host_wait);
    // host_wait's two parts (not added again: the members above host_wait add up to epoch_seconds).
    j.member("host_prepare", host_prepare).member("host_dispatch", host_dispatch);
    j.end_object();
    j.key("host_busy").begin_object();  // the host's own work per epoch (overlaps the IPUs when async)
    j.member("host_prepare", double(e.calls) * e.host_per_call.prepare_seconds);
    j.member("host_feed", double(e.calls) * e.host_per_call.feed_seconds);
    j.end_object();
    j.member("bubble_fraction", d.bubble_fraction).member("bottleneck", bottleneck);
    j.key("ipus").begin_array();
    for (const auto& ipu : e.memory.ipus) {
        j.begin_object().member("ipu", ipu.ipu).member("memory_bytes", ipu.on_chip()).member("capacity_bytes", ipu.budget);
        j.key("items");  // what fills it, as the memory plan counts it
        exec::write_json_items(j, ipu);
        j.end_object();
    }
    j.end_array();
    j.end_object();
    j.end_object();
    out << '\n';
    return 0;
}

/// The dry run of `r` with network `net` (and its loss) under configuration C, printed.
template <class C, class Net, class Loss = exec::class_loss<typename Net::precision>>
int report_dry_run(const train_request& r, const Net& net, const dataset_shape& shape, Loss loss = {}) {
    if (r.inference) {
        using I = typename C::for_inference;
        return print_dry_run(r, dry_run_request<I>(r, net, shape, true, loss), config::make_batching<I>(dry_run_counts(r)),
                             shape);
    }
    return print_dry_run(r, dry_run_request<C>(r, net, shape, true, loss), config::make_batching<C>(counts_of(r)), shape);
}

}  // namespace tessera::programs
