#!/usr/bin/env bash
# Installs what is missing (Debian packages), checks for the CUDA toolkit, configures and builds
# into build/. Safe to run again: it only installs and rebuilds what is needed.
#
# bash scripts/bootstrap.sh [BUILD_DIR [CMAKE_ARG...]] builds another configuration into its own
# folder (scripts/sanitize.sh: build-asan/ with clang, the sanitizers and the fuzz targets).
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/packages.sh
ensure_packages "${build_packages[@]}"

cuda=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda/include/nvrtc.h" ] || [ ! -f "$cuda/include/cuda.h" ]; then
  echo "flashjit needs the CUDA toolkit's headers and NVRTC (looked in $cuda; set CUDA_HOME)" >&2
  exit 1
fi

build_dir=${1:-build}
shift $(($# > 0 ? 1 : 0))
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCUDAToolkit_ROOT="$cuda" "$@" >/dev/null
cmake --build "$build_dir" -j"$(nproc)"
