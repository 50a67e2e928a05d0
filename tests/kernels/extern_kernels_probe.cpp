// Compiled, never run, by cmake/check_extern_kernels.cmake: with TESSERA_EXTERN_KERNELS, every call
// below must leave its kernel undefined in the object (the one copy is elsewhere); without it, the
// object must define them. Three precisions, each family of tessera/kernels/instances.hpp.
#include "tessera/kernels/instances.hpp"

namespace k = tessera::kernels;
using tessera::tensor::half;

void probe(const float* xf, float* yf, const half* xh, half* yh, const double* xd, double* yd) {
    const tessera::tensor::shape in{1, 4, 4, 8};
    const k::window g(3, 3, 1, 1);
    k::workspace<float> wf;
    k::workspace<double> wd;
    k::conv2d_forward(xf, in, xf, 8, g, yf, wf);                           // 32.32
    k::conv2d_backward(xh, in, xh, xh, 8, g, yf, yh, wf);                  // 16.16
    k::batch_norm_forward_eval(xh, 16, 8, xf, xf, 1e-5f, xf, xf, yh, wf);  // 16.32
    k::linear_forward(xd, 1, 8, xd, xd, 8, yd, wd);                        // double
}
