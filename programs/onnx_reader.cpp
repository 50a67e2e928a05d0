// tessera-train's and tessera-plan's ONNX reader: the one file that sees protobuf (tessera::onnx).
#include "train_onnx.hpp"

#include <tessera/onnx/inputs.hpp>

#if TESSERA_HAS_ONNX
#include <tessera/onnx/read.hpp>
#endif

namespace tessera::programs {

onnx::graph read_onnx_graph(const std::string& path) {
#if TESSERA_HAS_ONNX
    return onnx::read_model(path);
#else
    throw usage_error("--model " + path + ": this build has no ONNX reader (install Debian's libonnx-dev and "
                      "libprotobuf-dev, as scripts/install-deps.sh does, and configure again)");
#endif
}

bool onnx_reads_tokens(const std::string& path) { return onnx::classify_inputs(read_onnx_graph(path)).tokens; }

}  // namespace tessera::programs
