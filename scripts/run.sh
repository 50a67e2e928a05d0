#!/usr/bin/env bash
# The main job: builds tessera-train in Release and runs it with the given flags. With none: 3 epochs
# of ResNet-20 on the real Fashion-MNIST through a 2-IPU 1F1B pipeline, 16.16 with dynamic loss
# scaling, G = 8, D = 4, 8-bit I/O and an async loader (tessera-train --help lists the flags).
# Installs missing Debian packages first. Usage: scripts/run.sh [tessera-train flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh

cmake -S . -B build/run -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_TESTS=OFF -DTESSERA_BUILD_EXAMPLES=OFF \
      -DTESSERA_BUILD_PROGRAMS=ON >/dev/null
cmake --build build/run -j "$(nproc)" --target tessera-train
exec build/run/programs/tessera-train "$@"
