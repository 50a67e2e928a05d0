#pragma once
// --model FILE.onnx: an ONNX graph that tessera-train's dry run and tessera-plan price
// (tessera::onnx::imported_network). onnx_reader.cpp reads it where the ONNX reader was built.
#include <tessera/onnx/graph.hpp>

#include <CLI/CLI.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "train_request.hpp"

namespace tessera::programs {

/// Whether --model names an ONNX file (it ends in .onnx).
[[nodiscard]] inline bool onnx_model(std::string_view model) noexcept {
    return model.size() > 5 && model.substr(model.size() - 5) == ".onnx";
}
[[nodiscard]] inline bool onnx_model(const train_request& r) noexcept { return onnx_model(r.model); }

/// --model's check: one of `names`, or a file ending in .onnx; the refusal names them all.
[[nodiscard]] inline CLI::Validator model_names(std::vector<std::string> names) {
    std::string listed;
    for (const auto& n : names) listed += (listed.empty() ? "" : ", ") + n;
    return CLI::Validator(
        [names, listed](std::string& m) -> std::string {
            for (const auto& n : names)
                if (m == n) return {};
            if (onnx_model(m)) return {};
            return "'" + m + "' is not one of " + listed + ", nor an ONNX file (FILE.onnx)";
        },
        "MODEL");
}

/// The graph of the ONNX file at `path` (onnx::import_error for a bad file); usage_error where the
/// programs were built without the ONNX reader, naming what to install.
[[nodiscard]] onnx::graph read_onnx_graph(const std::string& path);

/// Whether the ONNX file at `path` reads token ids (onnx::classify_inputs): a language model, whose
/// dry run takes BERT's defaults.
[[nodiscard]] bool onnx_reads_tokens(const std::string& path);

}  // namespace tessera::programs
