#!/usr/bin/env bash
# Builds and runs the whole test suite: a Release build with assertions on (-O2, NDEBUG unset; the
# programs, whose tests check what they do, and the suites whose tests mean most with the optimiser
# on, TESSERA_TEST_SUITES: the kernels', the optimisers' hand-fused steps, the number formats', every
# strategy's bit-identity at 16.16 and the programs'; the suites not marked BUILD_LEVEL at -O1, 20-35 %
# less to compile, their kernels compiled once at -O2; tessera-train, which calls those kernels too,
# at -Og), then
# the same tests under AddressSanitizer + UndefinedBehaviorSanitizer (the BUILD_LEVEL suites at -Og;
# the kernels' instances at -O1 without ASan's stack redzones, TESSERA_KERNELS_FLAGS: about 50 s more
# to compile than at -Og, where xsimd's operators stay calls, and the suites' tests run in half the
# time; nor UBSan's alignment and null checks there, 156 -> 112 s to compile on a 2-vCPU AMD EPYC:
# ASan still stops at a null dereference, and every other UBSan check stays on; the other suites at -O0, which compiles them in about 30 % less time than -Og, for tests
# that run a little slower), then the threaded tests under ThreadSanitizer (the kernels and the
# BUILD_LEVEL suites at -O1, the others at -O0; compiled for AVX2 where the CPU has AVX-512), then
# the libFuzzer targets of the file readers, each for a bounded time (TESSERA_FUZZ_SECONDS, 12 by default).
# Installs missing Debian packages first.
# Usage: scripts/test.sh [--quick | --stress [N]]   (--quick: Release only; --stress: TSan, each test up to N times)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

jobs=${TESSERA_JOBS:-$(nproc)}
passed=0
# Ninja: a suite's files compile while the kernels' instances do (make waits for every target a target
# depends on before compiling any of its files): the ASan + UBSan stage's build in 325 s instead of
# 384 s (2-vCPU AMD EPYC). A build directory of test.sh's made by another generator is made again.
configure() {  # <build dir> <cmake args...>
  local dir=$1; shift
  if [[ -f "$dir/CMakeCache.txt" ]] && ! grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja$' "$dir/CMakeCache.txt"; then
    rm -rf "$dir"
  fi
  cmake -G Ninja -S . -B "$dir" "$@" >/dev/null
}
run_suite() {  # <build dir> <optimisation> <extra cmake args...>
  local dir=$1 opt=$2 start=$SECONDS; shift 2
  configure "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="$opt" -DTESSERA_BUILD_EXAMPLES=ON "$@"
  cmake --build "$dir" -j "$jobs"
  ctest --test-dir "$dir" -j "$jobs" --output-on-failure --timeout 600 | tee "$dir/ctest.log"
  # ctest exits non-zero on any failure (and set -e stops here); count what passed for the summary.
  local n
  n=$(sed -n 's/.* 0 tests failed out of \([0-9]*\).*/\1/p' "$dir/ctest.log")
  passed=$((passed + ${n:-0}))
  echo "== $dir: built and tested in $((SECONDS - start)) s"
}

if [[ "${1:-}" == "--stress" ]]; then
  # The threaded suites under ThreadSanitizer, each test repeated until it fails (N times at most):
  # a race that shows once in many runs shows here. Not part of CI (about 10 minutes for N = 10).
  configure build/test-tsan -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE=-O1 -DTESSERA_SANITIZE=thread \
        -DTESSERA_TESTS_FLAGS=-O0 -DTESSERA_BUILD_EXAMPLES=OFF -DTESSERA_BUILD_PROGRAMS=OFF
  cmake --build build/test-tsan -j "$jobs"
  exec ctest --test-dir build/test-tsan -j "$jobs" --output-on-failure --timeout 600 --repeat "until-fail:${2:-20}"
fi

echo "== tessera tests: Release with assertions"
# The other suites (layers, sessions, the loader, the emulator...) run in the sanitizer stages only;
# --quick, which runs no sanitizer, builds every suite here.
optimised_suites="kernels_tests;optim_tests;tensor_tests;exec_release_tests;seed_tests;programs_tests"
[[ "${1:-}" == "--quick" ]] && optimised_suites=""
run_suite build/test -O2 -DTESSERA_BUILD_PROGRAMS=ON -DTESSERA_PROGRAMS_FLAGS=-O1 -DTESSERA_TRAIN_FLAGS=-Og \
  -DTESSERA_TESTS_FLAGS=-O1 -DTESSERA_EXAMPLES_SYNTAX_ONLY=ON "-DTESSERA_TEST_SUITES=$optimised_suites"
if [[ "${1:-}" != "--quick" ]]; then
  echo "== tessera tests: AddressSanitizer + UndefinedBehaviorSanitizer"
  run_suite build/test-asan -Og -DTESSERA_SANITIZE=address,undefined -DTESSERA_TESTS_FLAGS=-O0 \
    "-DTESSERA_KERNELS_FLAGS=-O1;--param=asan-stack=0;-fno-sanitize=alignment,null" \
    -DTESSERA_BUILD_EXAMPLES=OFF -DTESSERA_BUILD_PROGRAMS=OFF
  # On a CPU with AVX-512, this stage compiles for AVX2 (x86-64-v3: AVX2, FMA, F16C) instead of
  # -march=native: the kernels' 8-lane paths are then tested on every machine, not only on those
  # without AVX-512 (the same tests; docs/performance.md gives the stage's time both ways).
  arch=(-DTESSERA_NATIVE=ON -DCMAKE_CXX_FLAGS=) target="for this CPU"
  if grep -qw avx512f /proc/cpuinfo; then  # every AVX-512 CPU has AVX2, FMA and F16C
    arch=(-DTESSERA_NATIVE=OFF -DCMAKE_CXX_FLAGS=-march=x86-64-v3) target="for AVX2 (x86-64-v3)"
  fi
  echo "== tessera tests: ThreadSanitizer (threaded suites), compiled $target"
  run_suite build/test-tsan -O1 -DTESSERA_SANITIZE=thread -DTESSERA_TESTS_FLAGS=-O0 \
    -DTESSERA_BUILD_EXAMPLES=OFF -DTESSERA_BUILD_PROGRAMS=OFF "${arch[@]}"
  echo "== tessera tests: fuzzing the readers (libFuzzer, ${TESSERA_FUZZ_SECONDS:-12} s per target)"
  CXX=clang++-14 run_suite build/test-fuzz -O1 -DTESSERA_FUZZ=ON -DTESSERA_BUILD_EXAMPLES=OFF -DTESSERA_BUILD_PROGRAMS=OFF \
    -DTESSERA_FUZZ_SECONDS="${TESSERA_FUZZ_SECONDS:-12}"
fi
echo "tessera tests: $passed passed, 0 failed"
