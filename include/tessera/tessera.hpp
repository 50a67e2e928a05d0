#pragma once
// Everything in tessera: the umbrella of the layer umbrellas, in the order of DESIGN.md.
#include "tessera/report.hpp"
#include "tessera/tensor.hpp"
#include "tessera/config.hpp"
#include "tessera/kernels.hpp"
#include "tessera/nn.hpp"
#include "tessera/optim.hpp"
#include "tessera/data.hpp"
#include "tessera/emulator.hpp"
#include "tessera/exec.hpp"
#include "tessera/onnx.hpp"
