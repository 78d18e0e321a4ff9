#!/usr/bin/env bash
# Issue 24's speed on the device: the backward grid of `python -m flashjit.bench --pass backward`
# (flashjit, SDPA flash = FlashAttention-2, SDPA cuDNN; bf16 and fp16), then ncu of flashjit's main
# backward kernel and FlashAttention-2's at D = 128, S = 4K (bench/profile_call.py).
#   bash bench/device_bwd_speed.sh [grid] [ncu]       (carry .carry/op)
#   BWD_BACKENDS=flashjit,flashjit-det,sdpa-flash,sdpa-cudnn: deterministic mode beside the default
set -u
OUT=${OUT:-/tmp/flashjit-out}
mkdir -p "$OUT"
root=$PWD
export FLASHJIT_LIB=$root/.carry/op/libflashjit.so FLASHJIT_CACHE_DIR=/tmp/fj-cache PYTHONUNBUFFERED=1
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv | tee "$OUT/gpu.txt"
steps=("$@"); [[ ${#steps[@]} -gt 0 ]] || steps=(grid ncu)
for step in "${steps[@]}"; do
  start=$SECONDS
  case $step in
    grid)
      for dt in ${DTYPES:-bf16 fp16}; do
        timeout ${GRID_TIMEOUT:-300} python3 -m flashjit.bench --pass backward --dtype "$dt" --d ${BWD_D:-64,128} \
          --s ${BWD_S:-1024,4096,16384} --backends ${BWD_BACKENDS:-flashjit,sdpa-flash,sdpa-cudnn} --json "$OUT/bwd_grid_$dt.json" \
          --out "$OUT/bwd_grid_$dt.png" 2>&1 | tee "$OUT/bwd_grid_$dt.log" | grep -E "^\[|Error|error"
      done ;;
    ncu)
      for b in "flashjit:regex:flashjit_bwd_main" "sdpa-flash:regex:flash_bwd_dq_dk_dv"; do
        name=${b%%:*}; kernel=${b#*:}
        timeout 200 ncu -k "$kernel" -s 1 -c 1 --section SpeedOfLight --section Occupancy --section LaunchStats \
          --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
          --section ComputeWorkloadAnalysis python3 bench/profile_call.py --backend "$name" ${NCU_ARGS:-} \
          > "$OUT/ncu_bwd_$name.txt" 2>&1
        echo "ncu $name rc=$?"; grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Size|Grid Size|Dynamic Shared|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|L1/TEX Hit|L2 Hit|Stall" "$OUT/ncu_bwd_$name.txt" | head -30
      done ;;
  esac
  echo "[$step took $((SECONDS - start)) s]"
done
