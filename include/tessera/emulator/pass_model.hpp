#pragma once
// How long one layer pass takes on an IPU: a small version of the planner Poplar's libraries use.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>

#include "tessera/emulator/available_memory.hpp"
#include "tessera/emulator/device_spec.hpp"
#include "tessera/emulator/partials.hpp"
#include "tessera/nn/cost.hpp"

namespace tessera::emulator {

/// The modelled tile-cycles of one pass, by what fills them. A pass is one BSP superstep or a few:
/// every tile computes on what it holds, then they synchronise and exchange; the IPU takes as long
/// as its busiest tile.
struct pass_cycles {
    double compute = 0;   ///< the busiest tile's vertices (AMP loops, vector loops, their overheads)
    double exchange = 0;  ///< data the busiest tile receives over the exchange
    double sync = 0;      ///< BSP synchronisations
    double overhead = 0;  ///< rearranging its activations between layouts, and device_spec::pass_overhead_cycles
    double tiles = 0;     ///< tiles the pass uses
    /// Temporary bytes on the busiest tile while the pass runs: the inputs it receives and the partial
    /// sums it holds before they are added or cast (a contraction's plan keeps them within the
    /// available memory proportion of the tile where it can).
    double tile_bytes = 0;
    /// Messages the busiest tile receives over the exchange (each a region of one source tile): what
    /// its exchange code is compiled for (emulator/code_memory.hpp).
    double messages = 0;
    /// Compute sets the pass runs (each a superstep: compute, sync, exchange).
    double supersteps = 0;
    [[nodiscard]] double total() const noexcept { return compute + exchange + sync + overhead; }
};

namespace detail {

[[nodiscard]] inline double ceil_div(double a, double b) noexcept { return std::ceil(a / b); }

// The ways to split `n` groups over tiles: 1, 2, 4, ... below n, and n.
template <class F>
void for_each_split(double n, F&& f) {
    for (double t = 1; t < n; t *= 2) f(t);
    f(std::max(n, 1.0));
}

// The plan a poplibs planner keeps among those offered: the fastest whose temporaries on the busiest
// tile fit `bound`, or, where none fits, the one with the least temporaries (the fastest of those).
// Plan: what is kept of each (its cycles and what else the caller needs).
template <class Plan>
class plan_choice {
public:
    explicit plan_choice(double bound) noexcept : m_bound(bound) {}
    void offer(const Plan& p, const pass_cycles& c) {
        if (c.tile_bytes <= m_bound && c.total() < m_best_total) m_best_total = c.total(), m_best = p;
        if (c.tile_bytes < m_least_bytes || (c.tile_bytes == m_least_bytes && c.total() < m_least_total))
            m_least_bytes = c.tile_bytes, m_least_total = c.total(), m_least = p;
    }
    [[nodiscard]] const Plan& chosen() const noexcept {
        return m_best_total < std::numeric_limits<double>::infinity() ? m_best : m_least;
    }

private:
    double m_bound;
    double m_best_total = std::numeric_limits<double>::infinity();
    double m_least_bytes = std::numeric_limits<double>::infinity(), m_least_total = 0;
    Plan m_best{}, m_least{};
};

// One tile's vector loop over `values` values of `operands` tensors: popops' 1-D vertex estimate
// (supervisor start, then per worker its set-up and one 64-bit load or store per operand and
// vector), bounded below by the tile's share of the memory bandwidth.
[[nodiscard]] inline double vector_loop_cycles(double values, double operands, const device_spec& spec, double bytes) {
    const double per_vector = spec.vector_bytes / bytes, workers = double(spec.worker_contexts);
    const double loop = spec.supervisor_overhead_cycles +
                        workers * (spec.elementwise_worker_overhead_cycles + operands * ceil_div(ceil_div(values, workers), per_vector));
    return std::max(loop, values * operands * bytes / spec.memory_bytes_per_tile_cycle());
}

// Messages each tile receives to reduce partials `depth` deep: poplibs splits a deep reduction into
// stages (2 from depth 16, 3 from depth 125), each reducing depth^(1/stages) messages, to keep the
// exchange code small (lib/poplin/ConvReducePlan.cpp, getNumReduceStages and the cost of
// getMultiStageReducePlanAndCost: "an estimate of the average number of messages required per tile").
[[nodiscard]] inline double reduction_messages(double depth) noexcept {
    if (depth <= 1) return 0;
    if (depth >= 125) return 3 * std::ceil(std::cbrt(depth));
    if (depth >= 16) return 2 * std::ceil(std::sqrt(depth));
    return std::ceil(depth);
}

// Contractions on the AMP. The planner splits result rows, output-channel groups and input-channel
// groups over the tiles and keeps the split with the fewest cycles: each tile loops over its rows
// for each (output group, input group, kernel position), reloading the conv units' weights each
// time; split input groups leave partial sums (of `partials`) that a second superstep exchanges and
// adds. An output group is as many channels as conv units work: all 16 with half partials of 16-bit
// data, or 8 — poplibs' planner tries both (ConvVertexType.cpp: "On IPU2 with half inputs we need
// to enable 8 engines config as well"); float partials of 16-bit data store on 8 only
// (amp_output_channels). Each row takes the same cycles per group pair either way, so 8 units run
// at half the rate with half the weights to load. The weights stay on the tiles the plan gave them
// (laid out once, when the graph is compiled): only activations move. A plan's temporaries on its
// busiest tile — the inputs it receives, and its partial sums where they are wider than the data or
// split over tiles — must fit `available` of the tile's memory, as poplibs' planner bounds them
// (ConvPlan.cpp: bytes per tile × availableMemoryProportion); where no plan fits, the one with the
// least temporaries (poplibs then plans for memory instead of cycles). A product of two activations
// (nn::pass::groups > 0: attention's) is poplin::matMulGrouped, a 1×1 convolution of that many
// groups (lib/poplin/MatMul.cpp, getConvParams): the plan splits the groups over tiles too, each
// tile loops over its groups, and its second operand is an activation like the first, so the tile
// receives its share of both.
[[nodiscard]] inline pass_cycles contraction_cycles(const nn::pass& p, const device_spec& spec, int bits,
                                                    partials_type partials, double available) {
    const double bytes = bits / 8.0, pbytes = partial_bytes(bits, partials);
    const double gi = double(spec.amp_input_channels(bits));
    const double units = double(spec.amp_output_channels(bits, partials));
    const double in_groups = ceil_div(std::max(p.inputs, 1.0), gi);
    const double rows = std::max(p.rows, 1.0), window = std::max(p.window, 1.0), tiles = double(spec.tiles);
    const bool batched = p.groups > 0;
    const double groups = std::max(p.groups, 1.0);
    const double workers = double(spec.worker_contexts);
    // tile-cycles per row and group pair: the conv units' pipeline, whatever share of them works
    const double per_position = gi * double(spec.amp_output_channels(bits)) / spec.macs_per_tile_cycle(bits);
    const double xbpc = spec.exchange_bytes_per_tile_cycle();
    const double bound = available * double(spec.memory_per_tile);
    // A plan: its cycles, the input bytes its busiest tile receives and the ways its sums are split.
    struct plan {
        pass_cycles c;
        double received = 0, input_splits = 1;
    };
    plan_choice<plan> choice(bound);
    const double choices[] = {units, 8.0};  // all the units it may use, or 8 of them (poplibs: "8 engines")
    for_each_split(groups, [&](double t_g) {
        const double g = ceil_div(groups, t_g);  // the groups each tile loops over
        for (std::size_t k = 0; k < (units > 8.0 ? 2u : 1u); ++k) {
            const double go = choices[k];
            const double out_groups = ceil_div(std::max(p.outputs, 1.0), go);
            const double weight_load = gi * go * bytes / spec.amp_weight_load_bytes_per_cycle;
            for_each_split(out_groups, [&](double t_o) {
                for_each_split(in_groups, [&](double t_i) {
                    if (t_g * t_o * t_i > tiles) return;
                    const double t_r = std::min(rows, std::floor(tiles / (t_g * t_o * t_i)));
                    const double r = ceil_div(rows, t_r), og = ceil_div(out_groups, t_o), ig = ceil_div(in_groups, t_i);
                    pass_cycles c;
                    c.tiles = t_g * t_r * t_o * t_i;
                    c.compute = spec.conv_vertex_overhead_cycles +
                                g * og * ig * window *
                                    (weight_load + workers * (spec.amp_worker_overhead_cycles + ceil_div(r, workers) * per_position));
                    // Inputs for its rows and input groups; a second operand that is an activation
                    // for its output and input groups (weights are already on the tile).
                    const double ins = std::min(ig * gi, std::max(p.inputs, 1.0));
                    const double second = batched ? g * std::min(og * go, std::max(p.outputs, 1.0)) * ins * window * bytes : 0.0;
                    c.exchange = (g * r * ig * gi * bytes + second) / xbpc;
                    c.sync = spec.sync_cycles;
                    c.tile_bytes = g * r * ig * gi * bytes + second;
                    if (t_i > 1 || pbytes > bytes) c.tile_bytes += g * r * og * go * pbytes;  // sums kept apart
                    if (t_i > 1) {  // each tile adds the t_i partial slices of its share of the results
                        const double slices = g * r * og * go;
                        c.exchange += slices * pbytes * (t_i - 1) / t_i / xbpc;
                        c.compute += vector_loop_cycles(slices, 1, spec, pbytes);
                        c.sync += spec.sync_cycles;
                    }
                    // Its inputs, not the channels that pad a group.
                    const double received = g * r * ins * bytes + second;
                    choice.offer({c, received, t_i}, c);
                });
            });
        }
    });
    plan chosen = choice.chosen();
    // The chosen plan's compute sets and messages (counted once, not for every plan tried): its inputs
    // come from the tiles that hold them, each an equal share of the tensor; split sums add a superstep.
    const double share = std::max(groups * rows * std::max(p.inputs, 1.0) * bytes / tiles, 1.0);
    chosen.c.messages = std::ceil(chosen.received / share) + reduction_messages(chosen.input_splits);
    chosen.c.supersteps = chosen.input_splits > 1 ? 2 : 1;
    return chosen.c;
}

// A vector loop over `operands` tensors of `elements` values, spread over the tiles (at least a
// vector per worker on each).
[[nodiscard]] inline pass_cycles vector_cycles(double elements, double operands, const device_spec& spec, int bits) {
    const double bytes = bits / 8.0;
    pass_cycles c;
    if (elements <= 0) return c;
    c.tiles = std::min(double(spec.tiles), ceil_div(elements, double(spec.worker_contexts) * spec.vector_bytes / bytes));
    c.compute = vector_loop_cycles(ceil_div(elements, c.tiles), operands, spec, bytes);
    c.sync = spec.sync_cycles;
    c.supersteps = 1;
    return c;
}

// A reduction per channel: each tile reduces what it holds (a vector loop reading the operands),
// then the partial results (float) are spread over all tiles, which add them, in a second superstep.
[[nodiscard]] inline pass_cycles reduction_cycles(const nn::pass& p, const device_spec& spec, int bits) {
    pass_cycles c = vector_cycles(p.elements, p.operands, spec, bits);
    if (c.tiles == 0) return c;
    const double partials = c.tiles * std::min(ceil_div(p.elements, c.tiles), std::max(p.outputs, 1.0));
    const double per_reducer = ceil_div(partials, double(spec.tiles));
    c.tile_bytes = per_reducer * 4.0;
    c.exchange += per_reducer * 4.0 / spec.exchange_bytes_per_tile_cycle();
    c.compute += vector_loop_cycles(per_reducer, 1, spec, 4.0);
    c.sync += spec.sync_cycles;
    c.messages = reduction_messages(c.tiles), c.supersteps += 1;  // a partial from each tile, in stages
    return c;
}

// An embedding's lookups (popops::multiSlice) and, as a weight gradient, its scatter-add
// (popops::multiUpdateAdd), planned as popops::embedding::plan does in the small: the table split
// over t_d × t_e tiles by entries and by width, every tile given every index (offsets are 4-byte
// integers) and looking up those in its entries, uniform over the table (poplibs' planner assumes
// uniform indices unless told they are sorted); the fastest split whose temporaries fit `available`
// of a tile. Vertex cycles from lib/popops/PerformanceEstimation.cpp: getMultiSliceCycleEstimate
// (30 a vertex, 19 a lookup in range plus 2 cycles a 2-element vector, 8 out of range) and
// getMultiUpdateOpCycleEstimate (3 + 29 (float) or 30 (half) + 6 or 4 for the scale a vertex; 11
// (float) or 13 (half) a lookup in range plus 3 per further 4-byte atom, 5 out of range), each per
// worker and times the workers, the lookups split between the workers.
[[nodiscard]] inline pass_cycles gather_cycles(const nn::pass& p, const device_spec& spec, int bits, double available) {
    const double n = std::max(p.rows, 1.0), width = std::max(p.outputs, 1.0), entries = std::max(p.inputs, 1.0);
    const double bytes = bits / 8.0, workers = double(spec.worker_contexts), tiles = double(spec.tiles);
    const double xbpc = spec.exchange_bytes_per_tile_cycle(), bound = available * double(spec.memory_per_tile);
    const bool update = p.weight_gradient;
    constexpr double offset_bytes = 4;
    plan_choice<pass_cycles> choice(bound);
    for_each_split(entries, [&](double t_d) {
        for_each_split(ceil_div(width, 2), [&](double t_e) {
            if (t_d * t_e > tiles) return;
            const double slice = ceil_div(width, t_e), in_range = ceil_div(n, t_d);
            const double per_worker = ceil_div(n, workers), in_per_worker = ceil_div(in_range, workers);
            const double out_per_worker = std::max(per_worker - in_per_worker, 0.0);
            double worker = 0;
            if (update) {
                const double atoms = ceil_div(slice * bytes, 4);
                worker = 3 + (bits == 32 ? 29 + 6 : 30 + 4) + in_per_worker * ((bits == 32 ? 11 : 13) + (atoms - 1) * 3) +
                         out_per_worker * 5;
            } else {
                worker = 30 + in_per_worker * (19 + ceil_div(slice, 2) * 2) + out_per_worker * 8;
            }
            pass_cycles c;
            c.tiles = t_d * t_e;
            c.compute = worker * workers;
            // Every index, and the slices of its entries: what it sends (lookups) or receives (updates).
            const double moved = n * offset_bytes + in_range * slice * bytes;
            c.exchange = moved / xbpc;
            c.sync = spec.sync_cycles;
            c.tile_bytes = moved;
            c.messages = t_e + 1;  // the indices, and each width share of the slices
            c.supersteps = 1;
            choice.offer(c, c);
        });
    });
    return choice.chosen();
}

}  // namespace detail

/// The modelled cycles of pass `p` on an IPU of `spec` with `bits`-bit data (16 or 32), partial
/// sums of `partials` (poplibs' default float, or half), and contractions' temporaries within
/// `available_memory_proportion` of a tile (0 to 1; 0: the plan with the least, as in poplibs).
/// @code
///   auto c = emulator::cycles_of(nn::pass::contraction(nn::pass_phase::forward, 2048, 64, 64, 9), spec, 16,
///                                emulator::partials_type::float16);
///   double seconds = spec.seconds(c.total());
/// @endcode
[[nodiscard]] inline pass_cycles cycles_of(const nn::pass& p, const device_spec& spec, int bits,
                                           partials_type partials = partials_type::float32,
                                           double available_memory_proportion = default_available_memory_proportion) {
    if (bits != 16 && bits != 32)
        throw std::invalid_argument("tessera::emulator::cycles_of: bits must be 16 or 32, got " + std::to_string(bits));
    if (!(available_memory_proportion >= 0 && available_memory_proportion <= 1))
        throw std::invalid_argument("tessera::emulator::cycles_of: the available memory proportion must be in [0, 1], got " +
                                    std::to_string(available_memory_proportion));
    pass_cycles c;
    switch (p.kind) {
        case nn::pass_kind::contraction:
            c = detail::contraction_cycles(p, spec, bits, partials, available_memory_proportion);
            break;
        case nn::pass_kind::elementwise: c = detail::vector_cycles(p.elements, p.operands, spec, bits); break;
        case nn::pass_kind::reduction: c = detail::reduction_cycles(p, spec, bits); break;
        case nn::pass_kind::gather: c = detail::gather_cycles(p, spec, bits, available_memory_proportion); break;
    }
    // Between layers Poplar rearranges activations into the layout the next pass's plan wants: one
    // more exchange of what the pass reads and writes, spread over the tiles it uses.
    const double bytes = bits / 8.0;
    const double moved = p.in_place                               ? 0.0
                         : p.kind == nn::pass_kind::contraction
                             ? std::max(p.groups, 1.0) * std::max(p.rows, 1.0) * (p.inputs + p.outputs) * bytes
                         : p.kind == nn::pass_kind::gather ? std::max(p.rows, 1.0) * p.outputs * bytes  // the slices
                                                           : p.elements * p.operands * bytes;
    c.overhead = moved / std::max(c.tiles, 1.0) / spec.exchange_bytes_per_tile_cycle() + spec.pass_overhead_cycles;
    if (moved > 0) c.messages += 1, c.supersteps += 1;  // the rearrangement: its share, from the tile that held it
    return c;
}

/// Modelled seconds of a list of passes run one after another.
[[nodiscard]] inline double seconds_of(std::span<const nn::pass> passes, const device_spec& spec, int bits,
                                       partials_type partials = partials_type::float32,
                                       double available_memory_proportion = default_available_memory_proportion) {
    double cycles = 0;
    for (const auto& p : passes) cycles += cycles_of(p, spec, bits, partials, available_memory_proportion).total();
    return spec.seconds(cycles);
}

}  // namespace tessera::emulator
