#include <catch2/catch.hpp>

#include <stdexcept>

#include "tessera/emulator/host_clock.hpp"

namespace test_host_clock {

namespace emu = tessera::emulator;

namespace {
emu::host_spec host(double dispatch) {
    emu::host_spec h;
    h.dispatch_seconds = dispatch;
    return h;
}
}  // namespace

TEST_CASE("host clock: a synchronous loader slower than the device makes the device wait", "[emulator][host]") {
    // Each call: 2 s preparing, 0.5 s feeding, 0.1 s dispatch, then 1 s on the IPUs.
    emu::host_clock clock(host(0.1), {.async = false});
    for (int k = 0; k < 3; ++k) {
        const auto t = clock.call(2.0, 0.5, 1.0);
        CHECK(t.ready == Approx(3.6 * k + 2.0));
        CHECK(t.device_start == Approx(3.6 * k + 2.6));
        CHECK(t.end == Approx(3.6 * (k + 1)));
        CHECK(t.host_wait == Approx(2.6));
        CHECK(t.prepare_wait == Approx(2.0));  // the rest, 0.6 s, is feeding and dispatch
    }
    CHECK(clock.now() == Approx(10.8));
    CHECK(clock.host_wait() == Approx(7.8));
    CHECK(clock.prepare_wait() == Approx(6.0));
    // Two workers split each batch.
    emu::host_clock two(host(0.1), {.async = false, .workers = 2});
    (void)two.call(2.0, 0.5, 1.0);
    CHECK(two.now() == Approx(2.6));
}

TEST_CASE("host clock: an async loader hides preparation within its prefetch depth", "[emulator][host]") {
    // Preparing (0.5 s) is faster than feeding, dispatching and running (0.2 + 0.1 + 1 s): after the
    // first batch every batch is ready before the loop asks for it.
    emu::host_clock hidden(host(0.1), {.async = true, .workers = 1, .prefetch_depth = 3});
    const auto first = hidden.call(0.5, 0.2, 1.0);
    CHECK(first.device_start == Approx(0.8));
    for (int k = 1; k < 5; ++k) {
        const auto t = hidden.call(0.5, 0.2, 1.0);
        CHECK(t.host_wait == Approx(0.3));  // feeding and dispatch only
        CHECK(t.prepare_wait == 0.0);
    }
    CHECK(hidden.prepare_wait() == Approx(0.5));  // the first batch only
    CHECK(hidden.now() == Approx(0.8 + 1.0 + 4 * 1.3));
    // Preparing slower than the device (2 s): the worker sets the pace, 2 s per call.
    emu::host_clock bound(host(0.1), {.async = true, .workers = 1, .prefetch_depth = 3});
    double previous = 0;
    for (int k = 0; k < 6; ++k) {
        const auto t = bound.call(2.0, 0.2, 1.0);
        CHECK(t.ready == Approx(2.0 * (k + 1)));
        if (k > 0) CHECK(t.end - previous == Approx(2.0));
        previous = t.end;
    }
    // Three workers at 2 s each keep up with 1.3 s calls: after the ring fills the device never waits
    // for data, only for feeding and dispatch.
    emu::host_clock three(host(0.1), {.async = true, .workers = 3, .prefetch_depth = 3});
    for (int k = 0; k < 12; ++k) (void)three.call(2.0, 0.2, 1.0);
    CHECK(three.calls().back().host_wait == Approx(0.3));
    // A ring of one batch: the worker may not start batch k + 1 before the loop took batch k.
    emu::host_clock shallow(host(0.0), {.async = true, .workers = 3, .prefetch_depth = 1});
    const auto a = shallow.call(1.0, 0.0, 1.0);  // ready 1, taken 1, ends 2
    const auto b = shallow.call(1.0, 0.0, 1.0);  // prepared from 1 (when a was taken): ready 2, ends 3
    CHECK(a.end == Approx(2.0));
    CHECK(b.ready == Approx(2.0));
    CHECK(b.end == Approx(3.0));
}

TEST_CASE("host clock: processes share the cores, and bad figures are refused", "[emulator][host]") {
    emu::host_spec small = host(0.0);
    small.cores = 4;
    emu::host_clock clock(small, {.async = false, .workers = 8, .instances = 2});
    CHECK(clock.workers() == 2);  // 4 cores over 2 processes
    REQUIRE_THROWS_AS(emu::host_clock(small, {.workers = 0}), std::invalid_argument);
    REQUIRE_THROWS_AS(clock.call(-1.0, 0.0, 0.0), std::invalid_argument);
    emu::host_spec bad;
    bad.feed_seconds_per_byte = -1;
    REQUIRE_THROWS_WITH(emu::host_clock(bad), Catch::Contains("feed_seconds_per_byte"));
}

}  // namespace test_host_clock
