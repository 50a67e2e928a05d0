#pragma once
// The concepts of the policy layer, in one place: what a user-supplied policy must provide.
#include "tessera/config/config.hpp"
#include "tessera/config/loss_scaling.hpp"
#include "tessera/config/output_mode.hpp"
#include "tessera/config/policy.hpp"
#include "tessera/config/precision.hpp"
#include "tessera/config/strategy.hpp"
