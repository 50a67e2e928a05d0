// libFuzzer target: an ONNX model's bytes, parsed by protobuf, read into a graph (onnx::graph_of),
// shape-inferred and priced (onnx::imported_network). Each input must be priced or refused by a
// typed error (onnx::import_error, or tessera's std::invalid_argument errors: config_error,
// shape_error); anything else, a crash or a leak is a finding.
#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include <tessera/onnx/read.hpp>
#include <tessera/tessera.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    ::onnx::ModelProto model;
    if (size > (1u << 24) || !model.ParseFromArray(data, static_cast<int>(size))) return 0;
    try {
        const tessera::onnx::imported_network<tessera::config::fp32> net(tessera::onnx::graph_of(model, "fuzz/model.onnx"));
        tessera::tensor::shape s = net.sample();
        s.n = 2;
        (void)net.output_shape(s);
        for (std::size_t u = 0; u < net.units(); ++u) (void)net.unit_cost(u, net.unit_input_shape(u, s));
    } catch (const tessera::onnx::import_error&) {
    } catch (const std::invalid_argument&) {
    }
    return 0;
}
