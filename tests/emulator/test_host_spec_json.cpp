// host_spec as JSON: every field read, unknown, missing and mistyped fields refused by name; presets.
#include <filesystem>
#include <limits>
#include <string_view>
#include <tuple>
#include <string>

#include <catch2/catch.hpp>

#include "tessera/emulator/host_presets.hpp"
#include "tessera/emulator/host_spec_json.hpp"

namespace test_host_spec_json {

namespace emu = tessera::emulator;

namespace {
const std::string full = R"({"cores": 64, "float_seconds_per_value": 2e-9, "eight_bit_seconds_per_value": 1e-9,
    "feed_seconds_per_byte": 3e-10, "dispatch_seconds": 5e-5, "network_bandwidth": 25e9, "reduce_through_hosts": true})";
}

TEST_CASE("a host file sets every field of host_spec", "[emulator][host]") {
    const emu::host_spec h = emu::host_spec_from_json(full);
    CHECK(h.cores == 64);
    CHECK(h.float_seconds_per_value == 2e-9);
    CHECK(h.eight_bit_seconds_per_value == 1e-9);
    CHECK(h.feed_seconds_per_byte == 3e-10);
    CHECK(h.dispatch_seconds == 5e-5);
    CHECK(h.network_bandwidth == 25e9);
    CHECK(h.reduce_through_hosts);
    // to_json writes what host_spec_from_json reads: every preset round-trips exactly
    for (const emu::host_spec& preset : {emu::tutorial_host(), emu::native_host(), h}) {
        const emu::host_spec back = emu::host_spec_from_json(emu::to_json(preset));
        CHECK(back.cores == preset.cores);
        CHECK(back.float_seconds_per_value == preset.float_seconds_per_value);
        CHECK(back.eight_bit_seconds_per_value == preset.eight_bit_seconds_per_value);
        CHECK(back.feed_seconds_per_byte == preset.feed_seconds_per_byte);
        CHECK(back.dispatch_seconds == preset.dispatch_seconds);
        CHECK(back.network_bandwidth == preset.network_bandwidth);
        CHECK(back.reduce_through_hosts == preset.reduce_through_hosts);
    }
}

TEST_CASE("a host file with an unknown, missing or mistyped field is refused by name", "[emulator][host]") {
    std::string misspelt = full;
    misspelt.replace(misspelt.find("dispatch_seconds"), 16, "dispatch_second");
    REQUIRE_THROWS_WITH(emu::host_spec_from_json(misspelt, "my.json"),
                        Catch::Contains("(my.json): unknown field 'dispatch_second'") && Catch::Contains("dispatch_seconds"));
    REQUIRE_THROWS_WITH(emu::host_spec_from_json(R"({"cores": 8})"), Catch::Contains("the field 'float_seconds_per_value' is missing"));
    // A field of `full` changed, and the error that names it. Beyond a double's range a number reads
    // as infinite: refused, as is a count past 2^20 cores (past 2^64 it would not convert).
    const std::tuple<const char*, const char*, const char*> changed[] = {
        {"64", "\"many\"", "cores must be a whole number of at least 1"},
        {"true", "1", "reduce_through_hosts must be true or false"},
        {"2e-9", "-2e-9", "float_seconds_per_value must be a finite number, not negative"},
        {"2e-9", "2e999", "float_seconds_per_value must be a finite number"},
        {"25e9", "1e999", "network_bandwidth must be a finite number"},
        {"64", "1e30", "cores must be a whole number of at least 1 and at most 1048576"}};
    for (const auto& [from, to, error] : changed) {
        std::string text = full;
        text.replace(text.find(from), std::string_view(from).size(), to);
        INFO(text);
        REQUIRE_THROWS_WITH(emu::host_spec_from_json(text), Catch::Contains(error));
    }
    emu::host_spec h;
    h.dispatch_seconds = std::numeric_limits<double>::infinity();
    REQUIRE_THROWS_WITH(h.validate(), Catch::Contains("dispatch_seconds must be a finite number"));
    REQUIRE_THROWS_AS(emu::host_spec_from_json(R"({"cores": 8, "cores": 9})"), emu::host_spec_error);
    REQUIRE_THROWS_WITH(emu::host_spec_from_json("{\"cores\": [1]}"), Catch::Contains("nested"));
    REQUIRE_THROWS_WITH(emu::host_spec_from_json("{\"cores\": 1"), Catch::Contains("expected '}'"));
    REQUIRE_THROWS_WITH(emu::read_host_spec("/nonexistent/host.json"),
                        Catch::Contains("cannot read '/nonexistent/host.json' (a file that cannot be opened)"));
    // A directory opens for reading on Linux; it is refused before its "size" is believed.
    const auto dir = std::filesystem::temp_directory_path().string();
    REQUIRE_THROWS_WITH(emu::read_host_spec(dir), Catch::Contains("cannot read '" + dir + "' (not a regular file)"));
}

TEST_CASE("the native host prepares a value faster than the tutorial's Python loader", "[emulator][host]") {
    const emu::host_spec py = emu::tutorial_host(), cpp = emu::native_host();
    CHECK(cpp.float_seconds_per_value < py.float_seconds_per_value / 100);
    CHECK(cpp.dispatch_seconds < py.dispatch_seconds / 100);
    CHECK(cpp.cores == py.cores);
    CHECK_NOTHROW(cpp.validate());
}

}  // namespace test_host_spec_json
