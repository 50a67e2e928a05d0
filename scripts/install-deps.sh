#!/usr/bin/env bash
# Installs the Debian packages tessera needs, only those missing; uses sudo only when not root.
# Usage: scripts/install-deps.sh [--bench]   (--bench adds the baselines the benchmarks compare against)
set -euo pipefail
packages=(cmake ninja-build g++ libxtensor-dev libxsimd-dev xtl-dev catch2 libbenchmark-dev zlib1g-dev libcli11-dev
          dataset-fashion-mnist fortunes clang-14 libclang-rt-14-dev libopenmpi-dev openmpi-bin
          libonnx-dev libprotobuf-dev)
[[ "${1:-}" == "--bench" ]] && packages+=(libopenblas-dev libtbb-dev libtorch-dev)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0

sudo=()
((EUID != 0)) && sudo=(sudo)
echo "tessera: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
