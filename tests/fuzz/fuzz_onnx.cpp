// libFuzzer target: an ONNX model's bytes, parsed by protobuf, read into a graph (onnx::graph_of)
// and shape-inferred (onnx::shape_inference). Each input must be read or refused by
// onnx::import_error; anything else, a crash or a leak is a finding. (Pricing the graph,
// onnx::imported_network, needs the nn layer, which clang-14 cannot compile: tests/onnx checks it.)
#include <cstddef>
#include <cstdint>

#include <tessera/onnx/read.hpp>
#include <tessera/onnx/shapes.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    ::onnx::ModelProto model;
    if (size > (1u << 24) || !model.ParseFromArray(data, static_cast<int>(size))) return 0;
    try {
        const tessera::onnx::graph g = tessera::onnx::graph_of(model, "fuzz/model.onnx");
        const tessera::onnx::shape_inference shapes(g);
        for (const auto& n : g.nodes)
            for (const auto& o : n.outputs)
                if (!o.empty() && shapes.has(o)) (void)shapes.at(o).elements();
    } catch (const tessera::onnx::import_error&) {
    }
    return 0;
}
