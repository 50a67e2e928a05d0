// Rule: a batch norm fuses the residual add and ReLU that follow it only when it has no ReLU of its
// own (that ReLU would come before the add).
// expect: the layer's own ReLU would come before the add
#include <tessera/nn.hpp>

namespace nn = tessera::nn;
using P = tessera::config::fp32;
#if TESSERA_FAIL
using layer = nn::batch_norm_relu<P>;
#else
using layer = nn::batch_norm<P>;
#endif

void fuse(layer& bn, const nn::activation<P>& x, nn::activation<P>& out, layer::state& st) {
    (void)bn.forward_add_relu(x, x, out, st, nn::context{}, {});
}
