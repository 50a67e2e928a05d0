#pragma once
// The MPI world of dist_tests, started by its main (main.cpp) before any test case runs.
#include "tessera/dist/communicator.hpp"

namespace tessera::test {

/// Every rank of the run (mpirun -np 2).
[[nodiscard]] const tessera::dist::communicator& world() noexcept;

}  // namespace tessera::test
