#pragma once
// The kernels layer: GEMM, convolution, batch norm, activations, pooling, fully connected, loss,
// initial weights.
#include "tessera/kernels/activation.hpp"
#include "tessera/kernels/affine_map.hpp"
#include "tessera/kernels/batch_norm.hpp"
#include "tessera/kernels/batch_norm_rows.hpp"
#include "tessera/kernels/conv.hpp"
#include "tessera/kernels/gemm.hpp"
#include "tessera/kernels/initial_values.hpp"
#include "tessera/kernels/instances.hpp"
#include "tessera/kernels/linear.hpp"
#include "tessera/kernels/loss.hpp"
#include "tessera/kernels/pooling.hpp"
#include "tessera/kernels/simd.hpp"
#include "tessera/kernels/storage.hpp"
#include "tessera/kernels/thread_pool.hpp"
