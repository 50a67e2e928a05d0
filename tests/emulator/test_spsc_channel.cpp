#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "deadline.hpp"
#include "tessera/emulator/spsc_channel.hpp"

namespace test_spsc_channel {

namespace emu = tessera::emulator;

TEST_CASE("spsc_channel is FIFO, bounded and counts bytes", "[emulator]") {
    emu::spsc_channel<std::vector<float>> ch(2);
    ch.send(std::vector<float>(3));
    std::vector<float> second(5);
    CHECK(ch.try_send(second));
    std::vector<float> third(1);
    CHECK_FALSE(ch.try_send(third));
    CHECK(third.size() == 1);
    CHECK(ch.size() == 2);
    CHECK(ch.bytes_sent() == 32);
    CHECK(ch.messages_sent() == 2);
    CHECK(ch.receive()->size() == 3);
    CHECK(ch.try_receive()->size() == 5);
    CHECK_FALSE(ch.try_receive().has_value());
    ch.send(std::vector<float>(7));  // the ring wraps
    ch.close();
    REQUIRE_THROWS_AS(ch.send({}), emu::channel_closed);
    CHECK(ch.receive()->size() == 7);  // drains after close
    CHECK_FALSE(ch.receive().has_value());
    REQUIRE_THROWS_AS(emu::spsc_channel<int>(0), std::invalid_argument);

    // drain hands over everything queued, in order, across the ring's wrap, and frees the slots.
    emu::spsc_channel<int> ring(3);
    ring.send(1);
    (void)ring.receive();
    for (int v : {2, 3, 4}) ring.send(v);  // wraps
    std::vector<int> got;
    CHECK(ring.drain([&](int&& v) { got.push_back(v); }) == 3);
    CHECK(got == std::vector<int>{2, 3, 4});
    CHECK(ring.size() == 0);
    CHECK(ring.drain([&](int&&) { FAIL("nothing is left"); }) == 0);
    int spare = 5;
    CHECK(ring.try_send(spare));

    // emplace constructs the message in its slot; receive_into reads it there.
    emu::spsc_channel<std::vector<float>> in_place(2);
    in_place.emplace(std::size_t{4}, 2.5f);
    CHECK(in_place.bytes_sent() == 16);
    std::vector<float> seen;
    CHECK(in_place.receive_into([&](std::vector<float>& v) { seen = std::move(v); }));
    CHECK(seen == std::vector<float>(4, 2.5f));
    CHECK(in_place.size() == 0);
    in_place.close();
    CHECK_FALSE(in_place.receive_into([](std::vector<float>&) { FAIL("closed and drained"); }));
}

TEST_CASE("spsc_channel carries a long stream between two threads in order", "[emulator][threads]") {
    // Both wait policies: spinning first, and sleeping at once, where every wait of the stream is
    // a sleep that the other side's next message or pop ends.
    // And batching: the waiting side of this fast stream waits for 8 messages or free slots.
    for (auto policy : {emu::spin_policy{}, emu::spin_policy::sleep_at_once(), emu::spin_policy{.batch = 8}})
    for (std::size_t capacity : {1u, 3u, 64u}) {
        emu::spsc_channel<std::vector<int>> ch(capacity, policy);
        constexpr int n = 20000;
        bool in_order = true;
        long long total = tessera::test::within_deadline(60, "spsc stream", [&] {
            long long sum = 0;
            int expected = 0;
            std::jthread producer([&] {
                for (int i = 0; i < n; ++i) ch.send(std::vector<int>{i});
                ch.close();
            });
            while (auto v = ch.receive()) {
                in_order = in_order && (*v)[0] == expected++;
                sum += (*v)[0];
            }
            return sum;
        });
        CHECK(in_order);
        CHECK(total == static_cast<long long>(n) * (n - 1) / 2);
    }
}

TEST_CASE("spsc_channel close wakes a sleeping receiver and a sleeping sender", "[emulator][threads]") {
    emu::spsc_channel<int> empty(1), full(1);
    full.send(0);
    std::atomic<int> woken{0};
    tessera::test::within_deadline(30, "spsc close", [&] {
        std::jthread receiver([&] {
            if (!empty.receive()) ++woken;
        });
        std::jthread sender([&] {
            try {
                full.send(1);
            } catch (const emu::channel_closed&) {
                ++woken;
            }
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // long enough to be asleep
        empty.close();
        full.close();
    });
    CHECK(woken == 2);
}

TEST_CASE("spsc_channel batching never holds back a message the other side waits for", "[emulator][threads]") {
    // A ping-pong: each side sends one message, then waits for the other's. A receiver that waited
    // for a full batch would wait forever; batching waits at most batch_wait, then takes what is there.
    const emu::spin_policy policy{.batch = 16, .fast = std::chrono::milliseconds(10), .batch_wait = std::chrono::microseconds(50)};
    emu::spsc_channel<int> ping(64, policy), pong(64, policy);
    constexpr int rounds = 2000;
    int last = -1;
    tessera::test::within_deadline(60, "spsc batched ping-pong", [&] {
        std::jthread echo([&] {
            while (auto v = ping.receive()) pong.send(*v + 1);
        });
        for (int i = 0; i < rounds; ++i) {
            ping.send(2 * i);
            last = *pong.receive();
        }
        ping.close();
    });
    CHECK(last == 2 * (rounds - 1) + 1);
    CHECK_THROWS_AS(emu::spsc_channel<int>(4, emu::spin_policy{.batch = 0}), std::invalid_argument);
}

}  // namespace test_spsc_channel
