// dist_tests' main: starts MPI, runs the test cases on every rank, and fails every rank when any
// rank's test case failed. Catch2's runner is compiled here alone, at -O0 (tests/dist/CMakeLists.txt).
#define CATCH_CONFIG_RUNNER
#define CATCH_CONFIG_CONSOLE_WIDTH 200  // long test names, wrapped without tripping Catch's column assertion
#include <catch2/catch.hpp>

#include <span>

#include "tessera/dist/environment.hpp"
#include "world.hpp"

namespace {
const tessera::dist::communicator* the_world = nullptr;
}  // namespace

const tessera::dist::communicator& tessera::test::world() noexcept { return *the_world; }

int main(int argc, char** argv) {
    tessera::dist::environment env(&argc, &argv);
    const auto comm = env.world();
    the_world = &comm;
    const int failed = Catch::Session().run(argc, argv);
    double failures = failed;  // every rank's verdict counts
    comm.sum_in_rank_order(std::span<double>(&failures, 1));
    return failures > 0 ? 1 : 0;
}
