#pragma once
// Named hosts for the modelled clock: the tutorials' Python loader, and tessera's own C++ loader.
#include "tessera/emulator/host_spec.hpp"

namespace tessera::emulator {

/// The PopTorch tutorials' host: a Python training loop over torchvision transforms, one loader
/// process per worker (host_spec's defaults, calibrated on seed 000's epoch times).
[[nodiscard]] inline host_spec tutorial_host() noexcept { return {}; }

/// A host that loads with tessera's own C++ loader from decoded images in memory (a cache), and
/// feeds and dispatches from a C++ loop. The four figures were measured by
/// benchmarks/exec/bench_host_figures (the medians of three runs' medians of 3 to 5 repetitions,
/// 2026-12-07) on a 2-vCPU Intel Xeon (family 6 model 207: AVX-512, AMX; KVM), on CIFAR-10-sized
/// images: reading, flipping and normalising a value to float 264 ps, keeping it 8-bit 223 ps,
/// feeding a byte of batches the loader has already assembled 60 ps, one host call of a one-layer
/// model 6.1 µs. The cores and the network are an IPU-POD host's, as tutorial_host's. A host that
/// decodes JPEG files (ImageNet as stored) spends far more per value: measure yours and give it as JSON.
[[nodiscard]] inline host_spec native_host() noexcept {
    host_spec h;
    h.float_seconds_per_value = 2.64e-10;
    h.eight_bit_seconds_per_value = 2.23e-10;
    h.feed_seconds_per_byte = 0.60e-10;
    h.dispatch_seconds = 6.1e-6;
    return h;
}

}  // namespace tessera::emulator
