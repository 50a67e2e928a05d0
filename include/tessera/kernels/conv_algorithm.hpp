#pragma once
// Which algorithm computes a convolution (a run-time choice; conv.hpp implements both).

namespace tessera::kernels {

/// How a convolution is computed. `automatic` takes Winograd F(2×2, 3×3) where it fits and pays
/// (see uses_winograd in conv.hpp), im2col + GEMM elsewhere; the others force one (Winograd only
/// where it fits: a 3×3 window at stride 1).
enum class conv_algorithm { automatic, im2col, winograd };

}  // namespace tessera::kernels
