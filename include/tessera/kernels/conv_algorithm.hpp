#pragma once
// Which algorithm computes a convolution (a run-time choice; conv.hpp implements both).

namespace tessera::kernels {

/// How a convolution is computed. `automatic` takes Winograd F(2×2, 3×3) or F(4×4, 3×3) where it fits
/// and pays (see winograd_tile in conv.hpp), the direct kernels for inputs of a few channels
/// (uses_direct), im2col + GEMM elsewhere; the others force one: im2col,
/// F(2×2, 3×3) (`winograd`) or F(4×4, 3×3) (`winograd_4x4`), Winograd only where it fits (a 3×3 window
/// at stride 1).
enum class conv_algorithm { automatic, im2col, winograd, winograd_4x4 };

}  // namespace tessera::kernels
