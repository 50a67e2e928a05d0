#pragma once
// The code a tile holds for an IPU's passes: vertex code, exchange code, control code and vertex state.
#include <algorithm>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "tessera/emulator/device_spec.hpp"
#include "tessera/emulator/pass_model.hpp"
#include "tessera/nn/cost.hpp"

namespace tessera::emulator {

/// Bytes of code on a tile, by what it is for (an estimate: device_spec::code names its figures).
struct tile_code {
    double vertex = 0;    ///< the codelets of each kind of pass the IPU runs, once each
    double exchange = 0;  ///< the instructions of each message each distinct pass receives and sends
    double control = 0;   ///< control code and vertex state of each distinct pass's compute sets
    [[nodiscard]] double total() const noexcept { return vertex + exchange + control; }
};

/// The passes of `passes` that differ in shape, once each: passes of one shape share their code, as
/// Poplar outlines identical parts of a program into one copy it calls (on by default: Graphcore's
/// recomputation-checkpoint example, "code outlining then allows the code to process these smaller
/// sections to be efficiently stored"). The order is by shape.
[[nodiscard]] inline std::vector<nn::pass> distinct_passes(std::span<const nn::pass> passes) {
    std::vector<nn::pass> out(passes.begin(), passes.end());
    const auto key = [](const nn::pass& p) {
        return std::tuple{p.kind, p.rows, p.outputs, p.inputs, p.window, p.elements, p.operands, p.in_place, p.groups};
    };
    std::sort(out.begin(), out.end(), [&](const auto& a, const auto& b) { return key(a) < key(b); });
    out.erase(std::unique(out.begin(), out.end(), [&](const auto& a, const auto& b) { return key(a) == key(b); }),
              out.end());
    return out;
}

/// The code one tile holds for distinct passes `passes` (distinct_passes) with the modelled cycles
/// `cycles` of each (cycles_of, same order): the vertex code of each kind of pass among them, and
/// per pass the exchange code of the messages its busiest tile receives (pass_cycles::messages) and
/// the control code and vertex state of its compute sets (pass_cycles::supersteps). Every pass
/// spreads over the tiles, so each tile holds about what the busiest does.
[[nodiscard]] inline tile_code code_of(std::span<const nn::pass> passes, std::span<const pass_cycles> cycles,
                                       const code_spec& spec) {
    if (passes.size() != cycles.size())
        throw std::invalid_argument("tessera::emulator::code_of: " + std::to_string(passes.size()) + " passes but " +
                                    std::to_string(cycles.size()) + " cycle figures");
    tile_code code;
    bool contraction = false, elementwise = false, reduction = false, gather = false;
    for (std::size_t i = 0; i < passes.size(); ++i) {
        contraction |= passes[i].kind == nn::pass_kind::contraction;
        elementwise |= passes[i].kind == nn::pass_kind::elementwise;
        reduction |= passes[i].kind == nn::pass_kind::reduction;
        gather |= passes[i].kind == nn::pass_kind::gather;
        code.exchange += cycles[i].messages * spec.exchange_instructions_per_message * spec.instruction_bytes;
        code.control += cycles[i].supersteps * spec.control_bytes_per_superstep;
    }
    code.vertex = ((contraction ? spec.contraction_instructions : 0.0) + (elementwise ? spec.elementwise_instructions : 0.0) +
                   (reduction ? spec.reduction_instructions : 0.0) + (gather ? spec.gather_instructions : 0.0)) *
                  spec.instruction_bytes;
    return code;
}

}  // namespace tessera::emulator
