#!/usr/bin/env bash
# What bounds fa3_sm90 per head dim, and what tuning adds: ncu on the default kernel at S = 16K
# non-causal for D = 64, 128, 256 (speed of light, tensor (GMMA) and transcendental (XU) pipes,
# DRAM), then (TUNED=1) the D = 128 bf16 cells beside SDPA with the runtime tuner on
# (FLASHJIT_TUNE=first-use: each shape bucket's first call times every candidate).
# Usage (on the device, repo root, .carry/build carried): bash bench/device_fa3_profile.sh
set -u
OUT=${OUT:-/tmp/flashjit-out}
mkdir -p "$OUT"
if [[ -d .carry/build ]]; then rm -rf build && mv .carry/build build; fi
export FLASHJIT_CACHE_DIR=/tmp/flashjit-cache-fa3-profile
metrics=sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed
metrics+=,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
metrics+=,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active
metrics+=,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
metrics+=,gpu__time_duration.sum
for d in ${DIMS:-64 128 256}; do
  # Warm the kernel first, so ncu's one profiled launch is not the compile.
  ./build/tools/flashjit-bench --family fa3_sm90 --dtype bf16 --dims $d --seqs 16384 --causal no --warmup 1 --reps 1 > /dev/null 2>&1
  timeout 120 ncu --metrics "$metrics" -k regex:flashjit_fa3 --launch-skip 1 -c 1 \
    ./build/tools/flashjit-bench --family fa3_sm90 --dtype bf16 --dims $d --seqs 16384 --causal no --warmup 1 --reps 1 \
    > "$OUT/ncu_d$d.txt" 2>&1
  echo "== D=$d rc=$?"
  grep -E "flashjit_fa3|pct|duration" "$OUT/ncu_d$d.txt" | sed 's/  */ /g'
done
if [[ ${TUNED:-1} == 1 ]]; then
  echo "== D=128 bf16, tuned (FLASHJIT_TUNE=first-use) beside SDPA"
  FLASHJIT_TUNE=first-use timeout 300 python3 bench/sdpa_compare.py --lib build/libflashjit.so --dtype bfloat16 \
    --dims ${TUNED_DIMS:-128} --out "$OUT/tuned.md" --json "$OUT/tuned.json" 2>&1 | tail -8
fi
