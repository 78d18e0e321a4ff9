#!/usr/bin/env bash
# Copies what the device machine runs (library, tools, GPU suite) into .carry/build, small
# enough to travel (the device tool carries at most 64 MiB). On the device: mv .carry/build build
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .carry && mkdir -p .carry/build/tools .carry/build/tests/gpu
cp -a build/libflashjit.so* .carry/build/
cp build/tools/flashjit build/tools/flashjit-bench build/tools/flashjit-engine-bench build/tools/flashjit-demo .carry/build/tools/
cp build/tests/gpu/test_gpu .carry/build/tests/gpu/
strip .carry/build/tools/* .carry/build/tests/gpu/test_gpu
du -sh .carry
