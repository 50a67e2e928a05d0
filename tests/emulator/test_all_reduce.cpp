#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "deadline.hpp"
#include "tessera/emulator/collective_group.hpp"

namespace test_all_reduce {

namespace emu = tessera::emulator;

TEST_CASE("all_reduce sums in rank order, bit-identical on every rank", "[emulator][threads]") {
    for (std::size_t ranks : {1u, 2u, 3u, 4u}) {
        emu::collective_group<float> group(ranks);
        std::mt19937 rng(42);
        std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
        constexpr std::size_t n = 513;
        std::vector<std::vector<float>> data(ranks, std::vector<float>(n));
        for (auto& d : data)
            for (auto& x : d) x = dist(rng);
        std::vector<float> expected(n);
        for (std::size_t i = 0; i < n; ++i) {
            float s = data[0][i];
            for (std::size_t r = 1; r < ranks; ++r) s += data[r][i];
            expected[i] = s;
        }
        std::vector<double> times(ranks);
        tessera::test::within_deadline(60, "all-reduce", [&] {
            std::vector<std::jthread> threads;
            // Ranks arrive in reverse order with different clocks; the sum order must not change.
            for (std::size_t r = ranks; r-- > 0;)
                threads.emplace_back([&, r] {
                    for (int round = 0; round < 3; ++round) {
                        if (round > 0) std::copy(expected.begin(), expected.end(), data[r].begin());
                        times[r] = group.reduce(r, data[r], double(r) + round);
                    }
                });
        });
        // Round 0 gave `expected`; rounds 1 and 2 reduced copies of it: ranks × ... recomputed.
        std::vector<float> again(n);
        for (std::size_t i = 0; i < n; ++i) {
            float s = expected[i];
            for (std::size_t r = 1; r < ranks; ++r) s += expected[i];
            again[i] = s;
        }
        for (std::size_t r = 0; r < ranks; ++r) {
            CHECK(data[r] == again);
            CHECK(times[r] == double(ranks - 1) + 2);
        }
    }
}

TEST_CASE("all_reduce abort wakes waiters; a size mismatch aborts the round", "[emulator][threads]") {
    emu::collective_group<float> group(3);
    std::vector<float> a(4), b(5);
    int aborted = 0, mismatched = 0;
    tessera::test::within_deadline(60, "all-reduce abort", [&] {
        std::jthread waiter([&] {
            try {
                group.reduce(0, a);
            } catch (const emu::collective_aborted&) {
                ++aborted;
            }
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        try {
            group.reduce(1, b);
        } catch (const std::invalid_argument& e) {
            if (std::string(e.what()).find("brings 5 elements") != std::string::npos) ++mismatched;
        }
    });
    CHECK(aborted + mismatched == 2);  // ordering of arrival is not controlled; both paths end
    REQUIRE_THROWS_AS(group.reduce(2, a), emu::collective_aborted);
    emu::collective_group<double> other(2);
    REQUIRE_THROWS_AS(other.reduce(2, std::span<double>{}), std::invalid_argument);
}

TEST_CASE("all_reduce's combine hook sees the sum once, before the buffers receive it", "[emulator][threads]") {
    int calls = 0;
    emu::collective_group<float> group(2, [&](std::span<float> sum) {
        ++calls;
        for (auto& v : sum) v *= 10.0f;
    });
    std::vector<float> a{1, 2}, b{3, 4};
    tessera::test::within_deadline(30, "combine", [&] {
        std::jthread other([&] { group.reduce(1, b); });
        group.reduce(0, a);
    });
    CHECK(calls == 1);
    CHECK(a == std::vector<float>{40, 60});
    CHECK(b == a);
}

TEST_CASE("abort() does not wait for a combine that waits for other processes", "[emulator][threads]") {
    // The combine stands for a cross-process reduction whose other rank is slow: it returns only when
    // released. A local failure calls abort() meanwhile: abort() returns and the replica waiting for
    // the result leaves at once, while the combine is still waiting; released, the replica that ran
    // it learns of the abort too, and neither buffer receives a result.
    std::promise<void> entered, release;
    const auto released = release.get_future().share();
    emu::collective_group<float> group(2, [&](std::span<float>) {
        entered.set_value();
        released.wait();
    });
    std::vector<std::vector<float>> data{{1, 2}, {3, 4}};
    std::atomic<int> aborted{0}, finished{0};
    std::vector<std::jthread> replicas;
    for (std::size_t r = 0; r < 2; ++r)
        replicas.emplace_back([&, r] {
            try {
                (void)group.reduce(r, data[r]);  // the last to arrive runs the combine
            } catch (const emu::collective_aborted&) {
                ++aborted;
            }
            ++finished;
        });
    tessera::test::within_deadline(60, "abort during a combine", [&] {
        entered.get_future().wait();
        group.abort();  // blocked on the group's lock while the combine ran, before it ran unlocked
        while (finished.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    release.set_value();
    replicas.clear();  // joins
    CHECK(aborted == 2);
    CHECK(data == std::vector<std::vector<float>>{{1, 2}, {3, 4}});
}

TEST_CASE("reduce_scatter gives each rank the rank-order sums of its part only", "[emulator][threads]") {
    constexpr std::size_t ranks = 3, n = 10;
    emu::collective_group<float> group(ranks);
    std::vector<std::vector<float>> data(ranks, std::vector<float>(n));
    for (std::size_t r = 0; r < ranks; ++r)
        for (std::size_t i = 0; i < n; ++i) data[r][i] = 0.1f * float(i) + 1e4f * float(r == 1) - 1e4f * float(r == 2);
    const auto before = data;
    const std::size_t bounds[] = {0, 3, 3, 10};  // rank 1 keeps nothing
    tessera::test::within_deadline(30, "reduce-scatter", [&] {
        std::vector<std::jthread> threads;
        for (std::size_t r = ranks; r-- > 0;)
            threads.emplace_back([&, r] { group.reduce_scatter(r, data[r], bounds[r], bounds[r + 1], double(r)); });
    });
    for (std::size_t r = 0; r < ranks; ++r)
        for (std::size_t i = 0; i < n; ++i) {
            CAPTURE(r, i);
            const bool mine = i >= bounds[r] && i < bounds[r + 1];
            // (a + 1e4) - 1e4 in rank order: not a + (1e4 - 1e4), so the order is visible in the bits.
            const float sum = (before[0][i] + before[1][i]) + before[2][i];
            CHECK(data[r][i] == (mine ? sum : before[r][i]));
        }
}

TEST_CASE("all_gather gives every rank every rank's part; the combine hook fills in other processes'",
          "[emulator][threads]") {
    constexpr std::size_t ranks = 2, n = 6;
    int calls = 0;
    // The combine stands for the processes after this one: it owns elements [4, 6).
    emu::collective_group<float> group(ranks, [&](std::span<float> v) {
        ++calls;
        CHECK(v[0] == 10.0f);
        CHECK(v[3] == 23.0f);
        v[4] = -4.0f, v[5] = -5.0f;
    });
    std::vector<std::vector<float>> data(ranks, std::vector<float>(n));
    for (std::size_t r = 0; r < ranks; ++r)
        for (std::size_t i = 0; i < n; ++i) data[r][i] = float(10 * (r + 1) + i);
    double times[ranks] = {};
    tessera::test::within_deadline(30, "all-gather", [&] {
        std::jthread other([&] { times[1] = group.all_gather(1, data[1], 2, 4, 7.0); });
        times[0] = group.all_gather(0, data[0], 0, 2, 3.0);
    });
    CHECK(calls == 1);
    for (std::size_t r = 0; r < ranks; ++r) {
        CHECK(data[r] == std::vector<float>{10, 11, 22, 23, -4, -5});
        CHECK(times[r] == 7.0);
    }
}

TEST_CASE("a rank naming elements outside its buffer, or joining another collective, aborts the round",
          "[emulator][threads]") {
    emu::collective_group<float> group(2);
    std::vector<float> a(4), b(4);
    CHECK_THROWS_WITH(group.all_gather(0, a, 3, 5), Catch::Contains("names elements [3, 5) of 4"));
    CHECK_THROWS_AS(group.reduce(1, b), emu::collective_aborted);
    emu::collective_group<float> mixed(2);
    int wrong = 0, aborted = 0;
    tessera::test::within_deadline(30, "mixed collectives", [&] {
        std::jthread waiter([&] {
            try {
                mixed.reduce(0, a);
            } catch (const emu::collective_aborted&) {
                ++aborted;
            } catch (const std::invalid_argument&) {
                ++wrong;
            }
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        try {
            mixed.all_gather(1, b, 0, 2);
        } catch (const emu::collective_aborted&) {
            ++aborted;
        } catch (const std::invalid_argument&) {
            ++wrong;
        }
    });
    CHECK(wrong == 1);
    CHECK(aborted == 1);
}

}  // namespace test_all_reduce
