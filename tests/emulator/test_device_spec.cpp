#include <catch2/catch.hpp>

#include <stdexcept>

#include "tessera/emulator/device_spec.hpp"
#include "tessera/emulator/modelled_clock.hpp"

namespace test_device_spec {

namespace emu = tessera::emulator;

TEST_CASE("device_spec defaults are the Mk2 GC200", "[emulator]") {
    constexpr emu::device_spec gc200{};
    STATIC_REQUIRE(gc200.tiles == 1472);
    STATIC_REQUIRE(gc200.memory_per_tile == 624 * 1024);
    STATIC_REQUIRE(gc200.memory_bytes() == 940'572'672);  // ≈ 900 MB
    CHECK(gc200.flops_per_second(16) == 250e12);
    CHECK(gc200.flops_per_second(32) == 62.5e12);
    // The peaks follow from the structure: 1,472 tiles × 64 (fp16) or 16 (fp32) MACs × 1.33 GHz.
    CHECK(gc200.macs_per_tile_cycle(16) == Approx(64).epsilon(0.005));
    CHECK(gc200.macs_per_tile_cycle(32) == Approx(16).epsilon(0.005));
    CHECK(gc200.amp_input_channels(16) == 16);
    CHECK(gc200.amp_output_channels(32) == 8);
    CHECK(gc200.exchange_bytes_per_tile_cycle() == Approx(4.09).epsilon(0.01));  // 8 TB/s over 1,472 tiles
    // Links per direction: two IPUs' IPU-Links (measured 423 Gb/s both ways), a host's RoCE link to one IPU.
    CHECK(gc200.bandwidth(emu::link::ipu_link) == 26.5e9);
    CHECK(gc200.bandwidth(emu::link::host_link) == 3.3e9);
    CHECK(gc200.bandwidth(emu::link::streaming_memory) == 20e9);
    CHECK(gc200.streaming_memory_capacity == 112'000'000'000);
    CHECK(gc200.host_sync_latency > 0);
    CHECK_NOTHROW(gc200.validate());
}

TEST_CASE("device_spec costs are FLOPs over the rate and bytes over the link", "[emulator]") {
    emu::device_spec spec{.fp16_flops = 100.0, .fp32_flops = 25.0, .ipu_link_bandwidth = 8.0, .host_link_bandwidth = 2.0};
    CHECK(spec.compute_seconds(200, 16) == 2.0);
    CHECK(spec.compute_seconds(200, 32) == 8.0);
    CHECK(spec.transfer_seconds(16, emu::link::ipu_link) == 2.0);
    CHECK(spec.transfer_seconds(16, emu::link::host_link) == 8.0);
    REQUIRE_THROWS_WITH(spec.flops_per_second(8), Catch::Contains("8-bit"));
}

TEST_CASE("device_spec validate names the bad figure", "[emulator]") {
    REQUIRE_THROWS_WITH(emu::device_spec{.tiles = 0}.validate(), Catch::Contains("tiles"));
    REQUIRE_THROWS_WITH(emu::device_spec{.host_link_bandwidth = -1}.validate(), Catch::Contains("host_link_bandwidth"));
    REQUIRE_THROWS_AS(emu::device_spec{.host_sync_latency = -1}.validate(), std::invalid_argument);
}

TEST_CASE("modelled_clock advances by each cost and records the trace", "[emulator]") {
    emu::modelled_clock clock(emu::device_spec{.fp16_flops = 10.0, .fp32_flops = 5.0, .ipu_link_bandwidth = 4.0,
                                               .host_sync_latency = 0.5});
    clock.compute(20, 16, emu::activity::forward, "fwd mb0");  // 2 s
    clock.transfer(4, emu::link::ipu_link, emu::activity::transfer, "send");  // 1 s
    clock.wait_until(5.0, "wait grad");                         // idle 3..5
    clock.wait_until(1.0);                                      // in the past: no-op
    clock.compute(10, 32, emu::activity::backward, "bwd mb0");  // 2 s
    clock.host_sync();                                          // 0.5 s
    CHECK(clock.now() == 7.5);
    REQUIRE(clock.trace().size() == 5);
    CHECK(clock.trace()[2].kind == emu::activity::idle);
    CHECK(clock.trace()[2].start == 3.0);
    CHECK(clock.trace()[2].end == 5.0);
    CHECK(clock.trace()[3].label == "bwd mb0");
    CHECK(clock.total(emu::activity::forward) == 2.0);
    CHECK(clock.total(emu::activity::idle) == 2.0);
    REQUIRE_THROWS_AS(clock.advance(-1, emu::activity::update), std::invalid_argument);
    clock.reset();
    CHECK(clock.now() == 0);
    CHECK(clock.trace().empty());
}

}  // namespace test_device_spec
