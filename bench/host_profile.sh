#!/usr/bin/env bash
# Host time per forward call without a GPU: builds bench/fake_driver.c and bench/host_profile.cpp
# against $BUILD/libflashjit.so (build it first: cmake --build build), times the steady-state
# calls, then runs a few under callgrind (collecting only inside timed_calls(), so the first
# call's compile is not counted) and prints the top functions by inclusive and by self cost.
#   bash bench/host_profile.sh [extra host_profile args, e.g. --c-abi or --stream]
# BUILD (default build), CALLGRIND=0 to skip valgrind, CG_CALLS (default 1000).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$root/${BUILD:-build}" && pwd)
cd "$root"
cuda=${CUDA_HOME:-/usr/local/cuda}
cc -O2 -g -Wall -shared -fPIC -I"$cuda/include" bench/fake_driver.c -o "$build/fake_driver.so"
c++ -O2 -g -std=c++17 -Wall -Iengine/include bench/host_profile.cpp -L"$build" -lflashjit -ldl \
  -Wl,-rpath,"$build" -o "$build/host_profile"
export FLASHJIT_LIBCUDA_PATH=$build/fake_driver.so
# A cache of its own: the first run compiles the kernel (~1 s), later ones read it from disk.
export FLASHJIT_CACHE_DIR=${FLASHJIT_CACHE_DIR:-/tmp/flashjit-host-profile-cache}
"$build/host_profile" "$@"

[[ ${CALLGRIND:-1} == 0 ]] && exit 0
out=$(mktemp -d)
calls=${CG_CALLS:-1000}
valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" --collect-atstart=no --toggle-collect=timed_calls \
  "$build/host_profile" --callgrind --calls "$calls" "$@" > "$out/run.log" 2> "$out/valgrind.log"
# timed_calls runs twice under --callgrind (a warm-up of min(calls, 10000) calls, then one round):
# 2 x calls steady-state calls in all.
total=$(grep -E '^(summary|totals):' "$out/cg.out" | head -1 | awk '{print $2}')
echo "callgrind: $total instructions over $((2 * calls)) calls = $((total / (2 * calls))) per call"
echo "--- inclusive (top 30) ---"
callgrind_annotate --inclusive=yes "$out/cg.out" 2>/dev/null | grep -E '^ *[0-9,]+ ' | head -30
echo "--- self (top 25) ---"
callgrind_annotate "$out/cg.out" 2>/dev/null | grep -E '^ *[0-9,]+ ' | head -25
echo "(callgrind output: $out/cg.out)"
