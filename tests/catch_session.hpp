#pragma once
// Catch2's runner, compiled once per build (catch_session.cpp): every test program's main calls it.

namespace tessera::test {

/// Runs the test cases the command line selects, as Catch2's own main does; returns its exit code.
[[nodiscard]] int run_catch_session(int argc, char** argv);

}  // namespace tessera::test
