#pragma once
// An ONNX graph as a unit network for dry runs and plans: each node, or a fused pair (a batch norm and
// its ReLU, a residual add and its ReLU), priced by the tessera layer that computes the same, and the
// graph cut into units wherever one tensor alone crosses. Shapes and costs only: it cannot run.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
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
#include "tessera/nn/conv2d.hpp"
#include "tessera/nn/cost.hpp"
#include "tessera/nn/layer.hpp"
#include "tessera/nn/linear.hpp"
#include "tessera/nn/pooling.hpp"
#include "tessera/nn/residual.hpp"
#include "tessera/onnx/graph.hpp"
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
};

/// One priced layer of an imported graph.
struct imported_layer {
    layer_kind kind = layer_kind::view;
    std::vector<std::size_t> nodes;   ///< the graph's nodes it stands for, in order
    std::vector<std::string> inputs;  ///< the activations it reads
    std::string output;               ///< the activation it writes
    bool relu = false;                ///< a batch norm or add with the ReLU after it fused
    bool bias = false;                ///< a convolution with a bias
    std::size_t in = 0, out = 0;      ///< channels (convolution, batch norm) or features (linear)
    kernels::window window{};         ///< convolution and pooling
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
    [[nodiscard]] std::size_t parameters() const { return cost(sample()).parameters; }

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
        }
        return {};
    }

    void find_data_input() {
        // Weights: what a node reads in a weight's place (a convolution's kernel and bias, a batch
        // norm's four vectors, a Gemm's second and third operands), whether initializers or graph
        // inputs (a file exported without its parameters declares them as inputs).
        for (const node& n : m_graph.nodes) {
            const auto mark = [&](std::size_t i) {
                if (i < n.inputs.size() && !n.inputs[i].empty()) m_weights.insert(n.inputs[i]);
            };
            if (n.op == "Conv") mark(1), mark(2);
            if (n.op == "BatchNormalization") mark(1), mark(2), mark(3), mark(4);
            if (n.op == "Gemm") mark(1), mark(2);
        }
        std::vector<std::string> data;
        for (const auto& t : m_graph.inputs)
            if (m_weights.count(t.name) == 0) data.push_back(t.name);
        if (data.size() != 1) {
            std::string names;
            for (const auto& d : data) names += (names.empty() ? "" : ", ") + d;
            throw import_error("ONNX graph: tessera reads graphs of one data input; this one has " +
                               std::to_string(data.size()) + (names.empty() ? "" : " (" + names + ")"));
        }
        m_input = data.front();
        const auto& d = m_shapes.dims(m_input);
        if (d.empty() || d[0] <= 0)
            throw import_error("ONNX graph: its input '" + m_input + "' of shape " + detail::dims_text(d) +
                               " has no batch dimension");
        m_batch = d[0];
        m_activations.insert(m_input);
    }

    [[nodiscard]] bool is_activation(const std::string& t) const { return m_activations.count(t) != 0; }

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
        std::map<std::string, std::vector<std::size_t>> readers;  // tensor -> nodes that read it
        for (std::size_t k = 0; k < nodes.size(); ++k)
            for (const auto& i : nodes[k].inputs)
                if (!i.empty()) readers[i].push_back(k);
        // The node after k that reads k's first output alone, when it is a Relu: fused into k.
        const auto relu_after = [&](std::size_t k) -> std::size_t {
            const auto it = readers.find(nodes[k].outputs.front());
            if (it == readers.end() || it->second.size() != 1) return nodes.size();
            const std::size_t r = it->second.front();
            return nodes[r].op == "Relu" ? r : nodes.size();
        };
        std::vector<char> fused(nodes.size(), 0);
        bool conv_bias = false, batch_norms = false;
        for (std::size_t k = 0; k < nodes.size(); ++k) {
            const node& n = nodes[k];
            if (fused[k]) continue;
            bool reads_activation = false;
            for (const auto& i : n.inputs) reads_activation = reads_activation || (!i.empty() && is_activation(i));
            // Shape arithmetic (every output a folded constant) and the weights' own preparation:
            // no pass on the IPU.
            bool folded = true;
            for (const auto& o : n.outputs) folded = folded && (o.empty() || m_shapes.at(o).values.has_value());
            if (!reads_activation || folded) continue;
            imported_layer l;
            l.nodes = {k};
            l.inputs = {n.inputs.front()};
            l.output = n.outputs.front();
            const auto& x = m_shapes.dims(n.inputs.front());
            if (!is_activation(n.inputs.front()))
                throw import_error("ONNX node " + n.label() + ": its first input '" + n.inputs.front() +
                                   "' is a constant and a later one an activation (tessera reads activations first)");
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
            } else if (n.op == "Add") {
                if (n.inputs.size() != 2 || !is_activation(n.inputs[1]))
                    throw import_error("ONNX node " + n.label() + ": Add of an activation and a constant ('" +
                                       n.inputs.back() + "'), which tessera does not price yet");
                if (m_shapes.dims(n.inputs[0]) != m_shapes.dims(n.inputs[1]))
                    throw import_error("ONNX node " + n.label() + ": adds " + detail::dims_text(m_shapes.dims(n.inputs[0])) +
                                       " and " + detail::dims_text(m_shapes.dims(n.inputs[1])) + " (tessera adds equal shapes)");
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
                fused[r] = 1;
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
    /// A unit's name: the last module its nodes share, else its first node's module, else that node's name.
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
        if (!common.empty()) return common.back();
        const auto own = module_path(first);
        return own.empty() ? first : own.back();
    }

    graph m_graph;
    shape_inference m_shapes;
    std::string m_input;
    std::int64_t m_batch = 1;
    std::set<std::string> m_weights, m_activations;
    std::map<std::string, std::string> m_alias;  // a view's output -> the tensor holding its bytes
    std::map<std::string, std::size_t> m_last_reader;
    std::map<std::string, std::size_t> m_readers;  // root tensor -> the layers (not views) that read it
    std::map<std::string, std::size_t> m_forks;    // root tensor read by several -> the first that reads it
    std::vector<imported_layer> m_layers;
    std::vector<unit> m_units;
    bool m_folded = false;
};

}  // namespace tessera::onnx
