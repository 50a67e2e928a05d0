// The test suites' main: Catch2's runner (catch_session.cpp).
#include "catch_session.hpp"

int main(int argc, char** argv) { return tessera::test::run_catch_session(argc, argv); }
