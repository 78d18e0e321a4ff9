#!/usr/bin/env bash
# Issue 21: where the exact running max costs fa3_sm90 its time. ncu (speed of light, warp
# states, instruction mix, source counters) on one launch of the default kernel, bf16
# non-causal, per head dim and sequence length in CELLS, once as built (the max moves on every
# increase) and once with FJ_LAZY_RESCALE=1 (issue 21's parent behaviour), plus any extra
# FLASHJIT_NVRTC_OPTIONS in EXTRA_OPTS. Reports go to $OUT/ncu_*.txt.
# Usage (device, repo root, .carry/build carried): bash bench/device_issue21_profile.sh
set -u
OUT=${OUT:-/tmp/flashjit-out}
mkdir -p "$OUT"
if [[ -d .carry/build ]]; then rm -rf build && mv .carry/build build; fi
export FLASHJIT_CACHE_DIR=/tmp/fj-cache-profile
sections="--section SpeedOfLight --section WarpStateStats --section InstructionStats --section SchedulerStats --section SourceCounters"
metrics=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
metrics+=,smsp__inst_executed.sum,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active
for cell in ${CELLS:-256:4096 128:4096}; do
  d=${cell%%:*} s=${cell##*:}
  for opt in "" "-DFJ_LAZY_RESCALE=1" ${EXTRA_OPTS:-}; do
    tag=d${d}_s${s}_${opt:-exact}; tag=${tag//[^A-Za-z0-9_]/}
    args=(--family fa3_sm90 --dtype bf16 --dims $d --seqs $s --causal no --warmup 1 --reps 1)
    FLASHJIT_NVRTC_OPTIONS="$opt" ./build/tools/flashjit-bench "${args[@]}" > /dev/null 2>&1  # compile first
    FLASHJIT_NVRTC_OPTIONS="$opt" timeout 150 ncu --clock-control base $sections --metrics "$metrics" \
      -k regex:flashjit_fa3 --launch-skip 1 -c 1 ./build/tools/flashjit-bench "${args[@]}" > "$OUT/ncu_$tag.txt" 2>&1
    echo "== $tag rc=$?"
    grep -E "Duration|gmma|issue_active|inst_executed|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Stall" "$OUT/ncu_$tag.txt" | sed 's/  */ /g' | head -24
  done
done
