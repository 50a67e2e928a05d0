#pragma once
// The nn layer: the Layer concept, layers, sequential composition, residual blocks and the ResNet family.
#include "tessera/nn/activation.hpp"
#include "tessera/nn/batch_norm.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/layer.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/loss.hpp"
#include "tessera/nn/pooling.hpp"
#include "tessera/nn/residual.hpp"
#include "tessera/nn/resnet.hpp"
#include "tessera/nn/sequential.hpp"
#include "tessera/nn/shortcut.hpp"
