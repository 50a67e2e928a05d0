// dist_tests' main: starts MPI, runs the test cases on every rank, and fails every rank when any
// rank's test case failed. Catch2's runner is the suites' (tests/catch_session.cpp).
#include <span>

#include "../catch_session.hpp"
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
    const int failed = tessera::test::run_catch_session(argc, argv);
    double failures = failed;  // every rank's verdict counts
    comm.sum_in_rank_order(std::span<double>(&failures, 1));
    return failures > 0 ? 1 : 0;
}
