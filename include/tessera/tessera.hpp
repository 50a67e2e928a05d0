#pragma once
// Everything in tessera: the umbrella of the layer umbrellas, in the order of DESIGN.md.
#include "tessera/tensor.hpp"
#include "tessera/config.hpp"
