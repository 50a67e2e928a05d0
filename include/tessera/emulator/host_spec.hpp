#pragma once
// The figures of the host that feeds the emulated IPUs: its cores, what preparing data costs, dispatch.
#include <cmath>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace tessera::emulator {

/// A host machine running the training loop. Its time is on the modelled clock's critical path:
/// a synchronous loader prepares each combined batch while the IPUs wait, an asynchronous one
/// prepares ahead (host_clock). The defaults describe the host of the PopTorch tutorials (a Python
/// training loop over torchvision transforms, one loader process): the per-value and per-call
/// costs are calibrated on seed 000's epoch times (ResNet-101 on CIFAR-10, G = 3 / 8, D = 4,
/// float and 8-bit I/O, sync and async loading) with `tessera-sweep --calibrate`; the cores and the
/// network are an IPU-POD host's (Graphcore's performance pages: a dual-socket AMD EPYC 7742).
/// @code
///   emulator::host_spec fast{.float_seconds_per_value = 1e-9};   // a C++ loader, say
///   double t = fast.prepare_seconds(1024, 3 * 32 * 32, 4);       // a combined batch of floats
/// @endcode
struct host_spec {
    std::size_t cores = 128;                    ///< dual-socket AMD EPYC 7742 (64 cores each)
    double float_seconds_per_value = 1.327e-7;    ///< load, transform, normalise one value into float (calibrated)
    double eight_bit_seconds_per_value = 4.636e-8;  ///< load and transform one value, kept 8-bit (calibrated)
    double feed_seconds_per_byte = 3.993e-8;      ///< the training loop hands a byte of a batch to the device (calibrated)
    double dispatch_seconds = 12.67e-3;           ///< the training loop's fixed cost per host call (calibrated)
    double network_bandwidth = 12.5e9;          ///< host to host, bytes/s: 100 Gb/s Ethernet (RoCE), one direction
    /// Several processes (instances): whether their replicas' gradients meet through the hosts'
    /// network (separate IPU systems, as tessera::dist runs emulators in separate processes) or over
    /// IPU-Links (one IPU-POD, as PopRun's instances share its IPU-Fabric: the default).
    bool reduce_through_hosts = false;

    /// Seconds to prepare `samples` samples of `values` values each, sent at `bytes_per_value`
    /// (1: 8-bit I/O; the device normalises), on one worker.
    [[nodiscard]] double prepare_seconds(double samples, double values, std::size_t bytes_per_value) const noexcept {
        return samples * values * (bytes_per_value == 1 ? eight_bit_seconds_per_value : float_seconds_per_value);
    }
    /// Seconds the training loop spends handing `bytes` of input to the device.
    [[nodiscard]] double feed_seconds(double bytes) const noexcept { return bytes * feed_seconds_per_byte; }

    /// Throws std::invalid_argument naming the first figure that is negative or not finite (or
    /// cores = 0).
    void validate() const {
        const auto check = [](double v, const char* name) {
            if (!(v >= 0) || !std::isfinite(v))
                throw std::invalid_argument(std::string("tessera::emulator::host_spec: ") + name +
                                            " must be a finite number, not negative, got " + std::to_string(v));
        };
        if (cores == 0) throw std::invalid_argument("tessera::emulator::host_spec: cores must be at least 1, got 0");
        check(float_seconds_per_value, "float_seconds_per_value");
        check(eight_bit_seconds_per_value, "eight_bit_seconds_per_value");
        check(feed_seconds_per_byte, "feed_seconds_per_byte");
        check(dispatch_seconds, "dispatch_seconds");
        if (!(network_bandwidth > 0) || !std::isfinite(network_bandwidth))
            throw std::invalid_argument("tessera::emulator::host_spec: network_bandwidth must be positive and finite, got " +
                                        std::to_string(network_bandwidth));
    }
};

}  // namespace tessera::emulator
