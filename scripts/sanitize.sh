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
# clang 14's LeakSanitizer crashes in its own tracer ("Tracer caught signal 11", after "DTLS 4 at
# 0xc03-0x2000001d05": a range read from an unset dynamic-TLS slot) at the exit of some binaries
# that dlopen NVRTC (test_engine_kernel_binaries since the templates grew a header; 5c6fa01's
# build did not). Preloaded, NVRTC's TLS is static TLS, which the tracer reads correctly; the
# leak check still runs and the engine's dlopen finds the same library already loaded.
nvrtc=$(ls /usr/local/cuda/lib64/libnvrtc.so.[0-9]* 2>/dev/null | head -1 || true)
if [[ -n "$nvrtc" ]]; then export LD_PRELOAD="$nvrtc${LD_PRELOAD:+:$LD_PRELOAD}"; fi
ctest --test-dir build-asan --output-on-failure -j"$(nproc)" -L cpu "$@"
