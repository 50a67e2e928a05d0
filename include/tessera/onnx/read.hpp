#pragma once
// Reads an ONNX file (ModelProto) into an onnx::graph: shapes and small integer constants, never a
// weight's values. Needs Debian's libonnx-dev and libprotobuf-dev (CMake: tessera::onnx, defined
// where they are found); the rest of tessera never includes this header.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <onnx/onnx_pb.h>

#include "tessera/onnx/graph.hpp"

namespace tessera::onnx {

namespace detail {

/// Bytes of one element of ONNX data type `t` (0: a type tessera does not size, such as strings).
[[nodiscard]] constexpr std::size_t element_bytes(int t) noexcept {
    switch (t) {
        case 1: case 6: case 12: return 4;    // float, int32, uint32
        case 7: case 11: case 13: return 8;   // int64, double, uint64
        case 10: case 16: case 5: case 4: return 2;  // float16, bfloat16, int16, uint16
        case 2: case 3: case 9: return 1;     // uint8, int8, bool
        default: return 0;
    }
}

[[nodiscard]] inline bool is_integer_type(int t) noexcept { return t == 6 || t == 7 || t == 12 || t == 13 || t == 9; }

/// Elements of a tensor of dims `dims` (throws on a negative or overflowing count, naming `what`).
[[nodiscard]] inline std::uint64_t element_count(const std::vector<std::int64_t>& dims, const std::string& what) {
    std::uint64_t n = 1;
    for (const std::int64_t d : dims) {
        if (d < 0) throw import_error("ONNX tensor '" + what + "': dimension " + std::to_string(d) + " is negative");
        if (d != 0 && n > (std::uint64_t{1} << 62) / std::uint64_t(d))
            throw import_error("ONNX tensor '" + what + "': its dimensions overflow a 64-bit count");
        n *= std::uint64_t(d);
    }
    return n;
}

/// The integer values of tensor `t` when it is of an integer type and holds at most `limit`
/// elements (the values, checked against what the file holds), else its shape alone.
inline void read_tensor(const ::onnx::TensorProto& t, const std::filesystem::path& dir, declared_tensor& shape,
                        std::optional<constant>& values, std::optional<double>& scalar, std::size_t limit = 4096) {
    shape.name = t.name();
    shape.dims.assign(t.dims().begin(), t.dims().end());
    shape.element_type = t.data_type();
    const std::uint64_t count = element_count(shape.dims, t.name());
    const std::size_t width = element_bytes(t.data_type());
    // A declared tensor larger than what holds it is refused before anything is allocated.
    if (t.data_location() == ::onnx::TensorProto::EXTERNAL) {
        std::string location;
        std::uint64_t offset = 0, length = 0;
        for (const auto& kv : t.external_data()) {
            if (kv.key() == "location") location = kv.value();
            const auto number = [&] {
                std::uint64_t v = 0;
                const auto [end, ec] = std::from_chars(kv.value().data(), kv.value().data() + kv.value().size(), v);
                if (ec != std::errc() || end != kv.value().data() + kv.value().size())
                    throw import_error("ONNX tensor '" + t.name() + "': external data " + kv.key() + " '" + kv.value() +
                                       "' is not a count");
                return v;
            };
            if (kv.key() == "offset") offset = number();
            if (kv.key() == "length") length = number();
        }
        const std::filesystem::path file = dir / location;
        std::error_code ec;
        const std::uintmax_t size = std::filesystem::file_size(file, ec);
        if (ec) throw import_error("ONNX tensor '" + t.name() + "': its external data file " + file.string() +
                                   " cannot be read (" + ec.message() + ")");
        const std::uint64_t need = width != 0 ? count * width : length;
        if (offset > size || need > size - offset)
            throw import_error("ONNX tensor '" + t.name() + "' declares " + std::to_string(need) + " bytes at offset " +
                               std::to_string(offset) + " of " + file.string() + ", which holds " + std::to_string(size));
        return;  // never read: the dry run needs its shape alone
    }
    std::uint64_t held = t.raw_data().size();
    if (held == 0) {
        held = std::uint64_t(t.float_data_size()) * 4 + std::uint64_t(t.int32_data_size()) * 4 +
               std::uint64_t(t.int64_data_size()) * 8 + std::uint64_t(t.double_data_size()) * 8 +
               std::uint64_t(t.uint64_data_size()) * 8;
        // int32_data holds 16- and 8-bit types one element per int32
        if (width != 0 && width < 4 && t.int32_data_size() > 0) held = std::uint64_t(t.int32_data_size()) * width;
    }
    if (width != 0 && count * width != held)
        throw import_error("ONNX tensor '" + t.name() + "' declares " + std::to_string(count) + " elements (" +
                           std::to_string(count * width) + " bytes) and holds " + std::to_string(held) + " bytes");
    if ((t.data_type() == 1 || t.data_type() == 11) && count == 1) {  // a float or double scalar
        if (t.data_type() == 1) {
            float v = t.float_data_size() > 0 ? t.float_data(0) : 0.0f;
            if (!t.raw_data().empty()) std::memcpy(&v, t.raw_data().data(), sizeof v);
            scalar = v;
        } else {
            double v = t.double_data_size() > 0 ? t.double_data(0) : 0.0;
            if (!t.raw_data().empty()) std::memcpy(&v, t.raw_data().data(), sizeof v);
            scalar = v;
        }
    }
    if (!is_integer_type(t.data_type()) || count > limit) return;
    constant c{shape.dims, {}};
    c.values.reserve(count);
    if (!t.raw_data().empty()) {
        const std::string& raw = t.raw_data();
        for (std::uint64_t i = 0; i < count; ++i) {
            if (width == 8) {
                std::int64_t v;
                std::memcpy(&v, raw.data() + i * 8, 8);
                c.values.push_back(v);
            } else if (width == 4) {
                std::int32_t v;
                std::memcpy(&v, raw.data() + i * 4, 4);
                c.values.push_back(t.data_type() == 12 ? std::int64_t(std::uint32_t(v)) : v);
            } else {
                c.values.push_back(static_cast<unsigned char>(raw[i]));
            }
        }
    } else if (t.int64_data_size() > 0) {
        c.values.assign(t.int64_data().begin(), t.int64_data().end());
    } else if (t.int32_data_size() > 0) {
        c.values.assign(t.int32_data().begin(), t.int32_data().end());
    } else if (t.uint64_data_size() > 0) {
        for (const auto v : t.uint64_data()) c.values.push_back(static_cast<std::int64_t>(v));
    }
    values = std::move(c);
}

[[nodiscard]] inline declared_tensor declared(const ::onnx::ValueInfoProto& v) {
    declared_tensor d;
    d.name = v.name();
    if (!v.type().has_tensor_type()) return d;
    d.element_type = v.type().tensor_type().elem_type();
    if (!v.type().tensor_type().has_shape()) return d;
    for (const auto& dim : v.type().tensor_type().shape().dim())
        d.dims.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
    return d;
}

}  // namespace detail

/// The graph of a parsed model read from `path` (external data is found beside it). Throws
/// import_error as read_model does.
[[nodiscard]] inline graph graph_of(const ::onnx::ModelProto& model, const std::filesystem::path& path) {
    if (!model.has_graph() || model.graph().node_size() == 0)
        throw import_error("ONNX file " + path.string() + ": the model has no graph (no nodes)");
    graph g;
    g.producer = model.producer_name() + (model.producer_version().empty() ? "" : " " + model.producer_version());
    for (const auto& o : model.opset_import())
        if (o.domain().empty() || o.domain() == "ai.onnx") g.opset = o.version();
    if (g.opset < 11 || g.opset > 17)
        throw import_error("ONNX file " + path.string() + ": opset " + std::to_string(g.opset) +
                           " (tessera reads opsets 11 to 17, those PyTorch 1.13 exports)");
    const std::filesystem::path dir = path.parent_path();
    const auto& gp = model.graph();
    for (const auto& t : gp.initializer()) {
        declared_tensor d;
        std::optional<constant> values;
        std::optional<double> scalar;
        detail::read_tensor(t, dir, d, values, scalar);
        if (values) g.constants.emplace(t.name(), std::move(*values));
        if (scalar) g.scalars.emplace(t.name(), *scalar);
        g.initializers.emplace(t.name(), std::move(d));
    }
    for (const auto& v : gp.input())
        if (!g.is_initializer(v.name())) g.inputs.push_back(detail::declared(v));
    for (const auto& v : gp.output()) g.outputs.push_back(detail::declared(v));
    for (const auto& v : gp.value_info()) g.value_info.emplace(v.name(), detail::declared(v));
    g.nodes.reserve(static_cast<std::size_t>(gp.node_size()));
    for (const auto& n : gp.node()) {
        node x;
        x.name = n.name().empty() ? n.op_type() + "_" + std::to_string(g.nodes.size()) : n.name();
        x.op = n.op_type();
        x.domain = n.domain();
        x.inputs.assign(n.input().begin(), n.input().end());
        x.outputs.assign(n.output().begin(), n.output().end());
        for (const auto& a : n.attribute()) {
            attribute y;
            y.name = a.name();
            switch (a.type()) {
                case ::onnx::AttributeProto::INT: y.integer = a.i(); break;
                case ::onnx::AttributeProto::FLOAT: y.floating = a.f(); break;
                case ::onnx::AttributeProto::INTS: y.integers.assign(a.ints().begin(), a.ints().end()); break;
                case ::onnx::AttributeProto::FLOATS: y.floats.assign(a.floats().begin(), a.floats().end()); break;
                case ::onnx::AttributeProto::STRING: y.text = a.s(); break;
                case ::onnx::AttributeProto::TENSOR: {
                    declared_tensor d;
                    std::optional<constant> values;
                    std::optional<double> scalar;
                    detail::read_tensor(a.t(), dir, d, values, scalar);
                    if (scalar && n.op_type() == "Constant" && n.output_size() > 0) g.scalars.emplace(n.output(0), *scalar);
                    y.has_tensor = true;
                    y.tensor_dims = d.dims;
                    y.tensor = std::move(values);
                    break;
                }
                case ::onnx::AttributeProto::GRAPH:
                case ::onnx::AttributeProto::GRAPHS: y.has_graph = true; break;
                default: break;
            }
            x.attributes.push_back(std::move(y));
        }
        g.nodes.push_back(std::move(x));
    }
    return g;
}

/// The graph of the ONNX file at `path`. Throws import_error naming the file when it is not an ONNX
/// model (a malformed or truncated file), when it has no graph, when its default opset is not one
/// of 11 to 17 (what PyTorch 1.13 exports), or when a tensor declares more data than holds it;
/// memory is bounded by the file's size, never by a declared one.
[[nodiscard]] inline graph read_model(const std::filesystem::path& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw import_error("ONNX file " + path.string() + ": cannot open (" + std::strerror(errno) + ")");
    ::onnx::ModelProto model;
    bool parsed = false;
    {
        google::protobuf::io::FileInputStream in(fd);
        in.SetCloseOnDelete(true);
        parsed = model.ParseFromZeroCopyStream(&in) && in.GetErrno() == 0;
    }
    if (!parsed)
        throw import_error("ONNX file " + path.string() + ": not an ONNX model, or truncated (its protobuf does not parse)");
    return graph_of(model, path);
}

}  // namespace tessera::onnx
