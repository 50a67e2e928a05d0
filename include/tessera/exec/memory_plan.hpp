#pragma once
// The memory plan of each IPU: weights, optimiser state, gradient accumulators, stashed activations.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tessera/detail/small_sort.hpp"
#include "tessera/emulator/code_memory.hpp"
#include "tessera/emulator/device_spec.hpp"
#include "tessera/emulator/error.hpp"
#include "tessera/emulator/memory_arena.hpp"
#include "tessera/emulator/partials.hpp"
#include "tessera/emulator/pass_model.hpp"
#include "tessera/exec/cost.hpp"
#include "tessera/exec/schedule.hpp"

namespace tessera::exec {

struct memory_item {
    std::string name;
    std::size_t bytes;
    emulator::memory_kind kind;
    location where = location::on_chip;
};

/// One IPU's items against its budget.
struct ipu_memory_plan {
    std::size_t ipu = 0;
    std::size_t budget = 0;
    std::vector<memory_item> items;

    [[nodiscard]] std::size_t on_chip() const noexcept {
        std::size_t n = 0;
        for (const auto& i : items)
            if (i.where == location::on_chip) n += i.bytes;
        return n;
    }
    [[nodiscard]] std::size_t off_chip() const noexcept {
        std::size_t n = 0;
        for (const auto& i : items)
            if (i.where == location::streaming_memory) n += i.bytes;
        return n;
    }
};

struct memory_plan {
    std::vector<ipu_memory_plan> ipus;
};

/// Plans each IPU's memory for `sched` and checks it against the device budget (on-chip items) and
/// Streaming Memory's capacity (off-chip items). Over budget: emulator::out_of_device_memory naming
/// the IPU, its budget and the largest items, raised here, before anything runs.
/// Memory is per tile, and the fullest tile decides: the items are spread over the IPU's compute
/// tiles, and while a pass runs its busiest tile also holds the pass's temporaries, so the plan
/// counts the largest of them once per tile ("pass temporaries"), the chip's figure of a plan in
/// which every tile is as full as the fullest.
/// Phased schedules keep one stage's weights (the largest) on chip and the rest in Streaming
/// Memory, and stash activations off chip; cost_model::locations moves any kind of tensor off chip;
/// recomputing stages stash only their inputs; with the optimiser state sharded, each replica's IPUs
/// hold 1/replicas of it.
/// lay_out_memory() makes the same plan without checking it (a dry run reports what does not fit).
[[nodiscard]] memory_plan lay_out_memory(const schedule& sched, const cost_model& costs,
                                         const emulator::device_spec& spec = {}, bool check = false);

[[nodiscard]] inline memory_plan plan_memory(const schedule& sched, const cost_model& costs,
                                             const emulator::device_spec& spec = {}) {
    return lay_out_memory(sched, costs, spec, true);
}

/// Bytes by which the fullest IPU's on-chip items exceed its budget (0: the plan fits).
[[nodiscard]] inline std::size_t memory_overshoot(const memory_plan& plan) noexcept {
    std::size_t over = 0;
    for (const auto& p : plan.ipus) over = std::max(over, p.on_chip() > p.budget ? p.on_chip() - p.budget : 0);
    return over;
}

/// Bytes of the output gradients a stage's weight-gradient passes read, per micro-batch: each
/// contraction's summed operand (positions or samples) × its results' channels, at `bits` per value.
[[nodiscard]] inline std::size_t weight_gradient_input_bytes(const stage_cost& c, int bits) noexcept {
    double values = 0;
    for (const auto& p : c.backward_passes)
        if (p.weight_gradient && p.kind == nn::pass_kind::contraction) values += p.inputs * p.outputs;
    return static_cast<std::size_t>(values * bits / 8);
}

/// Bytes a split backward keeps per micro-batch of a stage from its B pass to its W pass: the output
/// gradients its weight gradients read, and a recomputing stage's recomputed activations.
[[nodiscard]] inline std::size_t held_gradient_bytes(const stage_cost& c, int bits) noexcept {
    return weight_gradient_input_bytes(c, bits) + (c.recompute ? c.stash_bytes : 0);
}

/// Whether the activation stash is held on chip (not in Streaming Memory: phased execution or
/// tensor_locations::activations).
[[nodiscard]] inline bool stash_on_chip(const schedule& sched, const cost_model& costs) noexcept {
    return !sched.activations_off_chip && costs.locations.activations != location::streaming_memory;
}

/// What an IPU's passes hold on each tile: the most temporary memory one of them holds on its
/// busiest tile (emulator::pass_cycles::tile_bytes: the inputs it receives, and partial sums wider
/// than the data — float partials of 16-bit data — or split over tiles), and their code (vertex
/// code, exchange code, control code and vertex state: emulator::code_of, each distinct pass once).
struct tile_pass_memory {
    std::size_t temporaries = 0;
    emulator::tile_code code{};
};

/// tile_pass_memory of `passes` (forward passes, and backward ones in training, of an IPU's stages)
/// on `compute`'s tiles. Each distinct pass is modelled once.
[[nodiscard]] inline tile_pass_memory pass_memory_per_tile(std::span<const nn::pass> passes, const cost_model& costs,
                                                           const emulator::device_spec& compute,
                                                           double available_memory_proportion) {
    const std::vector<nn::pass> distinct = emulator::distinct_passes(passes);
    std::vector<emulator::pass_cycles> cycles;
    cycles.reserve(distinct.size());
    double most = 0;
    for (const auto& p : distinct) {
        cycles.push_back(emulator::cycles_of(p, compute, costs.bits, costs.partials, available_memory_proportion));
        most = std::max(most, cycles.back().tile_bytes);
    }
    return {static_cast<std::size_t>(std::ceil(most)), emulator::code_of(distinct, cycles, compute.code)};
}

/// `c` less the copies of a tied table beyond the IPU's first (`held`: an earlier stage of the IPU
/// holds one); sets `held` when `c` holds a copy.
[[nodiscard]] inline stage_cost without_second_tied_copy(stage_cost c, bool& held) {
    if (c.tied_copies == 0 || c.tied_parameters == 0 || c.parameters == 0) return c;
    const std::size_t extra = c.tied_copies - (std::exchange(held, true) ? 0 : 1);
    const auto less = [&](std::size_t& bytes) { bytes -= bytes / c.parameters * c.tied_parameters * extra; };
    less(c.weight_bytes), less(c.optimiser_bytes), less(c.gradient_bytes);
    return c;
}

inline memory_plan lay_out_memory(const schedule& sched, const cost_model& costs, const emulator::device_spec& spec,
                                  bool check) {
    costs.check(sched.stages);
    const bool training = sched.request.training;
    // Sharded optimiser state: each replica keeps the state of its shard of the weights (the largest
    // shard has one element more than the smallest: counted as ceil(bytes / replicas)).
    const std::size_t shards = sched.optimizer_sharded() ? sched.request.replicas : 1;
    const auto optimiser_bytes = [&](const stage_cost& c) { return (c.optimiser_bytes + shards - 1) / shards; };
    memory_plan plan;
    const emulator::device_spec compute = spec.compute_tiles(costs.io_tiles);  // I/O tiles hold I/O only
    for (std::size_t ipu = 0; ipu < sched.ipus; ++ipu) {
        ipu_memory_plan p{ipu, compute.memory_bytes(), {}};
        std::size_t largest_streamed = 0;
        std::vector<nn::pass> passes;  // of the IPU's stages: their temporaries and code
        double available_memory_proportion = costs.available_memory_proportion;  // the IPU's (each of its stages')
        bool tied_held = false;  // a copy of the tied table is already on this IPU
        for (std::size_t s = 0; s < sched.stages; ++s) {
            if (sched.request.ipu_of_stage[s] != ipu) continue;
            available_memory_proportion = costs.available_memory_proportion_of(s);
            // A second copy of a tied table on the IPU is the first one: its weights, gradients and
            // state are held once (the head's decoder reads the embedding's table, as PopTorch ties them).
            const bool second_copy = costs.stages[s].tied_copies > (tied_held ? 0 : 1);
            const stage_cost c = without_second_tied_copy(costs.stages[s], tied_held);
            const std::string st = "stage " + std::to_string(s) + (second_copy ? " (its tied table counted once) " : " ");
            const auto& where = costs.locations;
            const auto off = [&](location l) { return sched.weights_streamed ? location::streaming_memory : l; };
            p.items.push_back({st + "weights", c.weight_bytes, emulator::memory_kind::weights, off(where.weights)});
            if (training) {
                p.items.push_back({st + "gradient accumulators", c.accumulator_bytes(),
                                   emulator::memory_kind::gradient_accumulators, off(where.gradient_accumulators)});
                if (c.optimiser_bytes > 0)
                    p.items.push_back({st + (shards > 1 ? "optimiser state (1/" + std::to_string(shards) + " shard)"
                                                        : std::string("optimiser state")),
                                       optimiser_bytes(c), emulator::memory_kind::optimiser_state,
                                       off(where.optimiser_state)});
                const std::size_t stash = sched.stash[s] * costs.stashed_bytes(s);
                if (stash > 0)
                    p.items.push_back({st + "activation stash (" + std::to_string(sched.stash[s]) +
                                           (sched.stash[s] == 1 ? " micro-batch" : " micro-batches") +
                                           (!c.recompute              ? ""
                                            : c.checkpoint_bytes > 0 ? ", inputs and checkpoints: recomputed"
                                                                     : ", inputs only: recomputed") +
                                           ")",
                                       stash, emulator::memory_kind::activations,
                                       stash_on_chip(sched, costs) ? location::on_chip : location::streaming_memory});
                // A split backward (zero-bubble) keeps, from B to W, the output gradients its weight
                // gradients read (a recomputing stage: its recomputed activations too).
                const std::size_t held = sched.held_gradients.empty() ? 0 : sched.held_gradients[s];
                if (held > 0)
                    p.items.push_back({st + "gradients held for weight-gradient passes (" + std::to_string(held) +
                                           (held == 1 ? " micro-batch)" : " micro-batches)"),
                                       held * held_gradient_bytes(c, costs.bits),
                                       emulator::memory_kind::activations, location::on_chip});
            }
            // Working space of one micro-batch (the stage's output, or its stash while it is computed;
            // inference frees each unit's activations after it).
            p.items.push_back({st + "working activations", training ? c.working_bytes() : c.inference_working_bytes(),
                               emulator::memory_kind::activations, location::on_chip});
            passes.insert(passes.end(), c.forward_passes.begin(), c.forward_passes.end());
            if (training) passes.insert(passes.end(), c.backward_passes.begin(), c.backward_passes.end());
            if (sched.weights_streamed)
                largest_streamed = std::max(largest_streamed,
                                            c.weight_bytes + (training ? c.accumulator_bytes() + optimiser_bytes(c) : 0));
            else if (where.weights == location::streaming_memory)
                largest_streamed = std::max(largest_streamed, c.weight_bytes);  // the copy being used
        }
        if (largest_streamed > 0)
            p.items.push_back({"streamed-in stage (largest)", largest_streamed, emulator::memory_kind::weights,
                               location::on_chip});
        const tile_pass_memory per_tile = pass_memory_per_tile(passes, costs, compute, available_memory_proportion);
        if (per_tile.temporaries > 0)
            p.items.push_back({"pass temporaries (the fullest tile's " + std::to_string(per_tile.temporaries) +
                                   " bytes, on each of " + std::to_string(compute.tiles) + " tiles)",
                               per_tile.temporaries * compute.tiles, emulator::memory_kind::activations, location::on_chip});
        if (const auto code = static_cast<std::size_t>(std::ceil(per_tile.code.total())); code > 0)
            p.items.push_back({"code (an estimate, " + std::to_string(code) + " bytes per tile: vertex " +
                                   std::to_string(std::lround(per_tile.code.vertex)) + ", exchange " +
                                   std::to_string(std::lround(per_tile.code.exchange)) + ", control and vertex state " +
                                   std::to_string(std::lround(per_tile.code.control)) + "; on each of " +
                                   std::to_string(compute.tiles) + " tiles)",
                               code * compute.tiles, emulator::memory_kind::code, location::on_chip});
        std::size_t io = 0;
        for (const auto& in : sched.programs[ipu]) {
            if (in.op == opcode::recv_act) io = std::max(io, costs.stages[in.stage].input_bytes);
            if (in.op == opcode::recv_grad) io = std::max(io, costs.stages[in.stage].output_bytes);
            if (in.op == opcode::load) io = std::max(io, costs.stages[in.stage].input_bytes + costs.label_bytes);
        }
        if (io > 0)
            p.items.push_back({"receive buffers (" + std::to_string(sched.channel_capacity) + " messages)",
                               io * sched.channel_capacity, emulator::memory_kind::io_buffers, location::on_chip});

        if (!check) {
            plan.ipus.push_back(std::move(p));
            continue;
        }
        // Account on arenas, largest first, so that the error names the largest items.
        std::vector<const memory_item*> by_size;
        for (const auto& item : p.items) by_size.push_back(&item);
        tessera::detail::small_stable_sort(by_size, [](auto* a, auto* b) { return a->bytes > b->bytes; });
        emulator::memory_arena on_chip(ipu, p.budget);
        emulator::memory_arena off_chip(ipu, spec.streaming_memory_capacity);
        for (const auto* item : by_size)
            (void)(item->where == location::on_chip ? on_chip : off_chip).allocate(item->name, item->bytes, item->kind);
        plan.ipus.push_back(std::move(p));
    }
    return plan;
}

}  // namespace tessera::exec
