#pragma once
// The PopTorch tutorials' experiments and the epoch times their users measured on IPU-POD systems.
#include <array>
#include <cstddef>
#include <string_view>

namespace tessera::programs {

/// One row of a tutorial's table: main.py's flags and the epoch time it printed (epochs 2 to 5 agree;
/// epoch 1 includes graph compilation). The model is torchvision's ResNet-101 on CIFAR-10 (50,000
/// images of 3 × 32 × 32, 10 classes), pipelined over 2 IPUs at layer3[8], precision 16.16.
struct seed_row {
    std::string_view seed;  ///< the tutorial: "000" (batch 32), "001" (batch 64), "003" (replicas)
    std::string_view step;  ///< "G3", "G8", "G8 D4", "+8-bit I/O", "+async", ...
    std::size_t batch_size, gradient_accumulation, device_iterations;
    bool eight_bit_io, async_loader;
    std::size_t replicas, instances;
    std::size_t iterations;  ///< per epoch, as the bar showed them
    double epoch_seconds;    ///< as the bar showed them; 0: the seeds did not measure it
};

inline constexpr std::size_t cifar10_images = 50'000;

/// In the seeds' order. 003's second row (4 replicas over 2 host processes, PopRun's
/// --num-instances 2) was not measured in the seeds: tessera predicts it.
inline constexpr std::array<seed_row, 12> seed_rows{{
    {"000", "G3", 32, 3, 1, false, false, 1, 1, 520, 53},
    {"000", "G8", 32, 8, 1, false, false, 1, 1, 195, 49},
    {"000", "G8 D4", 32, 8, 4, false, false, 1, 1, 48, 46},
    {"000", "+8-bit I/O", 32, 8, 4, true, false, 1, 1, 48, 15},
    {"000", "+async", 32, 8, 4, true, true, 1, 1, 48, 8},
    {"001", "G3", 64, 3, 1, false, false, 1, 1, 260, 52},
    {"001", "G8", 64, 8, 1, false, false, 1, 1, 97, 46},
    {"001", "G8 D4", 64, 8, 4, false, false, 1, 1, 24, 45},
    {"001", "+8-bit I/O", 64, 8, 4, true, false, 1, 1, 24, 13},
    {"001", "+async", 64, 8, 4, true, true, 1, 1, 24, 8},
    {"003", "R4, 1 process", 32, 8, 4, true, true, 4, 1, 12, 6},
    {"003", "R4, 2 processes", 32, 8, 4, true, true, 4, 2, 12, 0},
}};

}  // namespace tessera::programs
