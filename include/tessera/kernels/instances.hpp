#pragma once
// The heavy kernels compiled once: explicit instantiations of the convolutions, batch norm and the
// fully connected layer for every storage tessera's precisions use (float data and weights, half data
// with float or half weights, computed in float, and double), and of the initial weights' draws for
// each weight type.
//
// A header-only library compiles its kernels in every translation unit that trains a network: at
// -O2 that is most of such a unit's time. A project of several translation units can compile them
// once instead: define TESSERA_EXTERN_KERNELS in every unit (each then declares these instantiations
// extern and calls the one copy), and add one unit, built with the same flags, that defines
// TESSERA_INSTANTIATE_KERNELS before including this header:
// @code
//   // kernels.cpp
//   #define TESSERA_INSTANTIATE_KERNELS
//   #include <tessera/kernels/instances.hpp>
// @endcode
// Without either macro this header declares nothing, and every unit instantiates what it uses. Any
// other combination of types is instantiated where it is used, as always.
#include "tessera/kernels/batch_norm.hpp"
#include "tessera/kernels/conv.hpp"
#include "tessera/kernels/initial_values.hpp"
#include "tessera/kernels/linear.hpp"
#include "tessera/tensor/half.hpp"

// One explicit instantiation declaration (`extern template`) or definition (`template`). decltype
// names the specialisation's function type without writing its parameters out (they stay in one
// place: the kernel's own header).
#define TESSERA_KERNEL_INSTANCE(prefix, ...) prefix template decltype(__VA_ARGS__) __VA_ARGS__;
// The kernels of data D and weights W, computed in C.
#define TESSERA_KERNEL_INSTANCES(prefix, C, D, W)                            \
    TESSERA_KERNEL_INSTANCE(prefix, conv2d_forward<C, D, W, D>)              \
    TESSERA_KERNEL_INSTANCE(prefix, conv2d_backward_data<C, D, W, D>)        \
    TESSERA_KERNEL_INSTANCE(prefix, conv2d_backward<C, D, D, W, D>)          \
    TESSERA_KERNEL_INSTANCE(prefix, batch_norm_forward_train<C, D, W, D>)    \
    TESSERA_KERNEL_INSTANCE(prefix, batch_norm_forward_eval<C, D, W, D>)     \
    TESSERA_KERNEL_INSTANCE(prefix, batch_norm_backward<C, D, D, W, D, D>)   \
    TESSERA_KERNEL_INSTANCE(prefix, linear_forward<C, D, W, D>)              \
    TESSERA_KERNEL_INSTANCE(prefix, linear_backward_data<C, D, W, D>)        \
    TESSERA_KERNEL_INSTANCE(prefix, linear_backward<C, D, D, W, D>)
// The weight gradients, which read no weights: once per data type.
#define TESSERA_KERNEL_DATA_INSTANCES(prefix, C, D)                          \
    TESSERA_KERNEL_INSTANCE(prefix, conv2d_backward_weight<C, D, D>)         \
    TESSERA_KERNEL_INSTANCE(prefix, linear_backward_weights<C, D, D>)
// The initial weights' draws, once per weight type.
#define TESSERA_KERNEL_WEIGHT_INSTANCES(prefix, W)                           \
    TESSERA_KERNEL_INSTANCE(prefix, fill_normal<W>)                          \
    TESSERA_KERNEL_INSTANCE(prefix, fill_uniform<W>)
#define TESSERA_KERNEL_ALL_INSTANCES(prefix)                                 \
    TESSERA_KERNEL_WEIGHT_INSTANCES(prefix, float)                           \
    TESSERA_KERNEL_WEIGHT_INSTANCES(prefix, tensor::half)                    \
    TESSERA_KERNEL_WEIGHT_INSTANCES(prefix, double)                          \
    TESSERA_KERNEL_DATA_INSTANCES(prefix, float, float)                      \
    TESSERA_KERNEL_DATA_INSTANCES(prefix, float, tensor::half)               \
    TESSERA_KERNEL_DATA_INSTANCES(prefix, double, double)                    \
    TESSERA_KERNEL_INSTANCES(prefix, float, float, float)                    \
    TESSERA_KERNEL_INSTANCES(prefix, float, tensor::half, float)             \
    TESSERA_KERNEL_INSTANCES(prefix, float, tensor::half, tensor::half)      \
    TESSERA_KERNEL_INSTANCES(prefix, double, double, double)

namespace tessera::kernels {
#if defined(TESSERA_INSTANTIATE_KERNELS)
TESSERA_KERNEL_ALL_INSTANCES()
#elif defined(TESSERA_EXTERN_KERNELS)
TESSERA_KERNEL_ALL_INSTANCES(extern)
#endif
}  // namespace tessera::kernels

#undef TESSERA_KERNEL_ALL_INSTANCES
#undef TESSERA_KERNEL_WEIGHT_INSTANCES
#undef TESSERA_KERNEL_DATA_INSTANCES
#undef TESSERA_KERNEL_INSTANCES
#undef TESSERA_KERNEL_INSTANCE
