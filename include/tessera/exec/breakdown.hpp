#pragma once
// Where one call's modelled time goes on its critical IPU: compute, exchange, sync, links, host I/O, idle.
#include <algorithm>
#include <cstddef>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/emulator/device_spec.hpp"
#include "tessera/emulator/modelled_clock.hpp"
#include "tessera/emulator/pass_model.hpp"
#include "tessera/exec/cost.hpp"
#include "tessera/exec/schedule.hpp"

namespace tessera::exec {

/// Seconds of one call on the IPU whose clock ends last, by what filled them; they add up to its
/// makespan. Layer passes (forward, backward, recompute) are split into the pass model's parts in
/// the proportions of that IPU's passes: the busiest tile's compute, the exchange it receives, BSP
/// syncs, and the pass overhead (rearranging activations between layouts, and
/// device_spec::pass_overhead_cycles). `sync` also holds a lock-step pipeline's syncs between cycles.
struct time_breakdown {
    double compute = 0, exchange = 0, sync = 0, pass_overhead = 0;  ///< layer passes
    double update = 0;       ///< optimiser steps
    double ipu_links = 0;    ///< activations and gradients between the stages' IPUs
    double all_reduce = 0;   ///< gradients across replicas (and hosts)
    double host_io = 0;      ///< infeed, labels, outfeed, host syncs
    double streaming = 0;    ///< Streaming Memory (phased execution, off-chip tensors)
    double idle = 0;         ///< waiting for another IPU: the pipeline's bubble and unbalanced stages
    std::size_t ipu = 0;     ///< the critical IPU (of one replica)
    double bubble_fraction = 0;  ///< idle share of all the replica's IPU time in the call

    [[nodiscard]] double total() const noexcept {
        return compute + exchange + sync + pass_overhead + update + ipu_links + all_reduce + host_io + streaming + idle;
    }
    /// Every part multiplied by `k` (a call's breakdown times the calls of an epoch).
    [[nodiscard]] time_breakdown scaled(double k) const noexcept {
        time_breakdown b = *this;
        for (double* v : {&b.compute, &b.exchange, &b.sync, &b.pass_overhead, &b.update, &b.ipu_links, &b.all_reduce,
                          &b.host_io, &b.streaming, &b.idle})
            *v *= k;
        return b;
    }
};

/// The breakdown of `clocks` (one call, recorded: modelled_clock::recording()) of schedule `sched`.
[[nodiscard]] inline time_breakdown breakdown_of(const std::vector<emulator::modelled_clock>& clocks,
                                                 const schedule& sched, const cost_model& costs,
                                                 const emulator::device_spec& spec) {
    time_breakdown b;
    if (clocks.empty()) return b;
    double makespan = 0, idle_all = 0;
    std::vector<double> busy(clocks.size(), 0.0);
    for (std::size_t i = 0; i < clocks.size(); ++i) {
        makespan = std::max(makespan, clocks[i].now());
        for (const auto& e : clocks[i].trace())
            if (e.kind != emulator::activity::idle) busy[i] += e.end - e.start;
    }
    // The critical IPU: the busiest (the IPU that ends last may only be finishing its update: in
    // lock-step cycles every IPU waits for the slowest, which is the busiest).
    b.ipu = static_cast<std::size_t>(std::max_element(busy.begin(), busy.end()) - busy.begin());
    // The pass model's parts over the critical IPU's stages, forward and backward.
    emulator::pass_cycles parts;
    const emulator::device_spec compute = spec.compute_tiles(costs.io_tiles);  // the tiles the passes run on
    for (std::size_t s = 0; s < sched.stages && s < costs.stages.size(); ++s) {
        if (sched.request.ipu_of_stage[s] != b.ipu) continue;
        for (const auto* list : {&costs.stages[s].forward_passes, &costs.stages[s].backward_passes})
            for (const auto& p : *list) {
                const auto c = emulator::cycles_of(p, compute, costs.bits, costs.partials,
                                                   costs.available_memory_proportion_of(s));
                parts.compute += c.compute, parts.exchange += c.exchange, parts.sync += c.sync, parts.overhead += c.overhead;
            }
    }
    const double whole = parts.total();
    double passes = 0, cycle_syncs = 0;  // cycle_syncs: a lock-step pipeline's syncs between cycles
    for (std::size_t i = 0; i < clocks.size(); ++i) {
        idle_all += std::max(0.0, makespan - busy[i]);
        if (i != b.ipu) continue;
        b.idle = std::max(0.0, makespan - busy[i]);  // the parts add up to the call's makespan
        for (const auto& e : clocks[i].trace()) {
            const double t = e.end - e.start;
            switch (e.kind) {
                case emulator::activity::forward:
                case emulator::activity::backward:
                case emulator::activity::weight_gradient:
                case emulator::activity::recompute: passes += t; break;
                case emulator::activity::update: b.update += t; break;
                case emulator::activity::all_reduce: b.all_reduce += t; break;
                case emulator::activity::transfer: b.ipu_links += t; break;
                case emulator::activity::sync: cycle_syncs += t; break;
                case emulator::activity::host_io: b.host_io += t; break;
                case emulator::activity::streaming: b.streaming += t; break;
                case emulator::activity::idle: break;
            }
        }
    }
    if (whole > 0) {
        b.compute = passes * parts.compute / whole, b.exchange = passes * parts.exchange / whole;
        b.sync = passes * parts.sync / whole, b.pass_overhead = passes * parts.overhead / whole;
    } else {
        b.compute = passes;  // a model without passes: FLOPs at the peak rate
    }
    b.sync += cycle_syncs;
    b.bubble_fraction = makespan > 0 ? idle_all / (makespan * double(clocks.size())) : 0.0;
    return b;
}

/// What limits an epoch of breakdown `b` (a call's times the calls) with the IPUs `host_wait` seconds
/// waiting for the host: the largest of "host" (the IPUs wait for data and dispatch), "compute"
/// (layer passes and updates), "bubble" (IPUs idle waiting for each other), "links" (IPU-Links:
/// stages and all-reduce), "host link" (infeed and outfeed over PCIe) and "streaming" (Streaming Memory).
[[nodiscard]] inline std::string_view bottleneck_of(const time_breakdown& b, double host_wait) noexcept {
    const std::pair<std::string_view, double> parts[] = {
        {"host", host_wait},
        {"compute", b.compute + b.exchange + b.sync + b.pass_overhead + b.update},
        {"bubble", b.idle},
        {"links", b.ipu_links + b.all_reduce},
        {"host link", b.host_io},
        {"streaming", b.streaming}};
    const auto* best = &parts[0];
    for (const auto& p : parts)
        if (p.second > best->second) best = &p;
    return best->first;
}

}  // namespace tessera::exec
