#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "deadline.hpp"
#include "tessera/emulator/worker.hpp"

namespace test_worker {

namespace emu = tessera::emulator;

TEST_CASE("worker runs jobs one after another on the same thread", "[emulator][threads]") {
    // Without lingering (every job starts with a wake-up) and with it (back-to-back jobs find the
    // thread awake); and jobs far enough apart that the lingering thread went to sleep in between.
    for (auto linger : {std::chrono::microseconds{0}, emu::worker::default_linger}) {
        emu::worker w(linger);
        std::vector<std::thread::id> ids;
        tessera::test::within_deadline(60, "worker jobs", [&] {
            for (int k = 0; k < 200; ++k) {
                w.launch([&] { ids.push_back(std::this_thread::get_id()); });
                CHECK(w.join() == nullptr);
                if (k % 50 == 49) std::this_thread::sleep_for(std::chrono::milliseconds(2));
            }
        });
        REQUIRE(ids.size() == 200);
        CHECK(ids.front() != std::this_thread::get_id());
        for (const auto& id : ids) CHECK(id == ids.front());
    }
}

TEST_CASE("worker returns a job's exception at join, runs the failure hook first, and stays usable",
          "[emulator][threads]") {
    emu::worker w;
    std::atomic<bool> hooked{false};
    w.launch([] { throw std::runtime_error("stage 3 failed"); },
             [&](std::exception_ptr e) { hooked = e != nullptr; });
    const auto error = w.join();
    REQUIRE(error);
    CHECK(hooked);
    CHECK_THROWS_WITH(std::rethrow_exception(error), "stage 3 failed");
    int ran = 0;
    w.launch([&] { ++ran; });
    CHECK(w.join() == nullptr);
    CHECK(ran == 1);
}

TEST_CASE("worker refuses an empty job and a second job before join", "[emulator][threads]") {
    emu::worker w;
    CHECK_THROWS_AS(w.launch({}), std::invalid_argument);
    std::atomic<bool> release{false};
    w.launch([&] {
        while (!release) std::this_thread::yield();
    });
    CHECK_THROWS_AS(w.launch([] {}), std::logic_error);
    CHECK_FALSE(w.wait_for(std::chrono::milliseconds(1)));
    release = true;
    CHECK(w.join() == nullptr);
    // Finished but not joined: still refused.
    w.launch([] {});
    CHECK(w.wait_for(std::chrono::seconds(30)));
    CHECK_THROWS_AS(w.launch([] {}), std::logic_error);
    CHECK(w.join() == nullptr);
}

}  // namespace test_worker
