#pragma once
// The figures of one emulated IPU: memory, compute rates, links and host-sync latency.
#include <cstddef>
#include <stdexcept>
#include <string>

namespace tessera::emulator {

/// The link a transfer crosses; each has its own bandwidth in device_spec.
enum class link {
    ipu_link,          ///< IPU to IPU (activations forward, gradients backward, all-reduce)
    host_link,         ///< PCIe between host and IPU (infeed, outfeed)
    streaming_memory,  ///< off-chip Streaming Memory (weights or activations kept off the IPU)
};

[[nodiscard]] constexpr const char* to_string(link l) noexcept {
    switch (l) {
        case link::ipu_link: return "IPU-Link";
        case link::host_link: return "host link";
        case link::streaming_memory: return "Streaming Memory";
    }
    return "?";
}

/// An IPU's figures; the defaults are the Mk2 GC200 (POPTORCH.md), every one overridable:
/// @code
///   emulator::device_spec small{.memory_per_tile = 1024};          // a 1.5 MB IPU for a test
///   double t = small.compute_seconds(2e12, 16);                      // 2 TFLOP in fp16
/// @endcode
struct device_spec {
    std::size_t tiles = 1472;
    std::size_t memory_per_tile = 624 * 1024;           ///< bytes of In-Processor memory per tile
    double fp16_flops = 250e12;                         ///< peak FLOP/s for 16-bit arithmetic
    double fp32_flops = 62.5e12;                        ///< peak FLOP/s for 32-bit arithmetic
    double memory_bandwidth = 47.5e12;                  ///< In-Processor memory, bytes/s
    double exchange_bandwidth = 8e12;                   ///< on-chip exchange, bytes/s
    double ipu_link_bandwidth = 320e9;                  ///< all 10 IPU-Links together, bytes/s
    double host_link_bandwidth = 64e9;                  ///< PCIe Gen4 x16, bytes/s
    double host_sync_latency = 10e-6;                   ///< seconds per host/device synchronisation
    std::size_t streaming_memory_capacity = 112'000'000'000;  ///< bytes: an IPU-M2000's 448 GB over its 4 IPUs
    double streaming_memory_bandwidth = 20e9;           ///< bytes/s to Streaming Memory

    /// Total In-Processor memory: 1,472 × 624 KiB ≈ 900 MB by default.
    [[nodiscard]] constexpr std::size_t memory_bytes() const noexcept { return tiles * memory_per_tile; }

    /// FLOP/s for arithmetic of `bits` (16 or 32).
    [[nodiscard]] double flops_per_second(int bits) const {
        if (bits == 16) return fp16_flops;
        if (bits == 32) return fp32_flops;
        throw std::invalid_argument("tessera::emulator::device_spec: no compute rate for " + std::to_string(bits) +
                                    "-bit arithmetic (16 or 32)");
    }
    [[nodiscard]] double bandwidth(link l) const noexcept {
        switch (l) {
            case link::ipu_link: return ipu_link_bandwidth;
            case link::host_link: return host_link_bandwidth;
            case link::streaming_memory: return streaming_memory_bandwidth;
        }
        return 0;
    }
    /// Modelled seconds of `flops` operations at the peak rate for `bits`.
    [[nodiscard]] double compute_seconds(double flops, int bits) const { return flops / flops_per_second(bits); }
    /// Modelled seconds to move `bytes` over `l`.
    [[nodiscard]] double transfer_seconds(double bytes, link l) const noexcept { return bytes / bandwidth(l); }

    /// Throws std::invalid_argument naming the first figure that is not positive.
    void validate() const {
        auto check = [](double v, const char* name) {
            if (!(v > 0))
                throw std::invalid_argument(std::string("tessera::emulator::device_spec: ") + name +
                                            " must be positive, got " + std::to_string(v));
        };
        check(static_cast<double>(tiles), "tiles");
        check(static_cast<double>(memory_per_tile), "memory_per_tile");
        check(fp16_flops, "fp16_flops");
        check(fp32_flops, "fp32_flops");
        check(memory_bandwidth, "memory_bandwidth");
        check(exchange_bandwidth, "exchange_bandwidth");
        check(ipu_link_bandwidth, "ipu_link_bandwidth");
        check(host_link_bandwidth, "host_link_bandwidth");
        check(streaming_memory_bandwidth, "streaming_memory_bandwidth");
        if (host_sync_latency < 0)
            throw std::invalid_argument("tessera::emulator::device_spec: host_sync_latency must not be negative, got " +
                                        std::to_string(host_sync_latency));
    }
};

}  // namespace tessera::emulator
