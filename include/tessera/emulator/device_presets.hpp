#pragma once
// Named IPUs for the modelled clock: the GC200 (device_spec's defaults), the Bow IPU and the C600's.
#include <stdexcept>
#include <string>
#include <string_view>

#include "tessera/emulator/device_spec.hpp"

namespace tessera::emulator {

/// `d` at a tile clock of `clock_hz`: the AMP peaks follow the clock (a tile's MACs per cycle are
/// the chip's), and so do the In-Processor memory and exchange bandwidths (an assumption: both run
/// on the tile clock). IPU-Links, the host link and Streaming Memory keep `d`'s figures.
[[nodiscard]] inline device_spec at_clock(device_spec d, double clock_hz) {
    const double ratio = clock_hz / d.clock_hz;
    d.clock_hz = clock_hz;
    d.fp16_flops *= ratio, d.fp32_flops *= ratio;
    d.memory_bandwidth *= ratio, d.exchange_bandwidth *= ratio;
    return d;
}

/// The Mk2 GC200 of an IPU-M2000 at 1.33 GHz: device_spec's defaults.
[[nodiscard]] inline device_spec gc200_ipu() { return {}; }

/// The Bow IPU of a Bow-2000: a GC200 at 1.85 GHz (MLPerf Training v2.0's system descriptions,
/// "accelerator_frequency": "1.85 GHz"); 1,472 × 128 × 1.85 GHz = 349 TFLOP/s, the datasheet's 350.
/// `gc200`: the GC200 figures it is derived from.
[[nodiscard]] inline device_spec bow_ipu(const device_spec& gc200 = gc200_ipu()) { return at_clock(gc200, 1.85e9); }

/// The IPU of a C600 PCIe card (ipu21, the IPU PopRT's published tables ran on): 1,472 tiles of
/// 624 KiB at 1.5 GHz (PopRT's tools/calc_ipu_utilization.py: 'C600': 1.5e9); 1,472 × 128 × 1.5 GHz
/// = 283 TFLOP/s, the card's datasheet's 280. Its host link is a PCIe Gen4 ×16 one, not the
/// IPU-M2000's RoCE: the GC200's host_link_bandwidth is kept, a guess.
[[nodiscard]] inline device_spec c600_ipu(const device_spec& gc200 = gc200_ipu()) { return at_clock(gc200, 1.5e9); }

/// The IPU called `name`: gc200, bow or c600; std::invalid_argument naming the choices otherwise.
[[nodiscard]] inline device_spec ipu_named(std::string_view name) {
    if (name == "gc200") return gc200_ipu();
    if (name == "bow") return bow_ipu();
    if (name == "c600") return c600_ipu();
    throw std::invalid_argument("tessera::emulator::ipu_named: no IPU called '" + std::string(name) +
                                "' (gc200, bow or c600)");
}

}  // namespace tessera::emulator
