#include <catch2/catch.hpp>

#include "tessera/emulator/memory_arena.hpp"

namespace test_memory_arena {

namespace emu = tessera::emulator;

TEST_CASE("format_bytes uses binary units", "[emulator]") {
    CHECK(emu::format_bytes(512) == "512 B");
    CHECK(emu::format_bytes(1536) == "1.50 KiB");
    CHECK(emu::format_bytes(940'572'672) == "897.00 MiB");
}

TEST_CASE("memory_arena accounts allocations, releases and the peak", "[emulator]") {
    emu::memory_arena arena(3, 1000);
    const auto w = arena.allocate("stage 0 weights", 600, emu::memory_kind::weights);
    const auto a = arena.allocate("activations mb0", 300, emu::memory_kind::activations);
    CHECK(arena.used() == 900);
    CHECK(arena.used(emu::memory_kind::weights) == 600);
    arena.release(a);
    CHECK(arena.used() == 600);
    CHECK(arena.peak() == 900);
    const auto b = arena.allocate("activations mb1", 400, emu::memory_kind::activations);  // exactly full
    CHECK(arena.used() == 1000);
    REQUIRE(arena.live().size() == 2);
    CHECK(arena.live()[0].id == w);
    CHECK(arena.live()[1].id == b);
    REQUIRE_THROWS_WITH(arena.release(a), Catch::Contains("IPU 3") && Catch::Contains("no live allocation"));
    arena.clear();
    CHECK(arena.used() == 0);
    CHECK(arena.peak() == 1000);
}

TEST_CASE("memory_arena over budget throws out_of_device_memory naming the IPU, budget and largest items",
          "[emulator]") {
    emu::memory_arena arena(1, 8 * 1024 * 1024);
    (void)arena.allocate("stage 1 weights", 6 * 1024 * 1024, emu::memory_kind::weights);
    (void)arena.allocate("optimiser state", 1024 * 1024, emu::memory_kind::optimiser_state);
    (void)arena.allocate("small", 10, emu::memory_kind::other);
    try {
        (void)arena.allocate("stage 1 activations", 2 * 1024 * 1024, emu::memory_kind::activations);
        FAIL("no exception");
    } catch (const emu::out_of_device_memory& e) {
        CHECK(e.ipu() == 1);
        CHECK(e.budget() == 8 * 1024 * 1024);
        CHECK(e.in_use() == 7 * 1024 * 1024 + 10);
        CHECK(e.request().name == "stage 1 activations");
        REQUIRE(e.largest().size() == 3);
        CHECK(e.largest()[0].name == "stage 1 weights");
        CHECK(e.largest()[1].name == "stage 1 activations");
        CHECK(e.largest()[2].name == "optimiser state");
        const std::string what = e.what();
        CHECK(what.rfind("IPU 1 is out of device memory: 'stage 1 activations' needs 2.00 MiB", 0) == 0);
        CHECK(what.find("of the 8.00 MiB budget") != std::string::npos);
        CHECK(what.find("stage 1 weights (6.00 MiB)") != std::string::npos);
    }
    CHECK(arena.used() == 7 * 1024 * 1024 + 10);  // nothing accounted for the failed request
}

}  // namespace test_memory_arena
