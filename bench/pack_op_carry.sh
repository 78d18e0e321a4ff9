#!/usr/bin/env bash
# Copies what bench/device_op_overhead.sh runs into .carry/op (git-ignored; carry it): libflashjit.so
# and the torch op's libflashjit_torch_op.so from build/ (or BUILD_DIR), stripped. Builds them
# first if missing: cmake -S . -B build -DFLASHJIT_TORCH_PYTHON=<a python with torch >= 2.10>.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
cmake --build "$build" -j"${JOBS:-2}" --target flashjit flashjit_torch_op
rm -rf .carry/op && mkdir -p .carry/op
cp -L "$build/libflashjit.so" "$build/libflashjit_torch_op.so" .carry/op/
strip --strip-unneeded .carry/op/*.so
ls -l .carry/op
