#include <catch2/catch.hpp>

#include <array>
#include <atomic>
#include <deque>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "deadline.hpp"
#include "tessera/emulator/channel.hpp"

namespace test_channel {

namespace emu = tessera::emulator;

namespace {
struct tagged {
    int n;
    [[nodiscard]] std::size_t payload_bytes() const noexcept { return 100; }
};
}  // namespace

TEST_CASE("payload_bytes: member, contiguous range, or sizeof", "[emulator]") {
    CHECK(emu::payload_bytes(tagged{1}) == 100);
    CHECK(emu::payload_bytes(std::vector<float>(10)) == 40);
    CHECK(emu::payload_bytes(std::string("abc")) == 3);
    CHECK(emu::payload_bytes(std::int64_t{7}) == 8);
    CHECK(emu::payload_bytes(std::array<double, 3>{}) == 24);
    // Not contiguous (no data()): counted as the object itself.
    CHECK(emu::payload_bytes(std::deque<float>(5)) == sizeof(std::deque<float>));
    CHECK(emu::payload_bytes(std::vector<bool>(5)) == sizeof(std::vector<bool>));
}

TEST_CASE("channel is FIFO, bounded and counts messages and bytes", "[emulator]") {
    emu::channel<std::vector<float>> ch(2);
    CHECK(ch.capacity() == 2);
    ch.send(std::vector<float>(3, 1.0f));
    std::vector<float> second(5, 2.0f);
    CHECK(ch.try_send(second));
    std::vector<float> third(1, 3.0f);
    CHECK_FALSE(ch.try_send(third));  // full
    CHECK(third.size() == 1);         // untouched
    CHECK(ch.size() == 2);
    CHECK(ch.messages_sent() == 2);
    CHECK(ch.bytes_sent() == 32);
    CHECK(ch.receive()->size() == 3);
    CHECK(ch.try_receive()->size() == 5);
    CHECK_FALSE(ch.try_receive().has_value());
    REQUIRE_THROWS_AS(emu::channel<int>(0), std::invalid_argument);
}

TEST_CASE("channel close drains, then ends; send after close throws", "[emulator]") {
    emu::channel<int> ch(4);
    ch.send(1);
    ch.send(2);
    ch.close();
    CHECK(ch.closed());
    REQUIRE_THROWS_AS(ch.send(3), emu::channel_closed);
    int x = 4;
    CHECK_FALSE(ch.try_send(x));
    CHECK(ch.receive() == 1);
    CHECK(ch.receive() == 2);
    CHECK_FALSE(ch.receive().has_value());
}

TEST_CASE("channel close wakes every blocked sender and receiver", "[emulator][threads]") {
    emu::channel<int> empty(1), full(1);
    full.send(0);
    std::atomic<int> woken{0}, closed_sends{0};
    tessera::test::within_deadline(30, "close() must wake blocked waiters", [&] {
        std::vector<std::jthread> waiters;
        for (int i = 0; i < 3; ++i) {
            waiters.emplace_back([&] {
                if (!empty.receive()) ++woken;
            });
            waiters.emplace_back([&] {
                try {
                    full.send(1);
                } catch (const emu::channel_closed&) {
                    ++closed_sends;
                }
            });
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        empty.close();
        full.close();
    });
    CHECK(woken == 3);
    CHECK(closed_sends == 3);
}

TEST_CASE("channel carries a stream between threads in order", "[emulator][threads]") {
    emu::channel<std::vector<int>> ch(3);
    constexpr int n = 2000;
    bool in_order = true;
    const long long sum = tessera::test::within_deadline(60, "producer/consumer", [&] {
        long long total = 0;
        int expected = 0;
        std::jthread producer([&] {
            for (int i = 0; i < n; ++i) ch.send(std::vector<int>{i, i});
            ch.close();
        });
        while (auto v = ch.receive()) {
            in_order = in_order && (*v)[0] == expected++;
            total += (*v)[1];
        }
        return total;
    });
    CHECK(in_order);
    CHECK(sum == static_cast<long long>(n) * (n - 1) / 2);
    CHECK(ch.messages_sent() == n);
    CHECK(ch.bytes_sent() == n * 2 * sizeof(int));
}

}  // namespace test_channel
