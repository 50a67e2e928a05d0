#pragma once
// The figures of one emulated IPU: memory, compute structure, exchange, links and host-sync latency.
#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>

#include "tessera/emulator/code_spec.hpp"
#include "tessera/emulator/partials.hpp"

namespace tessera::emulator {

/// The link a transfer crosses; each has its own bandwidth in device_spec.
enum class link {
    ipu_link,          ///< IPU to IPU (activations forward, gradients backward, all-reduce)
    host_link,         ///< between host and IPU (infeed, outfeed)
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

/// An IPU's figures; the defaults are the Mk2 GC200 in an IPU-M2000, every one overridable.
/// Each names its public source; none is fitted to a measurement.
/// Sources: [datasheet] Graphcore IPU-POD128 datasheet (31.955 PFLOP/s FP16.16 and 7.989 PFLOP/s FP32
/// for 128 GC200); [glossary] Graphcore glossary (1,472 tiles, 624 KB each); [poplibs]
/// github.com/graphcore/poplibs, the cycle estimates its planners use (lib/poplin/PerformanceEstimation.hpp,
/// ConvVertexType.cpp, lib/popops/popopsCycleEstimators.cpp, lib/popnn/CTCLossPlan.cpp);
/// [tools] Graphcore command-line tools' documented example outputs (gc-iputraffictest,
/// gc-hosttraffictest, gc-hostsynclatencytest); [product] Graphcore's Colossus Mk2 GC200 product page
/// (47.5 TB/s memory bandwidth, 8 TB/s all-to-all exchange); [seed 004] gc-monitor in the tutorials' output.
/// @code
///   emulator::device_spec small{.memory_per_tile = 1024};          // a 1.5 MB IPU for a test
///   double t = small.compute_seconds(2e12, 16);                      // 2 TFLOP at the fp16 peak
/// @endcode
struct device_spec {
    std::size_t tiles = 1472;                  ///< [glossary]
    std::size_t memory_per_tile = 624 * 1024;  ///< bytes of In-Processor memory per tile [glossary]
    double clock_hz = 1.33e9;                  ///< tile clock: 1330 MHz [seed 004]; 250 TFLOP/s = 1,472 × 128 × 1.33 GHz
    double fp16_flops = 250e12;                ///< peak FLOP/s, 16-bit AMP arithmetic: 64 MACs per tile-cycle [datasheet]
    double fp32_flops = 62.5e12;               ///< peak FLOP/s, 32-bit: 16 MACs per tile-cycle [datasheet]
    /// Channels the AMP (matrix unit) takes at once: a convolution's input channels come in groups
    /// of 16 halves (8 floats) — 4 conv-unit pipeline stages × a 64-bit load — and its output
    /// channels in groups of the 16 conv units [poplibs ConvVertexType.cpp]. A layer with 3 or 24
    /// channels pads them to 16 or 32. The 32-bit output group of 8 is inferred: 8 × 8 per 4 cycles
    /// is the 16 MACs per cycle of the fp32 peak.
    std::size_t amp_input_channels_fp16 = 16, amp_output_channels_fp16 = 16;
    std::size_t amp_input_channels_fp32 = 8, amp_output_channels_fp32 = 8;
    /// The conv units' pipeline depth: a unit sums this many 64-bit loads of inputs before it stores
    /// a partial sum [poplibs ConvVertexType.cpp: weightsPerConvUnit = chain length × load elements].
    /// With float partials of 16-bit data the units store floats, 2 per 64-bit cycle, so only
    /// depth × 2 = 8 of the 16 units keep up: half the AMP rate [poplibs tools/single_conv_layer.cpp:
    /// fp16InFp32OutConvUnitsPerTile = min(fp16InFp16Out units, depth × floats stored per cycle);
    /// codelets/ConvPartialnx1.cpp: half inputs with float accumulators run on 8 units].
    std::size_t conv_unit_pipeline_depth = 4;
    double amp_weight_load_bytes_per_cycle = 16;  ///< weights into the conv units, 128-bit loads [poplibs ConvModel.cpp]
    double conv_vertex_overhead_cycles = 109;     ///< a convolution vertex's supervisor overhead [poplibs convNx1Overhead]
    double amp_worker_overhead_cycles = 20;       ///< per worker and work-list entry: 17 + 3 [poplibs nx1 estimate]
    std::size_t worker_contexts = 6;              ///< threads per tile, one instruction each per 6 cycles (8,832 / 1,472)
    double vector_bytes = 8;                      ///< the 64-bit data path: 4 halves or 2 floats per vector [poplibs popops]
    double elementwise_worker_overhead_cycles = 26;  ///< a 1-D element-wise vertex's worker set-up [poplibs BinaryOp1D]
    double supervisor_overhead_cycles = 11;       ///< starting a vertex on a tile's workers [poplibs basicOpSupervisorOverhead]
    double sync_cycles = 90;                      ///< one BSP synchronisation inside an IPU [poplibs CTCLossPlan.cpp]
    /// Seconds per hop of a synchronisation across IPUs, each way: 15 ns; one hop within a card and
    /// one per pair of cards [poplibs lib/poplibs_test/Util.cpp, setGlobalSyncLatency].
    double global_sync_latency_per_hop = 15e-9;
    double memory_bandwidth = 47.5e12;            ///< In-Processor memory, bytes/s (a ceiling for memory-bound passes) [product]
    double exchange_bandwidth = 8e12;             ///< on-chip exchange, bytes/s: 8 TB/s all-to-all [product] (≈ 4 bytes per tile-cycle)
    /// Cycles each layer pass costs beyond the pass model (which charges compute, the exchange of
    /// its inputs, syncs and the rearrangement of its activations between layouts): a fixed cost per
    /// pass for what the model leaves out. 0: nothing is fitted; docs/validation.md compares the
    /// model with published results as it stands.
    double pass_overhead_cycles = 0;
    double ipu_link_bandwidth = 26.5e9;    ///< one direction between two IPUs, bytes/s (gc-iputraffictest: 423 Gb/s both ways) [tools]
    double host_link_bandwidth = 3.3e9;    ///< one direction, host to one IPU of an IPU-M2000 over RoCE, bytes/s
                                           ///< (gc-hosttraffictest: 26.4 Gb/s host → tiles) [tools]
    double host_sync_latency = 0.36e-6;    ///< seconds per host/device synchronisation (gc-hostsynclatencytest:
                                           ///< 4,095 syncs in 1,485 µs) [tools]
    std::size_t streaming_memory_capacity = 112'000'000'000;  ///< bytes: an IPU-M2000's 448 GB over its 4 IPUs
    double streaming_memory_bandwidth = 20e9;                 ///< bytes/s to Streaming Memory (a guess: no public figure)
    code_spec code{};  ///< what a tile's code takes (emulator/code_memory.hpp)

    /// Total In-Processor memory: 1,472 × 624 KiB ≈ 900 MB by default.
    [[nodiscard]] constexpr std::size_t memory_bytes() const noexcept { return tiles * memory_per_tile; }

    /// FLOP/s for arithmetic of `bits` (16 or 32).
    [[nodiscard]] double flops_per_second(int bits) const {
        if (bits == 16) return fp16_flops;
        if (bits == 32) return fp32_flops;
        throw std::invalid_argument("tessera::emulator::device_spec: no compute rate for " + std::to_string(bits) +
                                    "-bit arithmetic (16 or 32)");
    }
    /// Multiply-accumulates per tile-cycle at the peak for `bits`: 64 (fp16) and 16 (fp32) by default.
    [[nodiscard]] double macs_per_tile_cycle(int bits) const {
        return flops_per_second(bits) / (2.0 * double(tiles) * clock_hz);
    }
    [[nodiscard]] std::size_t amp_input_channels(int bits) const { return bits == 16 ? amp_input_channels_fp16 : amp_input_channels_fp32; }
    [[nodiscard]] std::size_t amp_output_channels(int bits) const { return bits == 16 ? amp_output_channels_fp16 : amp_output_channels_fp32; }
    /// Output channels the AMP computes at once with partial sums of `partials`: with float partials
    /// of 16-bit data, the conv units that can store a float each cycle (conv_unit_pipeline_depth).
    [[nodiscard]] std::size_t amp_output_channels(int bits, partials_type partials) const {
        const std::size_t all = amp_output_channels(bits);
        if (bits != 16 || partials == partials_type::float16) return all;
        const std::size_t storing = conv_unit_pipeline_depth * static_cast<std::size_t>(vector_bytes) / 4;
        return std::max<std::size_t>(1, std::min(all, storing));
    }
    /// Bytes a tile receives per cycle over the exchange.
    [[nodiscard]] double exchange_bytes_per_tile_cycle() const noexcept {
        return exchange_bandwidth / (double(tiles) * clock_hz);
    }
    /// Bytes a tile reads or writes per cycle at the memory bandwidth.
    [[nodiscard]] double memory_bytes_per_tile_cycle() const noexcept { return memory_bandwidth / (double(tiles) * clock_hz); }
    [[nodiscard]] double bandwidth(link l) const noexcept {
        switch (l) {
            case link::ipu_link: return ipu_link_bandwidth;
            case link::host_link: return host_link_bandwidth;
            case link::streaming_memory: return streaming_memory_bandwidth;
        }
        return 0;
    }
    /// Modelled seconds of `flops` operations at the peak rate for `bits` (models that describe no
    /// passes; emulator::pass_model is the prediction for those that do).
    [[nodiscard]] double compute_seconds(double flops, int bits) const { return flops / flops_per_second(bits); }
    /// Modelled seconds to move `bytes` over `l` in one direction.
    [[nodiscard]] double transfer_seconds(double bytes, link l) const noexcept { return bytes / bandwidth(l); }
    /// Seconds of one synchronisation of `ipus` IPUs: there and back over 1 + ipus / 4 hops.
    [[nodiscard]] double global_sync_seconds(std::size_t ipus) const noexcept {
        return 2.0 * global_sync_latency_per_hop * double(1 + ipus / 2 / 2);
    }
    /// Seconds of `cycles` tile-cycles.
    [[nodiscard]] double seconds(double cycles) const noexcept { return cycles / clock_hz; }

    /// The IPU less `io_tiles` tiles set aside for host I/O (PopTorch's numIOTiles): what computes.
    /// The chip-wide rates (FLOP/s, memory and exchange bandwidth) shrink with the tiles; per-tile
    /// figures stay. std::invalid_argument unless some tiles are left.
    [[nodiscard]] device_spec compute_tiles(std::size_t io_tiles) const {
        if (io_tiles == 0) return *this;
        if (io_tiles >= tiles)
            throw std::invalid_argument("tessera::emulator::device_spec: " + std::to_string(io_tiles) +
                                        " I/O tiles leave none of the " + std::to_string(tiles) + " to compute");
        device_spec d = *this;
        const double share = double(tiles - io_tiles) / double(tiles);
        d.tiles = tiles - io_tiles;
        d.fp16_flops *= share, d.fp32_flops *= share;
        d.memory_bandwidth *= share, d.exchange_bandwidth *= share;
        return d;
    }

    /// Throws std::invalid_argument naming the first figure that is not positive.
    void validate() const {
        auto check = [](double v, const char* name) {
            if (!(v > 0))
                throw std::invalid_argument(std::string("tessera::emulator::device_spec: ") + name +
                                            " must be positive, got " + std::to_string(v));
        };
        auto not_negative = [](double v, const char* name) {
            if (!(v >= 0))
                throw std::invalid_argument(std::string("tessera::emulator::device_spec: ") + name +
                                            " must not be negative, got " + std::to_string(v));
        };
        check(static_cast<double>(tiles), "tiles");
        check(static_cast<double>(memory_per_tile), "memory_per_tile");
        check(clock_hz, "clock_hz");
        check(fp16_flops, "fp16_flops");
        check(fp32_flops, "fp32_flops");
        check(static_cast<double>(amp_input_channels_fp16), "amp_input_channels_fp16");
        check(static_cast<double>(amp_output_channels_fp16), "amp_output_channels_fp16");
        check(static_cast<double>(amp_input_channels_fp32), "amp_input_channels_fp32");
        check(static_cast<double>(amp_output_channels_fp32), "amp_output_channels_fp32");
        check(static_cast<double>(conv_unit_pipeline_depth), "conv_unit_pipeline_depth");
        check(amp_weight_load_bytes_per_cycle, "amp_weight_load_bytes_per_cycle");
        check(static_cast<double>(worker_contexts), "worker_contexts");
        check(vector_bytes, "vector_bytes");
        check(memory_bandwidth, "memory_bandwidth");
        check(exchange_bandwidth, "exchange_bandwidth");
        check(ipu_link_bandwidth, "ipu_link_bandwidth");
        check(host_link_bandwidth, "host_link_bandwidth");
        check(streaming_memory_bandwidth, "streaming_memory_bandwidth");
        not_negative(conv_vertex_overhead_cycles, "conv_vertex_overhead_cycles");
        not_negative(amp_worker_overhead_cycles, "amp_worker_overhead_cycles");
        not_negative(elementwise_worker_overhead_cycles, "elementwise_worker_overhead_cycles");
        not_negative(supervisor_overhead_cycles, "supervisor_overhead_cycles");
        not_negative(sync_cycles, "sync_cycles");
        not_negative(global_sync_latency_per_hop, "global_sync_latency_per_hop");
        not_negative(pass_overhead_cycles, "pass_overhead_cycles");
        not_negative(host_sync_latency, "host_sync_latency");
    }
};

}  // namespace tessera::emulator
