#pragma once
// The tensor layer: 16-bit storage types and their conversions.
#include "tessera/tensor/bfloat16.hpp"
#include "tessera/tensor/convert.hpp"
#include "tessera/tensor/half.hpp"
#include "tessera/tensor/stochastic_rounding.hpp"
