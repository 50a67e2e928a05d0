#!/usr/bin/env bash
# Builds and runs the whole test suite: a Release build with assertions on, then the same tests
# under AddressSanitizer + UndefinedBehaviorSanitizer, then the threaded tests under ThreadSanitizer.
# Installs missing Debian packages first. Usage: scripts/test.sh [--quick]   (--quick: Release only)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

jobs=${TESSERA_JOBS:-$(nproc)}
run_suite() {  # <build dir> <extra cmake args...>
  local dir=$1; shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O2" \
        -DTESSERA_BUILD_EXAMPLES=ON "$@" >/dev/null
  cmake --build "$dir" -j "$jobs"
  ctest --test-dir "$dir" -j "$jobs" --output-on-failure --timeout 600
}

echo "== tessera tests: Release with assertions"
run_suite build/test
[[ "${1:-}" == "--quick" ]] && exit 0
echo "== tessera tests: AddressSanitizer + UndefinedBehaviorSanitizer"
run_suite build/test-asan -DTESSERA_SANITIZE=address,undefined -DTESSERA_BUILD_EXAMPLES=OFF
echo "== tessera tests: ThreadSanitizer (threaded suites)"
run_suite build/test-tsan -DTESSERA_SANITIZE=thread -DTESSERA_BUILD_EXAMPLES=OFF
