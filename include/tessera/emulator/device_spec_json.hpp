#pragma once
// device_spec as a JSON file: a user's own IPU figures for the modelled clock (tessera-train --device FILE.json).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "tessera/detail/file_bytes.hpp"
#include "tessera/emulator/device_spec.hpp"
#include "tessera/report/json_object.hpp"

namespace tessera::emulator {

/// A device file that cannot be used: names the file's problem (unknown, missing or mistyped field).
class device_spec_error : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

/// Every field of device_spec, each required, nothing else allowed (a misspelt field must not fall
/// back silently to the GC200's figure): the counts (tiles, memory_per_tile, amp_*_channels_*,
/// conv_unit_pipeline_depth, worker_contexts, streaming_memory_capacity) whole numbers, the rest
/// finite numbers, and code_spec's fields as "code.<field>". to_json(device_spec) writes one:
/// @code
///   std::ofstream("bow.json") << emulator::to_json(emulator::bow_ipu());  // then edit it
///   const auto d = emulator::read_device_spec("bow.json");
/// @endcode
[[nodiscard]] device_spec device_spec_from_json(std::string_view text, std::string_view source = "device JSON");

/// device_spec_from_json of a file's contents; device_spec_error if it cannot be read.
[[nodiscard]] device_spec read_device_spec(const std::string& path);

/// The JSON form device_spec_from_json reads, every field.
[[nodiscard]] std::string to_json(const device_spec& d);

// ---------------------------------------------------------------------------------------------
// implementation

namespace detail {

/// The fields of `d`, by name: whole counts, and numbers.
struct device_fields {
    std::vector<std::pair<const char*, std::size_t*>> counts;
    std::vector<std::pair<const char*, double*>> numbers;
};

[[nodiscard]] inline device_fields fields_of(device_spec& d) {
    return {{{"tiles", &d.tiles},
             {"memory_per_tile", &d.memory_per_tile},
             {"amp_input_channels_fp16", &d.amp_input_channels_fp16},
             {"amp_output_channels_fp16", &d.amp_output_channels_fp16},
             {"amp_input_channels_fp32", &d.amp_input_channels_fp32},
             {"amp_output_channels_fp32", &d.amp_output_channels_fp32},
             {"conv_unit_pipeline_depth", &d.conv_unit_pipeline_depth},
             {"worker_contexts", &d.worker_contexts},
             {"streaming_memory_capacity", &d.streaming_memory_capacity}},
            {{"clock_hz", &d.clock_hz},
             {"fp16_flops", &d.fp16_flops},
             {"fp32_flops", &d.fp32_flops},
             {"amp_weight_load_bytes_per_cycle", &d.amp_weight_load_bytes_per_cycle},
             {"conv_vertex_overhead_cycles", &d.conv_vertex_overhead_cycles},
             {"amp_worker_overhead_cycles", &d.amp_worker_overhead_cycles},
             {"vector_bytes", &d.vector_bytes},
             {"elementwise_worker_overhead_cycles", &d.elementwise_worker_overhead_cycles},
             {"supervisor_overhead_cycles", &d.supervisor_overhead_cycles},
             {"sync_cycles", &d.sync_cycles},
             {"global_sync_latency_per_hop", &d.global_sync_latency_per_hop},
             {"memory_bandwidth", &d.memory_bandwidth},
             {"exchange_bandwidth", &d.exchange_bandwidth},
             {"pass_overhead_cycles", &d.pass_overhead_cycles},
             {"ipu_link_bandwidth", &d.ipu_link_bandwidth},
             {"host_link_bandwidth", &d.host_link_bandwidth},
             {"host_sync_latency", &d.host_sync_latency},
             {"streaming_memory_bandwidth", &d.streaming_memory_bandwidth},
             {"code.instruction_bytes", &d.code.instruction_bytes},
             {"code.exchange_instructions_per_message", &d.code.exchange_instructions_per_message},
             {"code.control_bytes_per_superstep", &d.code.control_bytes_per_superstep},
             {"code.contraction_instructions", &d.code.contraction_instructions},
             {"code.reduction_instructions", &d.code.reduction_instructions},
             {"code.elementwise_instructions", &d.code.elementwise_instructions},
             {"code.gather_instructions", &d.code.gather_instructions}}};
}

}  // namespace detail

inline device_spec device_spec_from_json(std::string_view text, std::string_view source) {
    const std::string where = "tessera::emulator::device_spec (" + std::string(source) + "): ";
    std::map<std::string, report::json_scalar> fields;
    try {
        fields = report::parse_flat_json_object(text);
    } catch (const report::json_parse_error& e) {
        throw device_spec_error(where + e.what());
    }
    device_spec d;
    const detail::device_fields all = detail::fields_of(d);
    std::string names;
    for (const auto& [name, _] : all.counts) names += (names.empty() ? "" : ", ") + std::string(name);
    for (const auto& [name, _] : all.numbers) names += ", " + std::string(name);
    const auto number = [&](const std::string& key) {
        const auto* v = std::get_if<double>(&fields.at(key));
        if (v == nullptr || !std::isfinite(*v)) throw device_spec_error(where + key + " must be a finite number");
        return *v;
    };
    for (const auto& entry : fields) {
        const std::string& key = entry.first;
        bool known = false;
        for (const auto& [name, at] : all.counts)
            if (key == name) {
                const double v = number(key);
                if (v < 0 || v > 9.0e15 || v != std::floor(v))
                    throw device_spec_error(where + key + " must be a whole number, got " + std::to_string(v));
                *at = static_cast<std::size_t>(v), known = true;
            }
        for (const auto& [name, at] : all.numbers)
            if (key == name) *at = number(key), known = true;
        if (!known) throw device_spec_error(where + "unknown field '" + key + "' (the fields are " + names + ")");
    }
    const auto require = [&](const char* key) {
        if (!fields.contains(key))
            throw device_spec_error(where + "the field '" + key + "' is missing (every field of device_spec is required: " +
                                    names + ")");
    };
    for (const auto& [name, _] : all.counts) require(name);
    for (const auto& [name, _] : all.numbers) require(name);
    for (const auto& [name, at] : all.numbers)
        if (std::string_view(name).starts_with("code.") && *at < 0)
            throw device_spec_error(where + name + " must not be negative, got " + std::to_string(*at));
    try {
        d.validate();
    } catch (const std::invalid_argument& e) {
        throw device_spec_error(where + e.what());
    }
    return d;
}

inline device_spec read_device_spec(const std::string& path) {
    std::vector<std::uint8_t> bytes;
    if (const auto failure = tessera::detail::read_whole_file(path, bytes))
        throw device_spec_error("tessera::emulator::read_device_spec: cannot read '" + path + "' (" +
                                tessera::detail::describe(*failure) + ")");
    return device_spec_from_json(std::string(bytes.begin(), bytes.end()), path);
}

inline std::string to_json(const device_spec& spec) {
    device_spec d = spec;
    const detail::device_fields all = detail::fields_of(d);
    std::ostringstream o;
    o.precision(17);
    o << "{";
    bool first = true;
    for (const auto& [name, at] : all.counts) o << (first ? "" : ",\n ") << '"' << name << "\": " << *at, first = false;
    for (const auto& [name, at] : all.numbers) o << ",\n \"" << name << "\": " << *at;
    o << "}\n";
    return o.str();
}

}  // namespace tessera::emulator
