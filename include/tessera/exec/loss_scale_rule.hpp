#pragma once
// How a staged network scales its loss: config::loss_scale_rule, the value form of a loss scaling policy.
#include "tessera/config/loss_scaling.hpp"

namespace tessera::exec {

/// A fixed factor or PopTorch's automatic loss scaling (see config::loss_scale_rule).
using loss_scale_rule = config::loss_scale_rule;

}  // namespace tessera::exec
