#pragma once
// host_spec as a JSON file: a user's own host for the modelled clock (tessera-train --host FILE.json).
#include <cmath>
#include <cstddef>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>
#include <variant>

#include "tessera/emulator/host_spec.hpp"
#include "tessera/detail/file_bytes.hpp"
#include "tessera/report/json_object.hpp"

namespace tessera::emulator {

/// The most cores a host file may give (a bound, so that any count read converts to std::size_t).
inline constexpr std::size_t max_host_cores = std::size_t{1} << 20;

/// A host file that cannot be used: names the file's problem (unknown, missing or mistyped field).
class host_spec_error : public std::invalid_argument {
public:
    using std::invalid_argument::invalid_argument;
};

/// Every field of host_spec, each required, nothing else allowed (a misspelt field must not fall
/// back silently to the tutorial's figure):
/// @code
///   {"cores": 128,                        // host cores
///    "float_seconds_per_value": 1.327e-7, // load, transform and normalise one value into float
///    "eight_bit_seconds_per_value": 4.636e-8, // load and transform one value kept 8-bit (8-bit I/O)
///    "feed_seconds_per_byte": 3.993e-8,   // the training loop hands one byte of a batch to the device
///    "dispatch_seconds": 12.67e-3,        // the training loop's fixed cost per host call
///    "network_bandwidth": 12.5e9,         // host to host, bytes/s, one direction
///    "reduce_through_hosts": false}       // instances reduce over the hosts' network (true) or IPU-Links
/// @endcode
[[nodiscard]] host_spec host_spec_from_json(std::string_view text, std::string_view source = "host JSON");

/// host_spec_from_json of a file's contents; host_spec_error if it cannot be read.
[[nodiscard]] host_spec read_host_spec(const std::string& path);

/// The JSON form host_spec_from_json reads.
[[nodiscard]] std::string to_json(const host_spec& h);

// ---------------------------------------------------------------------------------------------
// implementation

inline host_spec host_spec_from_json(std::string_view text, std::string_view source) {
    const std::string where = "tessera::emulator::host_spec (" + std::string(source) + "): ";
    std::map<std::string, report::json_scalar> fields;
    try {
        fields = report::parse_flat_json_object(text);
    } catch (const report::json_parse_error& e) {
        throw host_spec_error(where + e.what());
    }
    host_spec h;
    const std::map<std::string, double*> numbers{{"float_seconds_per_value", &h.float_seconds_per_value},
                                                 {"eight_bit_seconds_per_value", &h.eight_bit_seconds_per_value},
                                                 {"feed_seconds_per_byte", &h.feed_seconds_per_byte},
                                                 {"dispatch_seconds", &h.dispatch_seconds},
                                                 {"network_bandwidth", &h.network_bandwidth}};
    const std::string all = "cores, float_seconds_per_value, eight_bit_seconds_per_value, feed_seconds_per_byte, "
                            "dispatch_seconds, network_bandwidth, reduce_through_hosts";
    for (const auto& [key, value] : fields) {
        if (key == "cores") {
            const auto* v = std::get_if<double>(&value);
            // Bounded before the cast (a double past size_t's range does not convert): 2^20 cores.
            if (!v || !(*v >= 1 && *v <= double(max_host_cores)) || *v != std::floor(*v))
                throw host_spec_error(where + "cores must be a whole number of at least 1 and at most " +
                                      std::to_string(max_host_cores));
            h.cores = static_cast<std::size_t>(*v);
        } else if (key == "reduce_through_hosts") {
            const auto* v = std::get_if<bool>(&value);
            if (!v) throw host_spec_error(where + "reduce_through_hosts must be true or false");
            h.reduce_through_hosts = *v;
        } else if (auto it = numbers.find(key); it != numbers.end()) {
            const auto* v = std::get_if<double>(&value);
            if (!v || !std::isfinite(*v)) throw host_spec_error(where + key + " must be a finite number");
            *it->second = *v;
        } else {
            throw host_spec_error(where + "unknown field '" + key + "' (the fields are " + all + ")");
        }
    }
    for (const char* key : {"cores", "float_seconds_per_value", "eight_bit_seconds_per_value", "feed_seconds_per_byte",
                            "dispatch_seconds", "network_bandwidth", "reduce_through_hosts"})
        if (!fields.contains(key)) throw host_spec_error(where + "the field '" + key + "' is missing (every field of " + all + " is required)");
    try {
        h.validate();
    } catch (const std::invalid_argument& e) {
        throw host_spec_error(where + e.what());
    }
    return h;
}

inline host_spec read_host_spec(const std::string& path) {
    std::vector<std::uint8_t> bytes;
    if (const auto failure = tessera::detail::read_whole_file(path, bytes))
        throw host_spec_error("tessera::emulator::read_host_spec: cannot read '" + path + "' (" +
                              tessera::detail::describe(*failure) + ")");
    return host_spec_from_json(std::string(bytes.begin(), bytes.end()), path);
}

inline std::string to_json(const host_spec& h) {
    std::ostringstream o;
    o.precision(17);
    o << "{\"cores\": " << h.cores << ", \"float_seconds_per_value\": " << h.float_seconds_per_value
      << ", \"eight_bit_seconds_per_value\": " << h.eight_bit_seconds_per_value
      << ", \"feed_seconds_per_byte\": " << h.feed_seconds_per_byte << ", \"dispatch_seconds\": " << h.dispatch_seconds
      << ", \"network_bandwidth\": " << h.network_bandwidth
      << ", \"reduce_through_hosts\": " << (h.reduce_through_hosts ? "true" : "false") << "}";
    return o.str();
}

}  // namespace tessera::emulator
