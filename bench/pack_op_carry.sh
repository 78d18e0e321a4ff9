#!/usr/bin/env bash
# Copies what bench/device_op_overhead.sh runs into .carry/op (git-ignored; carry it): libflashjit.so,
# the torch op's libflashjit_torch_op.so and the eager fast path's _flashjit_eager.abi3.so from
# build/ (or BUILD_DIR), stripped. Builds them first if missing:
# cmake -S . -B build -DFLASHJIT_TORCH_PYTHON=<a python with torch >= 2.10>.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
cmake --build "$build" -j"${JOBS:-2}" --target flashjit flashjit_torch_op flashjit_eager
rm -rf .carry/op && mkdir -p .carry/op
cp -L "$build/libflashjit.so" "$build/libflashjit_torch_op.so" "$build/_flashjit_eager.abi3.so" .carry/op/
strip --strip-unneeded .carry/op/*.so
# The engine's stand-ins for op_overhead.py --stub-engine (the device may have no compiler).
cc -O2 -shared -fPIC bench/stub_engine.c -o .carry/op/stub_engine.so
ls -l .carry/op
