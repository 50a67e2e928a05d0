#!/usr/bin/env bash
# The main job: builds the examples in Release and runs the main one.
# Installs missing Debian packages first. Usage: scripts/run.sh [example] [arguments...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

# The main example trains ResNet-20 on Fashion-MNIST through the emulator (one epoch by default;
# `scripts/run.sh train_fashion_mnist 3` runs three). Any other example runs by name.
example=${1:-train_fashion_mnist}
[[ $# -gt 0 ]] && shift

cmake -S . -B build/run -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=OFF -DTESSERA_BUILD_EXAMPLES=ON >/dev/null
cmake --build build/run -j "$(nproc)" --target "$example"
exec "build/run/examples/$example" "$@"
