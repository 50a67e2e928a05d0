#pragma once
// Shape inference over an onnx::graph: every tensor's dimensions, with the export's shape arithmetic
// (Shape, Gather, Unsqueeze, Concat, Constant, Cast, Expand, Equal, ...) folded to constants so that
// a Reshape's target is known.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tessera/onnx/graph.hpp"

namespace tessera::onnx {

/// What shape inference knows of one tensor: its dimensions, and its values when they are a folded
/// integer constant.
struct tensor_value {
    std::vector<std::int64_t> dims;
    std::optional<std::vector<std::int64_t>> values;

    /// Its values' count (import_error when its dimensions overflow a 64-bit count).
    [[nodiscard]] std::int64_t elements() const {
        std::int64_t n = 1;
        for (const std::int64_t d : dims)
            if (d < 0 || __builtin_mul_overflow(n, d, &n))
                throw import_error("ONNX tensor of dimensions with " + std::to_string(d) + ": not a count of values");
        return n;
    }
};

namespace detail {

/// The most values a folded constant holds (shape arithmetic holds a few; a larger one is a tensor
/// tessera does not need the values of).
inline constexpr std::int64_t fold_limit = 4096;

[[nodiscard]] inline std::string dims_text(const std::vector<std::int64_t>& d) {
    std::string s = "[";
    for (std::size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
    return s + "]";
}

/// An axis in [-rank, rank) as an index (throws naming the node).
[[nodiscard]] inline std::size_t axis_of(std::int64_t axis, std::size_t rank, const node& n) {
    const std::int64_t r = static_cast<std::int64_t>(rank);
    if (axis < -r || axis >= r)
        throw import_error("ONNX node " + n.label() + ": axis " + std::to_string(axis) + " of a rank-" +
                           std::to_string(rank) + " tensor");
    return static_cast<std::size_t>(axis < 0 ? axis + r : axis);
}

/// Numpy broadcasting of two shapes.
[[nodiscard]] inline std::vector<std::int64_t> broadcast(const std::vector<std::int64_t>& a,
                                                        const std::vector<std::int64_t>& b, const node& n) {
    std::vector<std::int64_t> out(std::max(a.size(), b.size()));
    for (std::size_t i = 0; i < out.size(); ++i) {
        const std::int64_t x = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
        const std::int64_t y = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
        if (x != y && x != 1 && y != 1)
            throw import_error("ONNX node " + n.label() + ": shapes " + dims_text(a) + " and " + dims_text(b) +
                               " do not broadcast");
        out[i] = x == 1 ? y : x;
    }
    return out;
}

/// Element i of values `v` of shape `from` broadcast to shape `to` (row-major).
[[nodiscard]] inline std::int64_t broadcast_at(const std::vector<std::int64_t>& v, const std::vector<std::int64_t>& from,
                                               const std::vector<std::int64_t>& to, std::size_t i) {
    std::size_t index = 0, stride = 1;
    for (std::size_t k = to.size(); k-- > 0;) {
        const std::size_t coord = i % std::size_t(to[k]);
        i /= std::size_t(to[k]);
        const std::size_t j = k + from.size();
        if (j < to.size()) continue;
        const std::size_t fk = j - to.size();
        if (from[fk] != 1) index += coord * stride;
        stride *= std::size_t(from[fk]);
    }
    return v[index];
}

/// A pooled or convolved spatial size (ONNX's formula, ceil_mode and auto_pad included).
[[nodiscard]] inline std::int64_t window_out(std::int64_t in, std::int64_t k, std::int64_t stride, std::int64_t pad_sum,
                                             std::int64_t dilation, bool ceil_mode, const std::string& auto_pad,
                                             const node& n) {
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") return (in + stride - 1) / stride;
    const std::int64_t span = dilation * (k - 1) + 1;
    const std::int64_t room = in + (auto_pad == "VALID" ? 0 : pad_sum) - span;
    if (room < 0)
        throw import_error("ONNX node " + n.label() + ": a window of " + std::to_string(span) + " over " +
                           std::to_string(in) + " positions");
    return (ceil_mode ? (room + stride - 1) / stride : room / stride) + 1;
}

}  // namespace detail

/// Every tensor's shape in graph `g` whose data inputs have their declared shapes, a symbolic
/// dimension taken as `symbolic` (the batch: 1). Throws import_error naming the node whose shape
/// cannot be inferred, and the operators it does not know.
class shape_inference {
public:
    explicit shape_inference(const graph& g, std::int64_t symbolic = 1) : m_graph(&g) {
        for (const auto& [name, t] : g.initializers) set(name, t.dims, g.constants, symbolic);
        for (const auto& t : g.inputs) set(t.name, t.dims, g.constants, symbolic);
        for (const node& n : g.nodes) infer(n);
    }

    [[nodiscard]] const tensor_value& at(const std::string& name) const {
        const auto it = m_values.find(name);
        if (it == m_values.end()) throw import_error("ONNX graph: no tensor named '" + name + "'");
        return it->second;
    }
    [[nodiscard]] bool has(const std::string& name) const { return m_values.count(name) != 0; }
    [[nodiscard]] const std::vector<std::int64_t>& dims(const std::string& name) const { return at(name).dims; }

private:
    void set(const std::string& name, std::vector<std::int64_t> dims,
             const std::map<std::string, constant, std::less<>>& constants, std::int64_t symbolic) {
        for (auto& d : dims) {
            if (d < 0) d = symbolic;
            if (d > (std::int64_t{1} << 40))
                throw import_error("ONNX tensor '" + name + "': dimension " + std::to_string(d) + " (over 2^40)");
        }
        tensor_value v{std::move(dims), std::nullopt};
        if (const auto c = constants.find(name); c != constants.end()) v.values = c->second.values;
        m_values[name] = std::move(v);
    }
    [[nodiscard]] const tensor_value& in(const node& n, std::size_t i) const {
        if (i >= n.inputs.size() || n.inputs[i].empty())
            throw import_error("ONNX node " + n.label() + ": input " + std::to_string(i) + " is missing");
        const auto it = m_values.find(n.inputs[i]);
        if (it == m_values.end())
            throw import_error("ONNX node " + n.label() + ": input '" + n.inputs[i] +
                               "' is produced by no earlier node, initializer or graph input");
        return it->second;
    }
    [[nodiscard]] bool given(const node& n, std::size_t i) const { return i < n.inputs.size() && !n.inputs[i].empty(); }
    /// The folded values of input i, which the node needs to know its output's shape.
    [[nodiscard]] const std::vector<std::int64_t>& constant_input(const node& n, std::size_t i, const char* what) const {
        const tensor_value& v = in(n, i);
        if (!v.values)
            throw import_error("ONNX node " + n.label() + ": its " + what + " ('" + n.inputs[i] +
                               "') is computed at run time; tessera needs it constant (export with fixed shapes)");
        return *v.values;
    }
    void out(const node& n, std::size_t i, tensor_value v) {
        if (i < n.outputs.size() && !n.outputs[i].empty()) m_values[n.outputs[i]] = std::move(v);
    }

    void infer(const node& n);
    /// A 2-D window's attributes: two positive kernel sizes, strides and dilations, four pads not negative.
    static void check_window(const node& n, const std::vector<std::int64_t>& k, const std::vector<std::int64_t>& s,
                             const std::vector<std::int64_t>& p, const std::vector<std::int64_t>& d) {
        const auto positive = [](const std::vector<std::int64_t>& v, std::size_t size, std::int64_t least) {
            return v.size() == size &&
                   std::all_of(v.begin(), v.end(), [&](std::int64_t x) { return x >= least && x <= (std::int64_t{1} << 31); });
        };
        if (!positive(k, 2, 1) || !positive(s, 2, 1) || !positive(d, 2, 1) || !positive(p, 4, 0))
            throw import_error("ONNX node " + n.label() + ": a 2-D window of kernel_shape " + detail::dims_text(k) +
                               ", strides " + detail::dims_text(s) + ", pads " + detail::dims_text(p) + " and dilations " +
                               detail::dims_text(d));
    }

    const graph* m_graph;
    std::map<std::string, tensor_value> m_values;
};

inline void shape_inference::infer(const node& n) {
    using detail::axis_of;
    using detail::dims_text;
    const std::string& op = n.op;
    if (!n.domain.empty() && n.domain != "ai.onnx")
        throw import_error("ONNX node " + n.label() + ": operator domain '" + n.domain + "' (tessera reads the default one)");
    for (const auto& a : n.attributes)
        if (a.has_graph)
            throw import_error("ONNX node " + n.label() + ": a subgraph (control flow), which tessera does not price");
    auto same = [&](std::size_t from = 0) {
        tensor_value v = in(n, from);
        out(n, 0, std::move(v));
    };
    if (op == "Constant") {
        const attribute* a = n.find("value");
        if (a == nullptr || !a->has_tensor)
            throw import_error("ONNX node " + n.label() + ": a Constant without a tensor 'value' (value_* forms unsupported)");
        tensor_value v{a->tensor_dims, std::nullopt};
        if (a->tensor) v.values = a->tensor->values;
        out(n, 0, std::move(v));
    } else if (op == "Identity" || op == "Relu" || op == "Sigmoid" || op == "Tanh" || op == "Erf" || op == "Sqrt" ||
               op == "Neg" || op == "Reciprocal" || op == "Softmax" || op == "LogSoftmax" || op == "Exp" ||
               op == "LeakyRelu" || op == "Clip" || op == "Gelu" || op == "Abs") {
        same();
    } else if (op == "Cast") {
        same();
    } else if (op == "Dropout") {
        same();
        tensor_value mask = in(n, 0);
        mask.values.reset();
        out(n, 1, std::move(mask));
    } else if (op == "BatchNormalization" || op == "LayerNormalization") {
        same();
        const auto& x = in(n, 0).dims;
        if (op == "BatchNormalization") {
            if (x.size() < 2) throw import_error("ONNX node " + n.label() + ": input " + dims_text(x) + " has no channels");
            for (std::size_t i = 1; i < n.outputs.size(); ++i) out(n, i, {{x[1]}, std::nullopt});
        } else {
            const std::size_t axis = axis_of(n.integer("axis", -1), x.size(), n);
            std::vector<std::int64_t> stat(x.begin(), x.begin() + std::ptrdiff_t(axis));
            stat.resize(x.size(), 1);
            for (std::size_t i = 1; i < n.outputs.size(); ++i) out(n, i, {stat, std::nullopt});
        }
    } else if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow" || op == "Equal" ||
               op == "Less" || op == "Greater" || op == "And" || op == "Or") {
        const tensor_value &a = in(n, 0), &b = in(n, 1);
        tensor_value v{detail::broadcast(a.dims, b.dims, n), std::nullopt};
        if (a.values && b.values && op != "Pow" && v.elements() <= detail::fold_limit) {
            std::vector<std::int64_t> r(std::size_t(v.elements()));
            for (std::size_t i = 0; i < r.size(); ++i) {
                const std::int64_t x = detail::broadcast_at(*a.values, a.dims, v.dims, i);
                const std::int64_t y = detail::broadcast_at(*b.values, b.dims, v.dims, i);
                r[i] = op == "Add" ? x + y : op == "Sub" ? x - y : op == "Mul" ? x * y
                     : op == "Div" ? (y != 0 ? x / y : 0) : op == "Equal" ? x == y : op == "Less" ? x < y
                     : op == "Greater" ? x > y : op == "And" ? (x && y) : (x || y);
            }
            v.values = std::move(r);
        }
        out(n, 0, std::move(v));
    } else if (op == "Where") {
        const tensor_value &c = in(n, 0), &a = in(n, 1), &b = in(n, 2);
        tensor_value v{detail::broadcast(detail::broadcast(c.dims, a.dims, n), b.dims, n), std::nullopt};
        if (c.values && a.values && b.values && v.elements() <= detail::fold_limit) {
            std::vector<std::int64_t> r(std::size_t(v.elements()));
            for (std::size_t i = 0; i < r.size(); ++i)
                r[i] = detail::broadcast_at(*c.values, c.dims, v.dims, i) ? detail::broadcast_at(*a.values, a.dims, v.dims, i)
                                                                          : detail::broadcast_at(*b.values, b.dims, v.dims, i);
            v.values = std::move(r);
        }
        out(n, 0, std::move(v));
    } else if (op == "Conv") {
        const auto &x = in(n, 0).dims, &w = in(n, 1).dims;
        if (x.size() != 4 || w.size() != 4)
            throw import_error("ONNX node " + n.label() + ": a 2-D convolution needs rank-4 input and weights, got " +
                               dims_text(x) + " and " + dims_text(w));
        const auto k = n.integers("kernel_shape", {w[2], w[3]});
        const auto s = n.integers("strides", {1, 1}), d = n.integers("dilations", {1, 1});
        const auto p = n.integers("pads", {0, 0, 0, 0});
        check_window(n, k, s, p, d);
        if (k[0] != w[2] || k[1] != w[3])
            throw import_error("ONNX node " + n.label() + ": kernel_shape " + dims_text(k) + " of weights " + dims_text(w));
        const std::string pad = n.find("auto_pad") ? n.find("auto_pad")->text : "NOTSET";
        out(n, 0, {{x[0], w[0], detail::window_out(x[2], k[0], s[0], p[0] + p[2], d[0], false, pad, n),
                    detail::window_out(x[3], k[1], s[1], p[1] + p[3], d[1], false, pad, n)}, std::nullopt});
    } else if (op == "MaxPool" || op == "AveragePool") {
        const auto& x = in(n, 0).dims;
        if (x.size() != 4) throw import_error("ONNX node " + n.label() + ": a 2-D pooling needs a rank-4 input, got " + dims_text(x));
        const auto k = n.integers("kernel_shape");
        if (k.size() != 2) throw import_error("ONNX node " + n.label() + ": kernel_shape " + dims_text(k) + " is not 2-D");
        const auto s = n.integers("strides", {1, 1}), p = n.integers("pads", {0, 0, 0, 0});
        const auto d = n.integers("dilations", {1, 1});
        check_window(n, k, s, p, d);
        const bool ceil = n.integer("ceil_mode", 0) != 0;
        const std::string pad = n.find("auto_pad") ? n.find("auto_pad")->text : "NOTSET";
        out(n, 0, {{x[0], x[1], detail::window_out(x[2], k[0], s[0], p[0] + p[2], d[0], ceil, pad, n),
                    detail::window_out(x[3], k[1], s[1], p[1] + p[3], d[1], ceil, pad, n)}, std::nullopt});
    } else if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
        auto x = in(n, 0).dims;
        for (std::size_t i = 2; i < x.size(); ++i) x[i] = 1;
        out(n, 0, {x, std::nullopt});
    } else if (op == "Flatten") {
        const auto& x = in(n, 0).dims;
        const std::int64_t axis = n.integer("axis", 1);
        const std::size_t a = axis == std::int64_t(x.size()) ? x.size() : axis_of(axis, x.size(), n);
        const auto prod = [&](std::size_t from, std::size_t to) {
            return std::accumulate(x.begin() + std::ptrdiff_t(from), x.begin() + std::ptrdiff_t(to), std::int64_t{1},
                                   std::multiplies<>());
        };
        tensor_value v{{prod(0, a), prod(a, x.size())}, in(n, 0).values};
        out(n, 0, std::move(v));
    } else if (op == "Gemm") {
        const auto &a = in(n, 0).dims, &b = in(n, 1).dims;
        if (a.size() != 2 || b.size() != 2)
            throw import_error("ONNX node " + n.label() + ": Gemm needs rank-2 operands, got " + dims_text(a) + " and " + dims_text(b));
        const bool ta = n.integer("transA", 0) != 0, tb = n.integer("transB", 0) != 0;
        const std::int64_t k1 = ta ? a[0] : a[1], k2 = tb ? b[1] : b[0];
        if (k1 != k2)
            throw import_error("ONNX node " + n.label() + ": inner dimensions " + std::to_string(k1) + " and " +
                               std::to_string(k2) + " differ");
        out(n, 0, {{ta ? a[1] : a[0], tb ? b[0] : b[1]}, std::nullopt});
    } else if (op == "MatMul") {
        auto a = in(n, 0).dims, b = in(n, 1).dims;
        if (a.empty() || b.empty()) throw import_error("ONNX node " + n.label() + ": MatMul of a scalar");
        const bool va = a.size() == 1, vb = b.size() == 1;
        if (va) a.insert(a.begin(), 1);
        if (vb) b.push_back(1);
        if (a.back() != b[b.size() - 2])
            throw import_error("ONNX node " + n.label() + ": inner dimensions of " + dims_text(in(n, 0).dims) + " and " +
                               dims_text(in(n, 1).dims) + " differ");
        std::vector<std::int64_t> batch = detail::broadcast(std::vector<std::int64_t>(a.begin(), a.end() - 2),
                                                           std::vector<std::int64_t>(b.begin(), b.end() - 2), n);
        if (!va) batch.push_back(a[a.size() - 2]);
        if (!vb) batch.push_back(b.back());
        out(n, 0, {batch, std::nullopt});
    } else if (op == "Shape") {
        const auto& x = in(n, 0).dims;
        const std::int64_t r = std::int64_t(x.size());
        std::int64_t start = n.integer("start", 0), end = n.integer("end", r);
        start = std::clamp(start < 0 ? start + r : start, std::int64_t{0}, r);
        end = std::clamp(end < 0 ? end + r : end, std::int64_t{0}, r);
        std::vector<std::int64_t> v(x.begin() + start, x.begin() + std::max(start, end));
        out(n, 0, {{std::int64_t(v.size())}, v});
    } else if (op == "Size") {
        out(n, 0, {{}, std::vector<std::int64_t>{in(n, 0).elements()}});
    } else if (op == "Gather") {
        const tensor_value &data = in(n, 0), &idx = in(n, 1);
        const std::size_t axis = axis_of(n.integer("axis", 0), data.dims.size(), n);
        std::vector<std::int64_t> d(data.dims.begin(), data.dims.begin() + std::ptrdiff_t(axis));
        d.insert(d.end(), idx.dims.begin(), idx.dims.end());
        d.insert(d.end(), data.dims.begin() + std::ptrdiff_t(axis) + 1, data.dims.end());
        tensor_value v{d, std::nullopt};
        if (data.values && idx.values && data.dims.size() == 1) {
            std::vector<std::int64_t> r;
            for (std::int64_t i : *idx.values) {
                if (i < 0) i += data.dims[0];
                if (i < 0 || i >= data.dims[0])
                    throw import_error("ONNX node " + n.label() + ": index " + std::to_string(i) + " outside " +
                                       dims_text(data.dims));
                r.push_back((*data.values)[std::size_t(i)]);
            }
            v.values = std::move(r);
        }
        out(n, 0, std::move(v));
    } else if (op == "Unsqueeze" || op == "Squeeze") {
        const tensor_value& x = in(n, 0);
        std::vector<std::int64_t> axes = given(n, 1) ? constant_input(n, 1, "axes") : n.integers("axes");
        std::vector<std::int64_t> d = x.dims;
        if (op == "Unsqueeze") {
            const std::size_t rank = d.size() + axes.size();
            std::vector<std::size_t> at;
            for (const auto a : axes) at.push_back(axis_of(a, rank, n));
            std::sort(at.begin(), at.end());
            for (const auto a : at) d.insert(d.begin() + std::ptrdiff_t(a), 1);
        } else {
            std::vector<std::size_t> at;
            if (axes.empty())
                for (std::size_t i = 0; i < d.size(); ++i) {
                    if (d[i] == 1) at.push_back(i);
                }
            else
                for (const auto a : axes) at.push_back(axis_of(a, d.size(), n));
            std::sort(at.rbegin(), at.rend());
            for (const auto a : at) {
                if (d[a] != 1)
                    throw import_error("ONNX node " + n.label() + ": squeezes axis " + std::to_string(a) + " of " +
                                       dims_text(x.dims) + ", which is not 1");
                d.erase(d.begin() + std::ptrdiff_t(a));
            }
        }
        out(n, 0, {d, x.values});
    } else if (op == "Concat") {
        const std::size_t rank = in(n, 0).dims.size();
        const std::size_t axis = axis_of(n.integer("axis", 0), rank, n);
        std::vector<std::int64_t> d = in(n, 0).dims;
        d[axis] = 0;
        bool folded = true;
        std::vector<std::int64_t> values;
        for (std::size_t i = 0; i < n.inputs.size(); ++i) {
            const tensor_value& x = in(n, i);
            if (x.dims.size() != rank)
                throw import_error("ONNX node " + n.label() + ": concatenates " + dims_text(x.dims) + " to rank " +
                                   std::to_string(rank));
            d[axis] += x.dims[axis];
            if (x.values && rank == 1) values.insert(values.end(), x.values->begin(), x.values->end());
            else folded = false;
        }
        tensor_value v{d, std::nullopt};
        if (folded) v.values = std::move(values);
        out(n, 0, std::move(v));
    } else if (op == "Reshape") {
        const tensor_value& x = in(n, 0);
        const auto& target = constant_input(n, 1, "target shape");
        std::vector<std::int64_t> d;
        std::int64_t known = 1, infer = -1;
        const bool allowzero = n.integer("allowzero", 0) != 0;
        for (std::size_t i = 0; i < target.size(); ++i) {
            std::int64_t t = target[i];
            if (t == 0 && !allowzero) {
                if (i >= x.dims.size())
                    throw import_error("ONNX node " + n.label() + ": target " + dims_text(target) + " copies dimension " +
                                       std::to_string(i) + " of " + dims_text(x.dims));
                t = x.dims[i];
            }
            if (t < -1)
                throw import_error("ONNX node " + n.label() + ": target " + dims_text(target) + " has dimension " +
                                   std::to_string(t));
            if (t == -1) {
                if (infer >= 0) throw import_error("ONNX node " + n.label() + ": target " + dims_text(target) + " has two -1");
                infer = std::int64_t(i);
            } else {
                known *= t;
            }
            d.push_back(t);
        }
        if (infer >= 0) {
            if (known == 0 || x.elements() % known != 0)
                throw import_error("ONNX node " + n.label() + ": " + dims_text(x.dims) + " cannot be reshaped to " +
                                   dims_text(target));
            d[std::size_t(infer)] = x.elements() / known;
        }
        tensor_value v{d, x.values};
        if (v.elements() != x.elements())
            throw import_error("ONNX node " + n.label() + ": reshapes " + dims_text(x.dims) + " (" +
                               std::to_string(x.elements()) + " values) to " + dims_text(d));
        out(n, 0, std::move(v));
    } else if (op == "Transpose") {
        const auto& x = in(n, 0).dims;
        std::vector<std::int64_t> perm = n.integers("perm");
        if (perm.empty())
            for (std::size_t i = x.size(); i-- > 0;) perm.push_back(std::int64_t(i));
        if (perm.size() != x.size())
            throw import_error("ONNX node " + n.label() + ": perm " + dims_text(perm) + " for " + dims_text(x));
        std::vector<std::int64_t> d;
        for (const auto p : perm) d.push_back(x[axis_of(p, x.size(), n)]);
        out(n, 0, {d, std::nullopt});
    } else if (op == "Slice") {
        const tensor_value& x = in(n, 0);
        const auto& starts = constant_input(n, 1, "starts");
        const auto& ends = constant_input(n, 2, "ends");
        std::vector<std::int64_t> axes, steps(starts.size(), 1);
        if (given(n, 3)) axes = constant_input(n, 3, "axes");
        else
            for (std::size_t i = 0; i < starts.size(); ++i) axes.push_back(std::int64_t(i));
        if (given(n, 4)) steps = constant_input(n, 4, "steps");
        std::vector<std::int64_t> d = x.dims;
        std::vector<std::int64_t> first(d.size(), 0), step(d.size(), 1);
        for (std::size_t i = 0; i < axes.size(); ++i) {
            const std::size_t a = axis_of(axes[i], d.size(), n);
            const std::int64_t dim = x.dims[a], st = steps[i];
            if (st <= 0) throw import_error("ONNX node " + n.label() + ": step " + std::to_string(st) + " (tessera slices forward)");
            std::int64_t b = starts[i] < 0 ? starts[i] + dim : starts[i], e = ends[i] < 0 ? ends[i] + dim : ends[i];
            b = std::clamp(b, std::int64_t{0}, dim);
            e = std::clamp(e, std::int64_t{0}, dim);
            d[a] = e > b ? (e - b + st - 1) / st : 0;
            first[a] = b;
            step[a] = st;
        }
        tensor_value v{d, std::nullopt};
        if (x.values && x.dims.size() == 1) {
            std::vector<std::int64_t> r;
            for (std::int64_t i = 0; i < d[0]; ++i) r.push_back((*x.values)[std::size_t(first[0] + i * step[0])]);
            v.values = std::move(r);
        }
        out(n, 0, std::move(v));
    } else if (op == "Split") {
        const auto& x = in(n, 0).dims;
        const std::size_t axis = axis_of(n.integer("axis", 0), x.size(), n);
        std::vector<std::int64_t> parts = given(n, 1) ? constant_input(n, 1, "split") : n.integers("split");
        if (parts.empty()) parts.assign(n.outputs.size(), x[axis] / std::int64_t(n.outputs.size()));
        if (parts.size() != n.outputs.size() || std::accumulate(parts.begin(), parts.end(), std::int64_t{0}) != x[axis])
            throw import_error("ONNX node " + n.label() + ": split " + dims_text(parts) + " of axis " + std::to_string(axis) +
                               " of " + dims_text(x));
        for (std::size_t i = 0; i < parts.size(); ++i) {
            auto d = x;
            d[axis] = parts[i];
            out(n, i, {d, std::nullopt});
        }
    } else if (op == "Expand") {
        const tensor_value& x = in(n, 0);
        const auto& target = constant_input(n, 1, "shape");
        for (const auto t : target)
            if (t < 0) throw import_error("ONNX node " + n.label() + ": shape " + dims_text(target) + " has a negative dimension");
        tensor_value v{detail::broadcast(x.dims, target, n), std::nullopt};
        if (x.values && v.elements() <= detail::fold_limit) {
            std::vector<std::int64_t> r(std::size_t(v.elements()));
            for (std::size_t i = 0; i < r.size(); ++i) r[i] = detail::broadcast_at(*x.values, x.dims, v.dims, i);
            v.values = std::move(r);
        }
        out(n, 0, std::move(v));
    } else if (op == "ConstantOfShape") {
        const auto& target = constant_input(n, 0, "shape");
        for (const auto t : target)
            if (t < 0) throw import_error("ONNX node " + n.label() + ": shape " + dims_text(target) + " has a negative dimension");
        tensor_value v{target, std::nullopt};
        const attribute* a = n.find("value");
        const std::int64_t fill = a && a->tensor && !a->tensor->values.empty() ? a->tensor->values.front() : 0;
        if (v.elements() <= 4096) v.values = std::vector<std::int64_t>(std::size_t(v.elements()), fill);
        out(n, 0, std::move(v));
    } else if (op == "Range") {
        const auto &s = constant_input(n, 0, "start"), &e = constant_input(n, 1, "limit"), &d = constant_input(n, 2, "delta");
        if (s.size() != 1 || e.size() != 1 || d.size() != 1 || d[0] == 0)
            throw import_error("ONNX node " + n.label() + ": Range needs scalar start, limit and a nonzero delta");
        const double count = std::max(0.0, std::ceil((double(e[0]) - double(s[0])) / double(d[0])));
        if (count > double(detail::fold_limit)) {
            out(n, 0, {{std::int64_t(count)}, std::nullopt});
        } else {
            std::vector<std::int64_t> r;
            for (std::int64_t i = 0; i < std::int64_t(count); ++i) r.push_back(s[0] + i * d[0]);
            out(n, 0, {{std::int64_t(r.size())}, r});
        }
    } else if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax") {
        const auto& x = in(n, 0).dims;
        std::vector<std::int64_t> axes = n.integers("axes");
        if (given(n, 1)) axes = constant_input(n, 1, "axes");
        const bool keep = n.integer("keepdims", 1) != 0;
        std::vector<bool> reduced(x.size(), axes.empty());
        for (const auto a : axes) reduced[axis_of(a, x.size(), n)] = true;
        std::vector<std::int64_t> d;
        for (std::size_t i = 0; i < x.size(); ++i) {
            if (!reduced[i]) d.push_back(x[i]);
            else if (keep) d.push_back(1);
        }
        out(n, 0, {d, std::nullopt});
    } else {
        throw import_error("ONNX node " + n.label() + ": operator " + op + " is not supported; tessera reads " +
                           std::string(supported_operators));
    }
}

}  // namespace tessera::onnx
