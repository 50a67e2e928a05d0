#pragma once
// The policy layer: precision, strategy, output mode, counts and I/O as types, composed by config<...>.
#include "tessera/config/batching.hpp"
#include "tessera/config/concepts.hpp"
#include "tessera/config/config.hpp"
#include "tessera/config/counts.hpp"
#include "tessera/config/description.hpp"
#include "tessera/config/dispatch.hpp"
#include "tessera/config/error.hpp"
#include "tessera/config/io.hpp"
#include "tessera/config/loss_scaling.hpp"
#include "tessera/config/output_mode.hpp"
#include "tessera/config/precision.hpp"
#include "tessera/config/strategy.hpp"
