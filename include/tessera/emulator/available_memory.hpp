#pragma once
// How much of a tile's memory a convolution or matrix product may take for its temporaries
// (PopTorch's opts.setAvailableMemoryProportion).

namespace tessera::emulator {

/// poplibs' default proportion of a tile's memory a convolution or matrix product may take for its
/// temporaries (ConvOptions.hpp, MatMul.cpp: availableMemoryProportion = .6), what PopTorch uses when
/// opts.setAvailableMemoryProportion is not called. Graphcore's ResNet-50 training configurations
/// set 0.1 to 0.16 (the examples' vision/cnns/pytorch/train/configs.yml).
inline constexpr double default_available_memory_proportion = 0.6;

}  // namespace tessera::emulator
