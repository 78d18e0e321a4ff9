#!/usr/bin/env bash
# One device-machine session: GPU suite, tiling sweep, peer comparison. Logs go to $OUT.
# Usage (on the device, from the repo root, with build/ carried): bash bench/device_run.sh [tests|sweep|compare|all]
set -u
OUT=${OUT:-/tmp/flashjit-out}
mkdir -p "$OUT"
what=${1:-all}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv | tee "$OUT/gpu.txt"
export FLASHJIT_COMMIT=${FLASHJIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
if [[ $what == tests || $what == all ]]; then
  # The binary directly: a carried build's CTestTestfile holds this machine's absolute paths.
  timeout ${TEST_TIMEOUT:-300} ./build/tests/gpu/test_gpu 2>&1 | tee "$OUT/gpu_tests.log" | grep -vE "^  (f16|bf16|f32)" | tail -40
fi
if [[ $what == sweep || $what == all ]]; then
  timeout ${SWEEP_TIMEOUT:-200} ./build/tools/flashjit-bench --dims ${DIMS:-64,128} --seqs ${SEQS:-4096} --tilings ${TILINGS:-all} --json "$OUT/sweep.json" 2>&1 | tee "$OUT/sweep.log"
fi
if [[ $what == compare || $what == all ]]; then
  PYTHONUNBUFFERED=1 timeout ${COMPARE_TIMEOUT:-150} python3 bench/sdpa_compare.py --lib build/libflashjit.so --dims ${DIMS:-64,128} --seqs ${SEQS:-4096,16384} \
    --out "$OUT/compare.md" --json "$OUT/compare.json" 2>&1 | tee "$OUT/compare.log"
fi
