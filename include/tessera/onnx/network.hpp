#pragma once
// An ONNX graph as a unit network for dry runs and plans: each node, or a fused pair (a batch norm and
// its ReLU, a residual add and its ReLU), priced by the tessera layer that computes the same, and the
// graph cut into units wherever one tensor alone crosses. Shapes and costs only: it cannot run.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tessera/config/error.hpp"
#include "tessera/kernels/conv_chunks.hpp"
#include "tessera/nn/activation.hpp"
#include "tessera/nn/batch_norm.hpp"
#include "tessera/nn/attention.hpp"
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/cost.hpp"
#include "tessera/nn/dropout.hpp"
#include "tessera/nn/gelu.hpp"
#include "tessera/nn/layer.hpp"
#include "tessera/nn/layer_norm.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/pooling.hpp"
#include "tessera/nn/residual.hpp"
#include "tessera/nn/token_embedding.hpp"
#include "tessera/nn/token_linear.hpp"
#include "tessera/onnx/graph.hpp"
#include "tessera/onnx/inputs.hpp"
#include "tessera/onnx/shapes.hpp"
#include "tessera/tensor/dense.hpp"

namespace tessera::onnx {

/// The tessera layer an imported node is priced as.
enum class layer_kind : std::uint8_t {
    convolution,      ///< Conv (nn::conv2d; a bias adds its channels and a pass)
    batch_norm,       ///< BatchNormalization, with the ReLU after it fused (nn::batch_norm_relu)
    relu,             ///< Relu (nn::relu)
    add,              ///< Add of two activations, with the ReLU after it fused (a residual block's)
    max_pool,         ///< MaxPool (nn::max_pool)
    average_pool,     ///< AveragePool (nn::avg_pool)
    global_average,   ///< GlobalAveragePool (nn::global_avg_pool)
    linear,           ///< Gemm against weights, with its bias (nn::linear)
    view,             ///< Flatten, Reshape, Identity, Squeeze, Unsqueeze, Transpose: a change of layout, no pass
    embedding,        ///< Gather of token ids from a table, with its positions' and token types' (nn::token_embedding)
    token_linear,     ///< MatMul of tokens against weights, with the Add of its bias (nn::token_linear)
    layer_norm,       ///< LayerNormalization, or its decomposed form (nn::layer_norm)
    gelu,             ///< GELU as Div, Erf, Add, Mul, Mul (nn::gelu, erf form)
    dropout,          ///< Dropout (nn::dropout)
    attention,        ///< Split of a fused QKV into heads, Q·Kᵀ, scale, Softmax, Dropout, P·V, heads merged (nn::attention)
    elementwise,      ///< another value-by-value operator on activations (Mul, Div, Sub, Where, Tanh, an Add that broadcasts...)
    softmax,          ///< Softmax over the last axis outside an attention (popnn's passes, as nn::attention's)
    layout,           ///< Concat, Slice, Split or Gather of activations: exchange only, a tensor of its own
    batched,          ///< MatMul of two activations outside the attention pattern (products batched over its leading axes)
};

/// One priced layer of an imported graph.
struct imported_layer {
    layer_kind kind = layer_kind::view;
    std::vector<std::size_t> nodes;   ///< the graph's nodes it stands for, in order
    std::vector<std::string> inputs;  ///< the activations it reads
    std::string output;               ///< the activation it writes
    bool relu = false;                ///< a batch norm or add with the ReLU after it fused
    bool bias = false;                ///< a convolution or token linear layer with a bias
    std::size_t in = 0, out = 0;      ///< channels (convolution, batch norm), features (linear, layer norm)
    kernels::window window{};         ///< convolution and pooling
    std::size_t vocab = 0, positions = 0, types = 0;  ///< embedding: its tables' rows
    std::size_t heads = 0;            ///< attention; batched: products per sample
    std::size_t inner = 0;            ///< batched: the axis each product sums over
    double ratio = 0;                 ///< dropout, attention: the dropout probability
    double eps = 1e-5;                ///< layer norm
};

/// An ONNX graph read as a unit network at precision P (its data and weight types are tessera's,
/// whatever the file declares): units in the graph's order, each a run of layers between two points
/// where one tensor alone crosses (a residual block is one unit), named by the module path its
/// nodes share ("layer3.8"; PyTorch names nodes "/layer3/layer3.8/conv1/Conv"). The batch is the
/// caller's micro-batch, whatever the file declares. It prices and plans; forward throws.
/// @code
///   auto net = onnx::imported_network<cfg::fp32>(onnx::read_model("resnet50.onnx"));
///   net.units();                   // 21: conv1, bn1, maxpool, layer1.0 ... layer4.2, avgpool, fc
///   net.unit_index("layer3.0");    // a unit by name, or by the name of its first node
/// @endcode
template <nn::Numeric P>
class imported_network {
public:
    using precision = P;
    using T = typename P::data_type;
    struct state {};

    explicit imported_network(graph g) : m_graph(std::move(g)), m_shapes(m_graph) {
        find_data_input();
        build_layers();
        build_units();
    }

    [[nodiscard]] const graph& source() const noexcept { return m_graph; }
    [[nodiscard]] const std::vector<imported_layer>& layers() const noexcept { return m_layers; }
    /// Whether its convolutions carry biases and no batch norm follows them: an inference export,
    /// whose batch norms PyTorch folded into the convolutions (a different network to train).
    [[nodiscard]] bool batch_norms_folded() const noexcept { return m_folded; }
    /// Whether its samples are token ids (n × 1 × T × 1; a language model's), not values.
    [[nodiscard]] bool reads_tokens() const noexcept { return m_tokens; }
    /// The graph input that carries the samples.
    [[nodiscard]] const std::string& data_input() const noexcept { return m_input; }
    /// One sample of the data input, as tessera shapes it (n = 1; NCHW images are N×H×W×C).
    [[nodiscard]] tensor::shape sample() const { return shape_of(m_input, 1); }

    [[nodiscard]] std::size_t units() const noexcept { return m_units.size(); }
    [[nodiscard]] std::string unit_name(std::size_t u) const { return m_units.at(u).name; }
    /// The unit called `name`, or whose first node is called `name`; config::config_error otherwise
    /// (a node inside a unit names the unit's first node: a stage starts only where one tensor crosses).
    [[nodiscard]] std::size_t unit_index(std::string_view name) const {
        for (std::size_t u = 0; u < m_units.size(); ++u)
            if (m_units[u].name == name) return u;
        for (std::size_t u = 0; u < m_units.size(); ++u)
            for (std::size_t l = m_units[u].first; l < m_units[u].last; ++l)
                for (const std::size_t k : m_layers[l].nodes)
                    if (m_graph.nodes[k].name == name) {
                        if (l == m_units[u].first && k == m_layers[l].nodes.front()) return u;
                        throw config::config_error(
                            "tessera::onnx: node '" + std::string(name) + "' is inside unit " + m_units[u].name +
                            ", which starts at node '" + m_graph.nodes[m_layers[m_units[u].first].nodes.front()].name +
                            "' (a stage can start only where one tensor alone crosses)");
                    }
        throw config::config_error("tessera::onnx: no unit or node named '" + std::string(name) + "' (units are " +
                                   m_units.front().name + ", " + (m_units.size() > 1 ? m_units[1].name : "") + " ... " +
                                   m_units.back().name + ")");
    }

    [[nodiscard]] tensor::shape unit_input_shape(std::size_t u, const tensor::shape& s) const {
        check_input(s);
        return shape_of(input_of(m_units.at(u)), s.n);
    }
    [[nodiscard]] tensor::shape unit_output_shape(std::size_t u, const tensor::shape& in) const {
        return shape_of(m_layers[m_units.at(u).last - 1].output, in.n);
    }
    [[nodiscard]] tensor::shape output_shape(const tensor::shape& s) const {
        check_input(s);
        return shape_of(m_layers.back().output, s.n);
    }

    /// Unit u's cost for micro-batches of `in.n` samples: its layers' costs summed, and the inference
    /// peak of its layers run in the graph's order, each tensor freed after its last reader (the
    /// unit's input, the caller's, excluded).
    [[nodiscard]] nn::cost unit_cost(std::size_t u, const tensor::shape& in) const {
        const unit& un = m_units.at(u);
        if (u == 0) check_input(in);
        if (in != shape_of(input_of(un), in.n))
            throw tensor::shape_error("tessera::onnx: unit " + un.name + " reads " + shape_of(input_of(un), in.n).str() +
                                      ", not " + in.str());
        nn::cost total;
        std::map<std::string, double> live;  // tensors written in the unit and read later, by bytes
        double peak = 0;
        for (std::size_t l = un.first; l < un.last; ++l) {
            const imported_layer& layer = m_layers[l];
            const nn::cost c = layer_cost(l, in.n);
            double held = 0;
            for (const auto& [name, bytes] : live) held += bytes;
            peak = std::max(peak, held + c.inference_peak_bytes());
            total += c;
            if (layer.kind != layer_kind::view) live[layer.output] = bytes_of(layer.output, in.n);
            for (auto it = live.begin(); it != live.end();)
                it = m_last_reader.at(root(it->first)) <= l ? live.erase(it) : std::next(it);
        }
        total.peak_bytes = peak;
        return total;
    }
    /// The whole graph's cost for micro-batches of s.n samples.
    [[nodiscard]] nn::cost cost(const tensor::shape& s) const {
        nn::cost c;
        for (std::size_t u = 0; u < units(); ++u) c += unit_cost(u, unit_input_shape(u, s));
        return c;
    }
    /// Trainable parameters, a tied table counted once.
    [[nodiscard]] std::size_t parameters() const { return cost(sample()).parameters - m_tied; }
    /// Elements of a table the graph reads twice (an embedding and a decoder MatMul against its
    /// transpose, as a tied LM head does): the dry run adds the two uses' gradients, as for
    /// nn::transformer. 0 when none is.
    [[nodiscard]] std::size_t tied_table_elements() const noexcept { return m_tied; }

    // An imported graph prices and plans; it holds no weights to run.
    const nn::activation<P>& forward_units(std::size_t, std::size_t, const nn::activation<P>&, state&, const nn::context&) {
        throw std::logic_error("tessera::onnx::imported_network: an imported graph dry-runs and plans; it cannot run");
    }
    const nn::activation<P>& backward_units(std::size_t, std::size_t, const nn::activation<P>&, state&, const nn::context&,
                                            bool) {
        throw std::logic_error("tessera::onnx::imported_network: an imported graph dry-runs and plans; it cannot run");
    }
    template <class F>
    void visit_unit_parameters(std::size_t, std::size_t, F&&) {}
    template <class F>
    void visit_unit_buffers(std::size_t, std::size_t, F&&) {}
    template <class F>
    void visit_parameters(F&&) {}

private:
    struct unit {
        std::size_t first = 0, last = 0;  // layers [first, last)
        std::string name;
    };

    [[nodiscard]] std::string input_of(const unit& un) const {
        const imported_layer& l = m_layers[un.first];
        return l.inputs.empty() ? m_input : l.inputs.front();
    }
    /// Where a view's output is the view of: the tensor that holds its bytes.
    [[nodiscard]] const std::string& root(const std::string& t) const {
        const auto it = m_alias.find(t);
        return it == m_alias.end() ? t : it->second;
    }
    [[nodiscard]] std::int64_t per_sample(const std::string& t) const {
        const std::int64_t e = m_shapes.at(t).elements();
        return e / m_batch;
    }
    [[nodiscard]] double bytes_of(const std::string& t, std::size_t n) const {
        return double(per_sample(t)) * double(n) * double(sizeof(T));
    }

    /// Tensor t's shape for micro-batches of n samples, as tessera lays it out: N×C×H×W is
    /// n×H×W×C, N×F is n×1×1×F, N×T×C is n×1×T×C (and a (N·T)×C reshape of it likewise).
    [[nodiscard]] tensor::shape shape_of(const std::string& t, std::size_t n) const {
        const auto& d = m_shapes.dims(t);
        const auto sz = [](std::int64_t v) { return static_cast<std::size_t>(v); };
        if (t == m_input && m_tokens && d.size() == 2) return {n, 1, sz(d[1]), 1};  // token ids: n × 1 × T × 1
        if (d.size() == 4 && d[0] == m_batch) return {n, sz(d[2]), sz(d[3]), sz(d[1])};
        if (d.size() == 3 && d[0] == m_batch) return {n, 1, sz(d[1]), sz(d[2])};
        if (d.size() == 2 && d[0] == m_batch) return {n, 1, 1, sz(d[1])};
        if (d.size() == 2 && d[0] % m_batch == 0) return {n, 1, sz(d[0] / m_batch), sz(d[1])};
        throw import_error("ONNX tensor '" + t + "' of shape " + detail::dims_text(d) +
                           " is not laid out by samples (batch " + std::to_string(m_batch) + " first)");
    }
    void check_input(const tensor::shape& s) const {
        const tensor::shape want = shape_of(m_input, s.n);
        if (s != want)
            throw config::config_error("tessera::onnx: the graph's input '" + m_input + "' is " +
                                      detail::dims_text(m_shapes.dims(m_input)) + " (" + want.str() +
                                      " as tessera lays it out), the samples given are " + s.str());
    }

    /// Layer l's cost: its own, and where it is the first of several layers to read a tensor, the
    /// backward's sum of their gradients of it (branch_sum_cost, after its own passes).
    [[nodiscard]] nn::cost layer_cost(std::size_t index, std::size_t n) const {
        nn::cost c = own_cost(m_layers[index], n);
        const double kept = c.stash_bytes(), peak = c.inference_peak_bytes();
        for (const auto& [tensor, first] : m_forks)
            if (first == index)
                for (std::size_t k = 1; k < m_readers.at(tensor); ++k) c += nn::branch_sum_cost<P>(shape_of(tensor, n));
        c.kept_bytes = kept;
        c.peak_bytes = peak;
        return c;
    }
    [[nodiscard]] nn::cost own_cost(const imported_layer& l, std::size_t n) const {
        const tensor::shape s = shape_of(l.inputs.front(), n), o = shape_of(l.output, n);
        switch (l.kind) {
            case layer_kind::convolution: {
                nn::cost c = nn::conv2d<P>(l.in, l.out, l.window, nn::shapes_only).cost(s);
                if (l.bias) {  // the bias: added to every output, its gradient summed over the positions
                    const double values = double(o.size());
                    c.parameters += l.out;
                    c.forward_flops += values;
                    c.backward_flops += values;
                    c.passes.push_back(nn::pass::elementwise(nn::pass_phase::forward, values, 2));
                    c.passes.push_back(nn::pass::reduction(nn::pass_phase::backward, values, 1, double(l.out)).of_weights());
                }
                return c;
            }
            case layer_kind::batch_norm:
                return l.relu ? nn::batch_norm_relu<P>(l.in).cost(s) : nn::batch_norm<P>(l.in).cost(s);
            case layer_kind::relu: return nn::relu<P>{}.cost(s);
            case layer_kind::add: {
                nn::cost c = nn::branch_add_cost<P>(o);
                if (l.relu) c += nn::relu<P>{}.cost(o);
                else c.kept_bytes = double(o.size() * sizeof(T));  // its output, kept for the layer after
                return c;
            }
            case layer_kind::max_pool: return nn::max_pool<P>(l.window).cost(s);
            case layer_kind::average_pool: return nn::avg_pool<P>(l.window).cost(s);
            case layer_kind::global_average: return nn::global_avg_pool<P>{}.cost(s);
            case layer_kind::linear: return nn::linear<P>(l.in, l.out, nn::shapes_only).cost(s);
            case layer_kind::view: return nn::cost{0, 0, 0, 0, 0, {}, 0, 0};
            case layer_kind::embedding: {
                nn::embedding_spec spec;
                spec.vocab = l.vocab, spec.width = l.out, spec.positions = l.positions, spec.types = l.types;
                return nn::token_embedding<P>(spec, nn::shapes_only).cost(s);
            }
            case layer_kind::token_linear: return nn::token_linear<P>(l.in, l.out, l.bias, nn::shapes_only).cost(s);
            case layer_kind::layer_norm: return nn::layer_norm<P>(l.in, l.eps, nn::shapes_only).cost(s);
            case layer_kind::gelu: return nn::gelu<P>(kernels::gelu_form::erf).cost(s);
            case layer_kind::dropout: return nn::dropout<P>(l.ratio).cost(s);
            case layer_kind::attention: return nn::attention<P>(l.heads, false, l.ratio).cost(s);
            case layer_kind::elementwise: {
                // Each value once forward (its activations read, its output written) and once backward
                // (the output gradient and the inputs read, each input's gradient written); keeps its output.
                const double values = double(o.size()), reads = double(l.inputs.size());
                using enum nn::pass_phase;
                return {values, values, (reads + 1) * values * sizeof(T), (2 * reads + 1) * values * sizeof(T), 0,
                        {nn::pass::elementwise(forward, values, reads + 1), nn::pass::elementwise(backward, values, 2 * reads + 1)},
                        values * sizeof(T)};
            }
            case layer_kind::softmax: {
                const double values = double(o.size()), rows = values / double(std::max<std::size_t>(o.c, 1));
                using enum nn::pass_phase;
                return {5 * values, 4 * values, 2 * values * sizeof(T), 3 * values * sizeof(T), 0,
                        {nn::pass::reduction(forward, values, 1, rows), nn::pass::elementwise(forward, values, 2),
                         nn::pass::reduction(forward, values, 1, rows), nn::pass::elementwise(forward, values, 2),
                         nn::pass::elementwise(backward, values, 3), nn::pass::reduction(backward, values, 1, rows),
                         nn::pass::elementwise(backward, values, 3)},
                        values * sizeof(T)};
            }
            case layer_kind::layout: return nn::cost{0, 0, 0, 0, 0, {}, 0, double(o.size() * sizeof(T))};
            case layer_kind::batched: {
                // groups products of (rows × inner) · (inner × columns) per micro-batch; backward, the
                // gradients of both operands, each as many products.
                const double groups = double(l.heads) * double(n), rows = double(l.in), inner = double(l.inner),
                             columns = double(l.out);
                const double macs = groups * rows * inner * columns, values = double(o.size());
                using enum nn::pass_phase;
                return {2 * macs, 4 * macs, (groups * (rows + columns) * inner + values) * sizeof(T),
                        2 * (groups * (rows + columns) * inner + values) * sizeof(T), 0,
                        {nn::pass::batched(forward, groups, rows, columns, inner),
                         nn::pass::batched(backward, groups, rows, inner, columns),
                         nn::pass::batched(backward, groups, inner, columns, rows)},
                        values * sizeof(T)};
            }
        }
        return {};
    }

    void find_data_input() {
        graph_inputs roles = classify_inputs(m_graph);
        m_input = std::move(roles.samples);
        m_tokens = roles.tokens;
        m_side = std::move(roles.side);
        m_weights = std::move(roles.weights);
        const auto& d = m_shapes.dims(m_input);
        if (d.empty() || d[0] <= 0)
            throw import_error("ONNX graph: its input '" + m_input + "' of shape " + detail::dims_text(d) +
                               " has no batch dimension");
        m_batch = d[0];
        if (!m_tokens) m_activations.insert(m_input);
    }

    [[nodiscard]] bool is_activation(const std::string& t) const { return m_activations.count(t) != 0; }
    /// Operators priced value by value (layer_kind::elementwise).
    [[nodiscard]] static bool is_elementwise(std::string_view op) noexcept {
        for (const std::string_view e : {"Add", "Sub", "Mul", "Div", "Pow", "Where", "Tanh", "Sigmoid", "Erf", "Sqrt", "Exp",
                                         "Neg", "Reciprocal", "Abs", "Clip", "LeakyRelu", "Cast", "Equal", "Less", "Greater"})
            if (op == e) return true;
        return false;
    }
    /// A weight, a constant, or what nodes make of them alone (a weight's Transpose, a position table's rows).
    [[nodiscard]] bool is_constant(const std::string& t) const {
        return m_weights.count(t) != 0 || m_graph.is_initializer(t) || m_constants.count(t) != 0 ||
               (m_shapes.has(t) && m_shapes.at(t).values.has_value());
    }
    /// The nodes that read tensor t.
    [[nodiscard]] std::vector<std::size_t> readers_of(const std::string& t) const {
        const auto it = m_node_readers.find(t);
        return it == m_node_readers.end() ? std::vector<std::size_t>{} : it->second;
    }
    /// The node that alone reads tensor t, if it is an `op`.
    [[nodiscard]] std::optional<std::size_t> only_reader(const std::string& t, std::string_view op) const {
        const auto r = readers_of(t);
        if (r.size() != 1 || m_graph.nodes[r.front()].op != op || m_fused[r.front()]) return std::nullopt;
        return r.front();
    }
    /// The other input of two-input node k than `t`.
    [[nodiscard]] const std::string& other_input(std::size_t k, const std::string& t) const {
        const node& n = m_graph.nodes[k];
        return n.inputs.at(0) == t ? n.inputs.at(1) : n.inputs.at(0);
    }
    /// The tensor a constant is made from through Transposes, Identities and Casts (a tied decoder's table).
    [[nodiscard]] std::string constant_source(std::string t) const {
        for (auto it = m_producer.find(t); it != m_producer.end(); it = m_producer.find(t)) {
            const node& n = m_graph.nodes[it->second];
            if ((n.op != "Transpose" && n.op != "Identity" && n.op != "Cast") || n.inputs.empty()) break;
            t = n.inputs.front();
        }
        return t;
    }
    [[nodiscard]] std::size_t last_dim(const std::string& t) const {
        const auto& d = m_shapes.dims(t);
        if (d.empty()) throw import_error("ONNX tensor '" + t + "' is a scalar where features are read");
        return std::size_t(d.back());
    }

    /// Gather of token ids from a table, with the Adds of a positions' table's rows and of a token
    /// types' table's rows by a side input: nn::token_embedding.
    [[nodiscard]] std::optional<imported_layer> match_embedding(std::size_t k) {
        const node& n = m_graph.nodes[k];
        if (n.inputs.size() != 2 || n.inputs[1] != m_input || !is_constant(n.inputs[0])) return std::nullopt;
        const auto& table = m_shapes.dims(n.inputs[0]);
        if (table.size() != 2) return std::nullopt;
        imported_layer l;
        l.kind = layer_kind::embedding;
        l.nodes = {k};
        l.inputs = {m_input};
        l.output = n.outputs.front();
        l.vocab = std::size_t(table[0]), l.out = std::size_t(table[1]);
        m_embedding_table = n.inputs[0];
        while (const auto add = only_reader(l.output, "Add")) {
            const std::string& other = other_input(*add, l.output);
            const auto producer = m_producer.find(other);
            if (producer == m_producer.end() || m_graph.nodes[producer->second].op != "Gather") break;
            const node& g = m_graph.nodes[producer->second];
            const auto& rows = m_shapes.dims(g.inputs.at(0));
            if (rows.size() != 2 || std::size_t(rows[1]) != l.out) break;
            if (is_constant(other) && l.positions == 0) {
                l.positions = std::size_t(rows[0]);
            } else if (m_side.count(g.inputs.at(1)) != 0 && l.types == 0) {
                l.types = std::size_t(rows[0]);
                l.nodes.push_back(producer->second);
            } else {
                break;
            }
            l.nodes.push_back(*add);
            l.output = m_graph.nodes[*add].outputs.front();
        }
        return l;
    }
    /// MatMul of tokens (or samples) against a weight matrix, with the Add of its bias: nn::token_linear.
    [[nodiscard]] std::optional<imported_layer> match_linear(std::size_t k) {
        const node& n = m_graph.nodes[k];
        if (n.inputs.size() != 2 || !is_activation(n.inputs[0]) || !is_constant(n.inputs[1])) return std::nullopt;
        const auto& w = m_shapes.dims(n.inputs[1]);
        if (w.size() != 2) return std::nullopt;
        imported_layer l;
        l.kind = layer_kind::token_linear;
        l.nodes = {k};
        l.inputs = {n.inputs[0]};
        l.output = n.outputs.front();
        l.in = std::size_t(w[0]), l.out = std::size_t(w[1]);
        if (const auto add = only_reader(l.output, "Add")) {
            const std::string& bias = other_input(*add, l.output);
            if (is_constant(bias) && m_shapes.dims(bias) == std::vector<std::int64_t>{w[1]}) {
                l.bias = true;
                l.nodes.push_back(*add);
                l.output = m_graph.nodes[*add].outputs.front();
            }
        }
        if (!m_embedding_table.empty() && constant_source(n.inputs[1]) == m_embedding_table) m_tied = l.in * l.out;
        return l;
    }
    /// ReduceMean, Sub, Pow, ReduceMean, Add (ε), Sqrt, Div, Mul (γ), Add (β): nn::layer_norm.
    [[nodiscard]] std::optional<imported_layer> match_layer_norm(std::size_t k) {
        const node& n = m_graph.nodes[k];
        const std::string& x = n.inputs.front();
        if (!is_activation(x)) return std::nullopt;
        const auto sub = only_reader(n.outputs.front(), "Sub");
        if (!sub || m_graph.nodes[*sub].inputs.at(0) != x) return std::nullopt;
        const std::string& centred = m_graph.nodes[*sub].outputs.front();
        const auto r = readers_of(centred);
        if (r.size() != 2) return std::nullopt;
        const std::size_t pow = m_graph.nodes[r[0]].op == "Pow" ? r[0] : r[1], div = pow == r[0] ? r[1] : r[0];
        if (m_graph.nodes[pow].op != "Pow" || m_graph.nodes[div].op != "Div") return std::nullopt;
        const auto mean = only_reader(m_graph.nodes[pow].outputs.front(), "ReduceMean");
        if (!mean) return std::nullopt;
        const auto eps = only_reader(m_graph.nodes[*mean].outputs.front(), "Add");
        if (!eps) return std::nullopt;
        const auto sqrt = only_reader(m_graph.nodes[*eps].outputs.front(), "Sqrt");
        if (!sqrt || m_graph.nodes[div].inputs.at(1) != m_graph.nodes[*sqrt].outputs.front()) return std::nullopt;
        const auto scale = only_reader(m_graph.nodes[div].outputs.front(), "Mul");
        if (!scale) return std::nullopt;
        const auto shift = only_reader(m_graph.nodes[*scale].outputs.front(), "Add");
        if (!shift) return std::nullopt;
        imported_layer l;
        l.kind = layer_kind::layer_norm;
        l.nodes = {k, *sub, pow, *mean, *eps, *sqrt, div, *scale, *shift};
        l.inputs = {x};
        l.output = m_graph.nodes[*shift].outputs.front();
        l.in = last_dim(x);
        const auto e = m_graph.scalars.find(other_input(*eps, m_graph.nodes[*mean].outputs.front()));
        if (e != m_graph.scalars.end()) l.eps = e->second;
        return l;
    }
    /// x · ½ (1 + erf(x / √2)) as Div, Erf, Add, Mul, Mul: nn::gelu (erf).
    [[nodiscard]] std::optional<imported_layer> match_gelu(std::size_t k) {
        const node& n = m_graph.nodes[k];
        const std::string& x = n.inputs.front();
        if (!is_activation(x) || !is_constant(n.inputs.at(1))) return std::nullopt;
        const auto erf = only_reader(n.outputs.front(), "Erf");
        if (!erf) return std::nullopt;
        const auto one = only_reader(m_graph.nodes[*erf].outputs.front(), "Add");
        if (!one) return std::nullopt;
        const auto times = only_reader(m_graph.nodes[*one].outputs.front(), "Mul");
        if (!times || other_input(*times, m_graph.nodes[*one].outputs.front()) != x) return std::nullopt;
        const auto half = only_reader(m_graph.nodes[*times].outputs.front(), "Mul");
        if (!half) return std::nullopt;
        imported_layer l;
        l.kind = layer_kind::gelu;
        l.nodes = {k, *erf, *one, *times, *half};
        l.inputs = {x};
        l.output = m_graph.nodes[*half].outputs.front();
        return l;
    }
    /// The views (Reshape, Transpose) that alone read t, one after another: the last one's output.
    [[nodiscard]] std::string through_views(std::string t, std::vector<std::size_t>& nodes) const {
        for (;;) {
            const auto r = readers_of(t);
            if (r.size() != 1 || (m_graph.nodes[r.front()].op != "Reshape" && m_graph.nodes[r.front()].op != "Transpose"))
                return t;
            nodes.push_back(r.front());
            t = m_graph.nodes[r.front()].outputs.front();
        }
    }
    /// A fused QKV split into heads, Q·Kᵀ, its scale, Softmax, Dropout, P·V and the heads merged
    /// again: nn::attention on the fused QKV.
    [[nodiscard]] std::optional<imported_layer> match_attention(std::size_t k) {
        const node& n = m_graph.nodes[k];
        if (!is_activation(n.inputs.front()) || n.outputs.size() != 3) return std::nullopt;
        std::vector<std::size_t> nodes{k};
        const std::string q = through_views(n.outputs[0], nodes), key = through_views(n.outputs[1], nodes),
                          v = through_views(n.outputs[2], nodes);
        const auto scores = only_reader(q, "MatMul");
        if (!scores || m_graph.nodes[*scores].inputs.at(1) != key || readers_of(key).size() != 1) return std::nullopt;
        nodes.push_back(*scores);
        std::string t = m_graph.nodes[*scores].outputs.front();
        const auto& s = m_shapes.dims(t);
        if (s.size() != 4) return std::nullopt;
        for (const char* op : {"Div", "Mul"})
            if (const auto scale = only_reader(t, op); scale && is_constant(other_input(*scale, t))) {
                nodes.push_back(*scale);
                t = m_graph.nodes[*scale].outputs.front();
                break;
            }
        const auto softmax = only_reader(t, "Softmax");
        if (!softmax) return std::nullopt;
        nodes.push_back(*softmax);
        t = m_graph.nodes[*softmax].outputs.front();
        double ratio = 0;
        if (const auto drop = only_reader(t, "Dropout")) {
            nodes.push_back(*drop);
            ratio = dropout_ratio(m_graph.nodes[*drop]);
            t = m_graph.nodes[*drop].outputs.front();
        }
        const auto mix = only_reader(t, "MatMul");
        if (!mix || m_graph.nodes[*mix].inputs.at(1) != v || readers_of(v).size() != 1) return std::nullopt;
        nodes.push_back(*mix);
        const std::string out = through_views(m_graph.nodes[*mix].outputs.front(), nodes);
        if (m_shapes.dims(out).size() != 3) return std::nullopt;
        imported_layer l;
        l.kind = layer_kind::attention;
        l.nodes = std::move(nodes);
        l.inputs = {n.inputs.front()};
        l.output = out;
        l.heads = std::size_t(s[1]);
        l.ratio = ratio;
        return l;
    }
    /// A Dropout's probability: its ratio input (opset 12 on), its attribute, or ONNX's default 0.5.
    [[nodiscard]] double dropout_ratio(const node& n) const {
        if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
            const auto it = m_graph.scalars.find(n.inputs[1]);
            if (it == m_graph.scalars.end())
                throw import_error("ONNX node " + n.label() + ": its ratio '" + n.inputs[1] + "' is not a constant");
            return it->second;
        }
        const attribute* a = n.find("ratio");
        return a != nullptr && a->floating ? *a->floating : 0.5;
    }

    /// The window of a convolution or pooling node: square strides and pads that are the same on
    /// every side (kernels::window's), no dilation.
    [[nodiscard]] kernels::window window_of(const node& n, std::int64_t kh, std::int64_t kw) const {
        const auto s = n.integers("strides", {1, 1}), p = n.integers("pads", {0, 0, 0, 0});
        const auto d = n.integers("dilations", {1, 1});
        const attribute* pad = n.find("auto_pad");
        if (pad != nullptr && pad->text != "NOTSET" && pad->text != "VALID" && !pad->text.empty())
            throw import_error("ONNX node " + n.label() + ": auto_pad " + pad->text +
                               " (tessera's windows take explicit pads the same on every side)");
        if (s.size() != 2 || s[0] != s[1])
            throw import_error("ONNX node " + n.label() + ": strides " + detail::dims_text(s) +
                               " (tessera's windows take one stride for both axes)");
        if (p.size() != 4 || std::any_of(p.begin(), p.end(), [&](std::int64_t v) { return v != p[0]; }))
            throw import_error("ONNX node " + n.label() + ": pads " + detail::dims_text(p) +
                               " (tessera's windows take the same pad on every side)");
        if (std::any_of(d.begin(), d.end(), [](std::int64_t v) { return v != 1; }))
            throw import_error("ONNX node " + n.label() + ": dilations " + detail::dims_text(d) +
                               " (tessera has no dilated windows)");
        return kernels::window(std::size_t(kh), std::size_t(kw), std::size_t(s[0]), std::size_t(p[0]));
    }

    void build_layers() {
        const auto& nodes = m_graph.nodes;
        for (std::size_t k = 0; k < nodes.size(); ++k) {
            for (const auto& i : nodes[k].inputs)
                if (!i.empty()) m_node_readers[i].push_back(k);
            for (const auto& o : nodes[k].outputs)
                if (!o.empty()) m_producer[o] = k;
        }
        m_fused.assign(nodes.size(), 0);
        // What nodes make of weights and constants alone, known before any pattern looks at it.
        for (const node& n : nodes) {
            bool constant = true;
            for (const auto& i : n.inputs) constant = constant && (i.empty() || is_constant(i));
            if (constant)
                for (const auto& o : n.outputs) m_constants.insert(o);
        }
        // The node after k that reads k's first output alone, when it is a Relu: fused into k.
        const auto relu_after = [&](std::size_t k) -> std::size_t {
            return only_reader(nodes[k].outputs.front(), "Relu").value_or(nodes.size());
        };
        bool conv_bias = false, batch_norms = false;
        for (std::size_t k = 0; k < nodes.size(); ++k) {
            const node& n = nodes[k];
            if (m_fused[k]) continue;
            bool reads_activation = false, reads_samples = false, reads_side = false;
            for (const auto& i : n.inputs) {
                reads_activation = reads_activation || (!i.empty() && is_activation(i));
                reads_samples = reads_samples || (m_tokens && i == m_input);
                reads_side = reads_side || m_side.count(i) != 0;
            }
            // Shape arithmetic (every output a folded constant) and the weights' own preparation:
            // no pass on the IPU.
            bool folded = true;
            for (const auto& o : n.outputs) folded = folded && (o.empty() || m_shapes.at(o).values.has_value());
            if (folded) continue;
            // A pattern of several nodes priced as one tessera layer.
            std::optional<imported_layer> pattern;
            if (n.op == "Gather" && reads_samples) pattern = match_embedding(k);
            else if (n.op == "MatMul") pattern = match_linear(k);
            else if (n.op == "ReduceMean") pattern = match_layer_norm(k);
            else if (n.op == "Div") pattern = match_gelu(k);
            else if (n.op == "Split") pattern = match_attention(k);
            if (pattern) {
                for (const std::size_t f : pattern->nodes) m_fused[f] = 1;
                m_activations.insert(pattern->output);
                m_layers.push_back(std::move(*pattern));
                continue;
            }
            if (reads_samples || reads_side)
                throw import_error("ONNX node " + n.label() + " reads the graph's input '" +
                                   (reads_samples ? m_input : *m_side.begin()) + "' as tessera cannot price it (token ids "
                                   "are priced through an embedding's Gather, token types through its Adds)");
            if (!reads_activation) continue;
            imported_layer l;
            l.nodes = {k};
            l.output = n.outputs.front();
            // The activation it reads first stands for its shape (an elementwise node may read a constant first).
            for (const auto& i : n.inputs)
                if (!i.empty() && is_activation(i)) {
                    l.inputs = {i};
                    break;
                }
            const auto& x = m_shapes.dims(l.inputs.front());
            if (n.op == "Conv") {
                const auto& w = m_shapes.dims(n.inputs.at(1));
                if (n.integer("group", 1) != 1)
                    throw import_error("ONNX node " + n.label() + ": group=" + std::to_string(n.integer("group", 1)) +
                                       ", a grouped convolution, which tessera lacks");
                l.kind = layer_kind::convolution;
                l.in = std::size_t(x[1]);
                l.out = std::size_t(w[0]);
                l.window = window_of(n, w[2], w[3]);
                l.bias = n.inputs.size() > 2 && !n.inputs[2].empty();
                conv_bias = conv_bias || l.bias;
            } else if (n.op == "BatchNormalization") {
                l.kind = layer_kind::batch_norm;
                l.in = std::size_t(x.at(1));
                batch_norms = true;
            } else if (n.op == "Relu") {
                l.kind = layer_kind::relu;
            } else if (n.op == "Add" && n.inputs.size() == 2 && is_activation(n.inputs[0]) && is_activation(n.inputs[1]) &&
                       m_shapes.dims(n.inputs[0]) == m_shapes.dims(n.inputs[1])) {
                l.kind = layer_kind::add;
                l.inputs = {n.inputs[0], n.inputs[1]};
            } else if (n.op == "MaxPool" || n.op == "AveragePool") {
                const auto k2 = n.integers("kernel_shape");
                if (n.integer("ceil_mode", 0) != 0)
                    throw import_error("ONNX node " + n.label() + ": ceil_mode=1 (tessera's windows round down)");
                l.kind = n.op == "MaxPool" ? layer_kind::max_pool : layer_kind::average_pool;
                l.window = window_of(n, k2.at(0), k2.at(1));
                if (n.outputs.size() > 1 && !n.outputs[1].empty())
                    throw import_error("ONNX node " + n.label() + ": its Indices output (tessera keeps its own)");
            } else if (n.op == "GlobalAveragePool") {
                l.kind = layer_kind::global_average;
            } else if (n.op == "Gemm") {
                const auto& b = m_shapes.dims(n.inputs.at(1));
                const auto scale = [&](const char* key) {
                    const attribute* a = n.find(key);
                    return a != nullptr && a->floating.value_or(1.0) != 1.0;
                };
                if (n.integer("transA", 0) != 0 || scale("alpha") || scale("beta"))
                    throw import_error("ONNX node " + n.label() + ": a Gemm with transA or a scale (tessera's linear "
                                       "layer is x·Wᵀ + b)");
                if (n.inputs.size() < 3 || n.inputs[2].empty())
                    throw import_error("ONNX node " + n.label() + ": a Gemm without a bias, which tessera does not price yet");
                const bool tb = n.integer("transB", 0) != 0;
                l.kind = layer_kind::linear;
                l.in = std::size_t(tb ? b[1] : b[0]);
                l.out = std::size_t(tb ? b[0] : b[1]);
            } else if (n.op == "Dropout") {
                l.kind = layer_kind::dropout;
                l.ratio = dropout_ratio(n);
            } else if (n.op == "LayerNormalization") {
                l.kind = layer_kind::layer_norm;
                l.in = last_dim(n.inputs.front());
                if (const attribute* a = n.find("epsilon"); a != nullptr && a->floating) l.eps = *a->floating;
                if (n.integer("axis", -1) != -1 && n.integer("axis", -1) != std::int64_t(x.size()) - 1)
                    throw import_error("ONNX node " + n.label() + ": a layer norm over axis " +
                                       std::to_string(n.integer("axis", -1)) + " (tessera's normalises the last)");
            } else if (n.op == "MatMul" && n.inputs.size() == 2 && is_activation(n.inputs[0]) && is_activation(n.inputs[1])) {
                // (… × rows × inner) · (… × inner × columns): per sample, the product of its leading axes' products.
                const auto& a = m_shapes.dims(n.inputs[0]);
                const auto& b = m_shapes.dims(n.inputs[1]);
                const auto& c = m_shapes.dims(l.output);
                if (a.size() < 3 || b.size() < 3 || c.size() < 3 || c.front() != m_batch)
                    throw import_error("ONNX node " + n.label() + ": a MatMul of two activations " + detail::dims_text(a) +
                                       " and " + detail::dims_text(b) + " not batched by samples");
                l.kind = layer_kind::batched;
                l.inputs = {n.inputs[0], n.inputs[1]};
                l.in = std::size_t(a[a.size() - 2]), l.out = std::size_t(c.back());
                l.inner = std::size_t(a.back());
                std::int64_t groups = 1;
                for (std::size_t i = 1; i + 2 < c.size(); ++i) groups *= c[i];
                l.heads = std::size_t(groups);
            } else if (n.op == "Softmax") {
                if (n.integer("axis", -1) != -1 && n.integer("axis", -1) != std::int64_t(x.size()) - 1)
                    throw import_error("ONNX node " + n.label() + ": a Softmax over axis " +
                                       std::to_string(n.integer("axis", -1)) + " (tessera's runs over the last)");
                l.kind = layer_kind::softmax;
            } else if (is_elementwise(n.op)) {
                l.kind = layer_kind::elementwise;
                l.inputs.clear();
                for (const auto& i : n.inputs)
                    if (!i.empty() && is_activation(i)) l.inputs.push_back(i);
            } else if (n.op == "Concat" || n.op == "Slice" || n.op == "Gather" || n.op == "Expand" || n.op == "Split") {
                l.kind = layer_kind::layout;
                l.inputs.clear();
                for (const auto& i : n.inputs)
                    if (!i.empty() && is_activation(i)) l.inputs.push_back(i);
                for (std::size_t o = 1; o < n.outputs.size(); ++o) {  // a Split's parts: a layer each
                    if (n.outputs[o].empty()) continue;
                    imported_layer part = l;
                    part.output = n.outputs[o];
                    m_activations.insert(part.output);
                    m_layers.push_back(std::move(part));
                }
            } else if (n.op == "Flatten" || n.op == "Reshape" || n.op == "Identity" || n.op == "Squeeze" ||
                       n.op == "Unsqueeze" || n.op == "Transpose") {
                l.kind = layer_kind::view;
                m_alias[l.output] = root(l.inputs.front());
            } else {
                throw import_error("ONNX node " + n.label() + ": operator " + n.op + " is not supported; tessera reads " +
                                   std::string(supported_operators));
            }
            if ((l.kind == layer_kind::batch_norm || l.kind == layer_kind::add) && relu_after(k) < nodes.size()) {
                const std::size_t r = relu_after(k);
                l.relu = true;
                l.nodes.push_back(r);
                l.output = nodes[r].outputs.front();
                m_fused[r] = 1;
            }
            m_activations.insert(l.output);
            m_layers.push_back(std::move(l));
        }
        if (m_layers.empty()) throw import_error("ONNX graph: no node reads its input '" + m_input + "'");
        m_folded = conv_bias && !batch_norms;
        // The last layer (by the graph's order) that reads each tensor's bytes.
        for (std::size_t l = 0; l < m_layers.size(); ++l)
            for (const auto& i : m_layers[l].inputs) m_last_reader[root(i)] = l;
        // Tensors several layers read (views aside: they read nothing), and the first of them.
        for (std::size_t l = 0; l < m_layers.size(); ++l) {
            if (m_layers[l].kind == layer_kind::view) continue;
            std::set<std::string> read;
            for (const auto& i : m_layers[l].inputs) read.insert(root(i));
            for (const auto& t : read)
                if (++m_readers[t] == 1) m_forks.emplace(t, l);
        }
        for (auto it = m_forks.begin(); it != m_forks.end();)
            it = m_readers.at(it->first) > 1 ? std::next(it) : m_forks.erase(it);
        // The graph's output stays to the end; a tensor no layer reads is freed once written.
        for (std::size_t l = 0; l < m_layers.size(); ++l)
            m_last_reader.try_emplace(root(m_layers[l].output), l + 1 == m_layers.size() ? m_layers.size() : l);
        m_last_reader.try_emplace(m_input, 0);
    }

    /// Units: a new one starts after layer l wherever one tensor alone is written at or before l and
    /// read after it (and the next layer is not a view, which stays with what it views).
    void build_units() {
        std::map<std::string, std::size_t> written;  // root tensor -> the layer that writes it
        written[m_input] = 0;
        std::size_t first = 0;
        for (std::size_t l = 0; l < m_layers.size(); ++l) {
            if (m_layers[l].kind != layer_kind::view) written[m_layers[l].output] = l;
            if (l + 1 == m_layers.size()) break;
            if (m_layers[l + 1].kind == layer_kind::view) continue;
            std::size_t crossing = 0;
            for (const auto& [t, at] : written)
                if (at <= l && m_last_reader.at(t) > l) ++crossing;
            if (crossing == 1) {
                m_units.push_back({first, l + 1, {}});
                first = l + 1;
            }
        }
        m_units.push_back({first, m_layers.size(), {}});
        std::set<std::string> taken;
        for (auto& un : m_units) {
            std::string name = name_of(un);
            if (!taken.insert(name).second) {
                std::size_t k = 2;
                while (!taken.insert(name + "#" + std::to_string(k)).second) ++k;
                name += "#" + std::to_string(k);
            }
            un.name = std::move(name);
        }
    }

    /// The module path a node's name gives ("/layer3/layer3.8/conv1/Conv": layer3, layer3.8, conv1).
    [[nodiscard]] static std::vector<std::string> module_path(const std::string& name) {
        std::vector<std::string> parts;
        std::size_t start = 0;
        while (start <= name.size()) {
            const std::size_t end = std::min(name.find('/', start), name.size());
            if (end > start) parts.push_back(name.substr(start, end - start));
            start = end + 1;
        }
        if (!parts.empty()) parts.pop_back();  // the operator's own name
        return parts;
    }
    /// A unit's name: the module path its nodes share, else its first node's, else that node's name.
    [[nodiscard]] std::string name_of(const unit& un) const {
        const std::string& first = m_graph.nodes[m_layers[un.first].nodes.front()].name;
        std::vector<std::string> common = module_path(first);
        for (std::size_t l = un.first; l < un.last; ++l)
            for (const std::size_t k : m_layers[l].nodes) {
                const auto path = module_path(m_graph.nodes[k].name);
                std::size_t i = 0;
                while (i < common.size() && i < path.size() && common[i] == path[i]) ++i;
                common.resize(i);
            }
        if (common.empty()) common = module_path(first);
        if (common.empty()) return first;
        // The path joined by dots, a module whose child repeats its name left out (torchvision's
        // "/layer3/layer3.8/" is layer3.8; "/encoder/layer.0/" is encoder.layer.0).
        std::string name;
        for (std::size_t i = 0; i < common.size(); ++i) {
            if (i + 1 < common.size() && common[i + 1].rfind(common[i] + ".", 0) == 0) continue;
            name += (name.empty() ? "" : ".") + common[i];
        }
        return name;
    }

    graph m_graph;
    shape_inference m_shapes;
    std::string m_input;
    std::int64_t m_batch = 1;
    std::set<std::string> m_weights, m_activations;
    std::map<std::string, std::string> m_alias;  // a view's output -> the tensor holding its bytes
    std::map<std::string, std::size_t> m_last_reader;
    std::map<std::string, std::vector<std::size_t>> m_node_readers;  // tensor -> the nodes that read it
    std::map<std::string, std::size_t> m_producer;                    // tensor -> the node that writes it
    std::vector<char> m_fused;                                        // per node: part of a layer already
    std::set<std::string> m_constants;  // tensors nodes make of weights and constants alone
    std::set<std::string> m_side;       // graph inputs beside the samples (token types)
    bool m_tokens = false;              // the samples are token ids
    std::string m_embedding_table;      // the table an embedding reads token ids from
    std::size_t m_tied = 0;             // elements of that table a later MatMul reads too (a tied decoder)
    std::map<std::string, std::size_t> m_readers;  // root tensor -> the layers (not views) that read it
    std::map<std::string, std::size_t> m_forks;    // root tensor read by several -> the first that reads it
    std::vector<imported_layer> m_layers;
    std::vector<unit> m_units;
    bool m_folded = false;
};

}  // namespace tessera::onnx
