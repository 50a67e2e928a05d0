#!/usr/bin/env bash
# The main job: builds the examples in Release and runs the main one.
# Installs missing Debian packages first. Usage: scripts/run.sh [example] [arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

# The main example. Until the training example (ResNet on Fashion-MNIST through the emulator) lands,
# this is the policy layer's example: what each configuration consumes per host call.
example=${1:-batching}
[[ $# -gt 0 ]] && shift

cmake -S . -B build/run -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=OFF -DTESSERA_BUILD_EXAMPLES=ON >/dev/null
cmake --build build/run -j "$(nproc)" --target "$example"
exec "build/run/examples/$example" "$@"
