#pragma once
// Which of an ONNX graph's inputs carry samples and which are weights (a file exported without its
// parameters declares them as inputs too).
#include <set>
#include <string>
#include <vector>

#include "tessera/onnx/graph.hpp"

namespace tessera::onnx {

/// A graph's inputs by role.
struct graph_inputs {
    std::string samples;              ///< the input that carries the samples (images, or token ids)
    bool tokens = false;              ///< the samples are token ids (an integer input)
    std::set<std::string> side;       ///< other inputs beside the samples (BERT's token types)
    std::set<std::string> weights;    ///< inputs and initializers read as weights
};

/// The roles of graph `g`'s inputs. Weights: what a node reads in a weight's place (a convolution's
/// kernel and bias, a batch norm's four vectors, a Gemm's second and third operands, a table a
/// Gather reads), and float vectors and matrices that no MatMul or Gemm reads first. The samples: the
/// first input left; the others are side inputs. Throws import_error when no input is left.
[[nodiscard]] inline graph_inputs classify_inputs(const graph& g) {
    graph_inputs out;
    std::set<std::string> first_operands;
    for (const node& n : g.nodes) {
        const auto mark = [&](std::size_t i) {
            if (i < n.inputs.size() && !n.inputs[i].empty()) out.weights.insert(n.inputs[i]);
        };
        if (n.op == "Conv") mark(1), mark(2);
        if (n.op == "BatchNormalization") mark(1), mark(2), mark(3), mark(4);
        if (n.op == "Gemm") mark(1), mark(2);
        if (n.op == "Gather") mark(0);
        if ((n.op == "MatMul" || n.op == "Gemm") && !n.inputs.empty()) first_operands.insert(n.inputs.front());
    }
    std::vector<const declared_tensor*> data;
    for (const auto& t : g.inputs) {
        const bool integer = t.element_type == 6 || t.element_type == 7;
        if (out.weights.count(t.name) != 0) continue;
        if (!integer && t.dims.size() <= 2 && first_operands.count(t.name) == 0) {
            out.weights.insert(t.name);
            continue;
        }
        data.push_back(&t);
    }
    if (data.empty()) throw import_error("ONNX graph: no graph input carries samples (every one is read as a weight)");
    out.samples = data.front()->name;
    out.tokens = data.front()->element_type == 6 || data.front()->element_type == 7;
    for (std::size_t i = 1; i < data.size(); ++i) out.side.insert(data[i]->name);
    return out;
}

}  // namespace tessera::onnx
