// Catch2's implementation and runner without a main, compiled once per build for every test program:
// the suites' main (main.cpp) and the MPI tests', which starts MPI around it (dist/main.cpp).
#define CATCH_CONFIG_RUNNER
#define CATCH_CONFIG_CONSOLE_WIDTH 200  // long test names, wrapped without tripping Catch's column assertion
#include <catch2/catch.hpp>

#include "catch_session.hpp"

int tessera::test::run_catch_session(int argc, char** argv) { return Catch::Session().run(argc, argv); }
