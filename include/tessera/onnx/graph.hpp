#pragma once
// An ONNX graph as tessera reads it: nodes, the shapes of declared tensors and the values of small
// integer constants (the shape arithmetic of an export), never a weight's values.
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::onnx {

/// A file or graph tessera cannot read or price: what() names the problem, the node or tensor, and
/// the value.
class import_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// The operators tessera prices (onnx::imported_network), as an error lists them.
inline constexpr std::string_view supported_operators =
    "Conv, BatchNormalization, Relu, Add, MaxPool, AveragePool, GlobalAveragePool, Gemm, MatMul against weights (with "
    "an Add of its bias), Gather of an embedding (with the Adds of its positions' and token types' tables), "
    "LayerNormalization and its decomposed form (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add), GELU as "
    "Div, Erf, Add, Mul, Mul, Dropout, attention (Split, Reshape, Transpose, MatMul, Div, Softmax, Dropout, MatMul), "
    "MatMul of two activations (batched over their leading axes), Softmax, value-by-value operators (Add, Sub, Mul, Div, Pow, Where, Tanh, Sigmoid, Erf, Sqrt, Exp, Neg, Reciprocal, "
    "Abs, Clip, LeakyRelu, Cast, Equal, Less, Greater), Concat, Slice, Split, Gather and Expand of activations "
    "(exchange only), Flatten, Reshape, Identity, Squeeze, Unsqueeze, Transpose, and shape arithmetic folded to "
    "constants (Constant, Shape, Gather, Concat, Cast, Expand, Equal, Where, Slice, Range, ConstantOfShape)";

/// The integer values of a small constant (an initializer or Constant node of an integer type, or
/// one folded from them): what Reshape, Slice and the exported shape arithmetic read.
struct constant {
    std::vector<std::int64_t> dims;    ///< its shape (empty: a scalar)
    std::vector<std::int64_t> values;  ///< row-major
};

/// A tensor declared with a shape: a graph input, an initializer (a weight), or a value_info.
/// A dimension below 0 is symbolic (a named or unknown dimension, such as the batch).
struct declared_tensor {
    std::string name;
    std::vector<std::int64_t> dims;
    int element_type = 1;  ///< ONNX TensorProto.DataType (1 float, 7 int64, 10 float16, ...)
};

/// One attribute of a node: an integer, a float, a list of either, a string, or a tensor's integer
/// values (Constant's `value`).
struct attribute {
    std::string name;
    std::optional<std::int64_t> integer;
    std::optional<double> floating;
    std::vector<std::int64_t> integers;
    std::vector<double> floats;
    std::string text;
    std::optional<constant> tensor;  ///< an integer tensor's values; a float tensor gives its shape only
    std::vector<std::int64_t> tensor_dims;
    bool has_tensor = false;
    bool has_graph = false;  ///< a subgraph (If, Loop): tessera does not price control flow
};

/// One node: its operator, name, the names of its inputs (empty: an omitted optional input) and
/// outputs, and its attributes.
struct node {
    std::string name, op, domain;
    std::vector<std::string> inputs, outputs;
    std::vector<attribute> attributes;

    [[nodiscard]] const attribute* find(std::string_view key) const noexcept {
        for (const auto& a : attributes)
            if (a.name == key) return &a;
        return nullptr;
    }
    /// An integer attribute, or `fallback` when the node does not set it.
    [[nodiscard]] std::int64_t integer(std::string_view key, std::int64_t fallback) const {
        const attribute* a = find(key);
        if (a == nullptr) return fallback;
        if (!a->integer) throw import_error("ONNX node '" + name + "' (" + op + "): attribute " + std::string(key) +
                                            " is not an integer");
        return *a->integer;
    }
    /// An integer-list attribute, or `fallback` when the node does not set it.
    [[nodiscard]] std::vector<std::int64_t> integers(std::string_view key, std::vector<std::int64_t> fallback = {}) const {
        const attribute* a = find(key);
        return a == nullptr ? fallback : a->integers;
    }
    /// "'name' (Op)", how errors name a node.
    [[nodiscard]] std::string label() const { return "'" + name + "' (" + op + ")"; }
};

/// A model's main graph: its nodes in the file's order (ONNX requires a topological one), its inputs
/// that are not initializers (the data), its outputs, every tensor whose shape it declares
/// (initializers, inputs, value_info), and the values of its small integer initializers.
struct graph {
    std::string producer;  ///< producer_name and version ("pytorch 1.13.0")
    std::int64_t opset = 0;  ///< the default domain's opset version
    std::vector<node> nodes;
    std::vector<declared_tensor> inputs, outputs;
    std::map<std::string, declared_tensor, std::less<>> initializers;
    std::map<std::string, constant, std::less<>> constants;
    std::map<std::string, declared_tensor, std::less<>> value_info;
    /// Float scalars of initializers and Constant nodes (a dropout's ratio, a layer norm's epsilon).
    std::map<std::string, double, std::less<>> scalars;

    [[nodiscard]] bool is_initializer(std::string_view n) const { return initializers.find(n) != initializers.end(); }
};

}  // namespace tessera::onnx
