#pragma once
// Bounded waits for threaded tests: a hang becomes a failure with a message, never a stuck CI job.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>
#include <utility>

namespace tessera::test {

/// Runs f() on a thread; if it has not finished within `seconds`, prints `what` and exits the
/// process with status 1 (a deadlocked thread cannot be joined, so the test cannot continue).
/// Exceptions thrown by f() are rethrown here.
template <class F>
decltype(auto) within_deadline(double seconds, const char* what, F&& f) {
    auto task = std::packaged_task<decltype(f())()>(std::forward<F>(f));
    auto result = task.get_future();
    std::thread worker(std::move(task));
    if (result.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
        std::fprintf(stderr, "DEADLINE EXCEEDED (%.0f s): %s\n", seconds, what);
        std::fflush(stderr);
        std::_Exit(1);
    }
    worker.join();
    return result.get();
}

/// The what() of the E that f() throws, run as within_deadline does; "no exception" when f()
/// returns. Exceptions of other types propagate.
template <class E, class F>
std::string error_within_deadline(double seconds, const char* what, F&& f) {
    return within_deadline(seconds, what, [&]() -> std::string {
        try {
            (void)f();
        } catch (const E& e) {
            return e.what();
        }
        return "no exception";
    });
}

}  // namespace tessera::test
