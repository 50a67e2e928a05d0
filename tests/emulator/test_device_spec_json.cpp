// device_spec as JSON: every field read and written, unknown, missing, mistyped, non-whole and
// non-finite fields refused by name; the named presets round-trip exactly.
#include <string>

#include <catch2/catch.hpp>

#include "tessera/emulator/device_presets.hpp"
#include "tessera/emulator/device_spec_json.hpp"

namespace test_device_spec_json {

namespace emu = tessera::emulator;

namespace {
/// Every field of two specs, compared one by one (not through to_json, which is under test).
void check_same(const emu::device_spec& a, const emu::device_spec& b) {
    CHECK(a.tiles == b.tiles);
    CHECK(a.memory_per_tile == b.memory_per_tile);
    CHECK(a.clock_hz == b.clock_hz);
    CHECK(a.fp16_flops == b.fp16_flops);
    CHECK(a.fp32_flops == b.fp32_flops);
    CHECK(a.amp_input_channels_fp16 == b.amp_input_channels_fp16);
    CHECK(a.amp_output_channels_fp16 == b.amp_output_channels_fp16);
    CHECK(a.amp_input_channels_fp32 == b.amp_input_channels_fp32);
    CHECK(a.amp_output_channels_fp32 == b.amp_output_channels_fp32);
    CHECK(a.conv_unit_pipeline_depth == b.conv_unit_pipeline_depth);
    CHECK(a.amp_weight_load_bytes_per_cycle == b.amp_weight_load_bytes_per_cycle);
    CHECK(a.conv_vertex_overhead_cycles == b.conv_vertex_overhead_cycles);
    CHECK(a.amp_worker_overhead_cycles == b.amp_worker_overhead_cycles);
    CHECK(a.worker_contexts == b.worker_contexts);
    CHECK(a.vector_bytes == b.vector_bytes);
    CHECK(a.elementwise_worker_overhead_cycles == b.elementwise_worker_overhead_cycles);
    CHECK(a.supervisor_overhead_cycles == b.supervisor_overhead_cycles);
    CHECK(a.sync_cycles == b.sync_cycles);
    CHECK(a.global_sync_latency_per_hop == b.global_sync_latency_per_hop);
    CHECK(a.memory_bandwidth == b.memory_bandwidth);
    CHECK(a.exchange_bandwidth == b.exchange_bandwidth);
    CHECK(a.pass_overhead_cycles == b.pass_overhead_cycles);
    CHECK(a.ipu_link_bandwidth == b.ipu_link_bandwidth);
    CHECK(a.host_link_bandwidth == b.host_link_bandwidth);
    CHECK(a.host_sync_latency == b.host_sync_latency);
    CHECK(a.streaming_memory_capacity == b.streaming_memory_capacity);
    CHECK(a.streaming_memory_bandwidth == b.streaming_memory_bandwidth);
    CHECK(a.code.instruction_bytes == b.code.instruction_bytes);
    CHECK(a.code.exchange_instructions_per_message == b.code.exchange_instructions_per_message);
    CHECK(a.code.control_bytes_per_superstep == b.code.control_bytes_per_superstep);
    CHECK(a.code.contraction_instructions == b.code.contraction_instructions);
    CHECK(a.code.reduction_instructions == b.code.reduction_instructions);
    CHECK(a.code.elementwise_instructions == b.code.elementwise_instructions);
    CHECK(a.code.gather_instructions == b.code.gather_instructions);
}

/// `text` with the first `from` replaced by `to`.
std::string replaced(std::string text, const std::string& from, const std::string& to) {
    const auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    return text.replace(at, from.size(), to);
}
}  // namespace

TEST_CASE("a device file round-trips the named IPUs exactly", "[emulator][device]") {
    for (const char* name : {"gc200", "bow", "c600"}) {
        INFO(name);
        const emu::device_spec preset = emu::ipu_named(name);
        check_same(emu::device_spec_from_json(emu::to_json(preset)), preset);
    }
}

TEST_CASE("a device file sets each field it names", "[emulator][device]") {
    const std::string gc200 = emu::to_json(emu::gc200_ipu());
    const emu::device_spec d = emu::device_spec_from_json(
        replaced(replaced(replaced(gc200, "\"tiles\": 1472", "\"tiles\": 1216"), "\"clock_hz\": 1330000000",
                          "\"clock_hz\": 1.6e9"),
                 "\"code.gather_instructions\": 537", "\"code.gather_instructions\": 600"));
    emu::device_spec expected = emu::gc200_ipu();
    expected.tiles = 1216, expected.clock_hz = 1.6e9, expected.code.gather_instructions = 600;
    check_same(d, expected);
}

TEST_CASE("a device file with an unknown, missing, mistyped or non-finite field is refused by name",
          "[emulator][device]") {
    const std::string gc200 = emu::to_json(emu::gc200_ipu());
    REQUIRE_THROWS_WITH(emu::device_spec_from_json(replaced(gc200, "\"clock_hz\"", "\"clock\""), "my.json"),
                        Catch::Contains("(my.json): unknown field 'clock'") && Catch::Contains("clock_hz"));
    REQUIRE_THROWS_WITH(emu::device_spec_from_json(replaced(gc200, "\"code.reduction_instructions\"", "\"reduction_instructions\"")),
                        Catch::Contains("unknown field 'reduction_instructions'"));
    REQUIRE_THROWS_WITH(emu::device_spec_from_json(R"({"tiles": 1472})"),
                        Catch::Contains("the field 'memory_per_tile' is missing"));
    REQUIRE_THROWS_WITH(emu::device_spec_from_json(replaced(gc200, "\"tiles\": 1472", "\"tiles\": 1472.5")),
                        Catch::Contains("tiles must be a whole number, got 1472.5"));
    REQUIRE_THROWS_WITH(emu::device_spec_from_json(replaced(gc200, "\"tiles\": 1472", "\"tiles\": -4")),
                        Catch::Contains("tiles must be a whole number, got -4"));
    REQUIRE_THROWS_WITH(emu::device_spec_from_json(replaced(gc200, "\"tiles\": 1472", "\"tiles\": \"many\"")),
                        Catch::Contains("tiles must be a finite number"));
    REQUIRE_THROWS_WITH(emu::device_spec_from_json(replaced(gc200, "\"clock_hz\": 1330000000", "\"clock_hz\": 1e999")),
                        Catch::Contains("clock_hz"));
    REQUIRE_THROWS_WITH(emu::device_spec_from_json(replaced(gc200, "\"clock_hz\": 1330000000", "\"clock_hz\": 0")),
                        Catch::Contains("clock_hz must be positive, got 0"));
    REQUIRE_THROWS_WITH(emu::device_spec_from_json(replaced(gc200, "\"code.gather_instructions\": 537",
                                                            "\"code.gather_instructions\": -1")),
                        Catch::Contains("code.gather_instructions must not be negative"));
    REQUIRE_THROWS_AS(emu::device_spec_from_json("{\"tiles\": 1, \"tiles\": 2}"), emu::device_spec_error);
    REQUIRE_THROWS_WITH(emu::device_spec_from_json("{\"tiles\": [1]}"), Catch::Contains("nested"));
    REQUIRE_THROWS_WITH(emu::read_device_spec("/nonexistent/ipu.json"),
                        Catch::Contains("cannot read '/nonexistent/ipu.json' (a file that cannot be opened)"));
}

}  // namespace test_device_spec_json
