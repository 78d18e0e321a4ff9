#!/usr/bin/env bash
# The checked build: library, tools, CPU tests and fuzz targets with AddressSanitizer and
# UndefinedBehaviorSanitizer (the first report aborts), built with clang into build-asan/, then
# every CPU test there (the fuzz corpora are replayed as tests too). Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/packages.sh
# clang with its runtimes (ASan, UBSan, libFuzzer); llvm for llvm-symbolizer (readable reports).
ensure_packages clang libclang-rt-dev llvm
bash scripts/bootstrap.sh build-asan -DCMAKE_CXX_COMPILER=clang++ -DFLASHJIT_SANITIZE=ON -DFLASHJIT_FUZZ=ON
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
ctest --test-dir build-asan --output-on-failure -j"$(nproc)" -L cpu "$@"
