#pragma once
// The onnx layer: ONNX graphs priced as unit networks, for dry runs and plans of a user's own model.
//
// What is where:
//   graph.hpp     an ONNX graph as tessera reads it (nodes, declared shapes, small integer constants)
//   inputs.hpp    which inputs carry samples (images, token ids) and which are weights
//   shapes.hpp    shape inference, the export's shape arithmetic folded to constants
//   network.hpp   imported_network<P>: nodes priced as tessera's layers, cut into units
//   read.hpp      read_model(path): the file, through Debian's libonnx-dev and libprotobuf-dev
//                 (CMake target tessera::onnx; not included here, the rest needs neither)
#include "tessera/onnx/graph.hpp"
#include "tessera/onnx/inputs.hpp"
#include "tessera/onnx/network.hpp"
#include "tessera/onnx/shapes.hpp"
