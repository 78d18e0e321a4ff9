#!/usr/bin/env bash
# Issue 24's backward layout (FlashAttention-2's five warp layouts) in one device call: the GPU
# backward tests against float64, the backward tiling sweep (flashjit-bench --pass backward), the
# speed grid against SDPA's flash (FlashAttention-2) and cuDNN backwards (python -m flashjit.bench),
# each kernel's time against FlashAttention-2's (split), ncu of both main kernels, and the Python
# autograd tests of varlen, kv_lens and sinks. Logs go to $OUT (at most 8 files with every step:
# the device tool brings back 8), the tables on stdout.
# Carry .carry/build (bash bench/pack_device_build.sh), .carry/op (libflashjit.so, stripped) and,
# to spare the device the compiles, .carry/cache (a FLASHJIT_CACHE_DIR filled here for sm_90a).
#   bash bench/device_bwd_layout.sh [tests] [grid] [sweep] [split] [ncu] [pytests]
# (tests grid sweep pytests, in this order, when none is named)
set -u
OUT=${OUT:-/tmp/flashjit-out}
mkdir -p "$OUT"
root=$PWD
if [[ -d .carry/build ]]; then rm -rf build && mv .carry/build build; fi
export FLASHJIT_CACHE_DIR=${FLASHJIT_CACHE_DIR:-$root/.carry/cache} PYTHONUNBUFFERED=1
export FLASHJIT_LIB=$root/.carry/op/libflashjit.so PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
mkdir -p "$FLASHJIT_CACHE_DIR"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv | tee "$OUT/gpu.txt"
steps=("$@"); [[ ${#steps[@]} -gt 0 ]] || steps=(tests grid sweep pytests)
status=0
for step in "${steps[@]}"; do
  start=$SECONDS
  case $step in
    tests)
      timeout ${TEST_TIMEOUT:-150} ./build/tests/gpu/test_gpu -tc="${TESTS:-backward*}" > "$OUT/bwd_tests.log" 2>&1
      rc=$?; echo "test_gpu backward rc=$rc"; [[ $rc -eq 0 ]] || status=1
      grep -E "ERROR|FAIL|^\[doctest\] (test cases|assertions|Status)" "$OUT/bwd_tests.log" | head -30 ;;
    sweep)  # every candidate tiling at S = 4K, bf16
      timeout ${SWEEP_TIMEOUT:-90} ./build/tools/flashjit-bench --pass backward --dtype bf16 --dims ${SWEEP_D:-64,128} \
        --seqs ${SWEEP_S:-4096} --tilings ${SWEEP_TILINGS:-all} --warmup 3 --reps 10 > "$OUT/bwd_sweep.log" 2>&1
      echo "sweep rc=$?"; cat "$OUT/bwd_sweep.log" | tail -45 ;;
    grid)
      for dt in ${DTYPES:-bf16 fp16}; do
        timeout ${GRID_TIMEOUT:-150} python3 -m flashjit.bench --pass backward --dtype "$dt" --d ${BWD_D:-64,128} \
          --s ${BWD_S:-1024,4096,16384} --rounds ${ROUNDS:-4} --backends flashjit,sdpa-flash,sdpa-cudnn \
          --json "$OUT/bwd_grid_$dt.json" > "/tmp/bwd_grid_$dt.log" 2>&1
        echo "grid $dt rc=$?"; grep -E "^\[|Error|error" "/tmp/bwd_grid_$dt.log"
      done ;;
    split)  # each backward kernel's GPU time per call, flashjit against FlashAttention-2 (torch.profiler)
      timeout ${SPLIT_TIMEOUT:-60} python3 bench/bwd_kernel_split.py --cells ${SPLIT_CELLS:-64:4096:0,128:1024:0,128:4096:0} \
        --backends flashjit,sdpa-flash > "$OUT/bwd_split.log" 2>&1
      echo "split rc=$?"; cat "$OUT/bwd_split.log" ;;
    ncu)  # the main kernels, flashjit's and FlashAttention-2's, one launch each (bench/profile_call.py)
      for b in "flashjit:regex:flashjit_bwd_main" "sdpa-flash:regex:flash_bwd_dq_dk_dv"; do
        name=${b%%:*}; kernel=${b#*:}
        echo "=== $name" >> "$OUT/bwd_ncu.txt"
        timeout ${NCU_TIMEOUT:-100} ncu -k "$kernel" -s 1 -c 1 --section SpeedOfLight --section Occupancy --section LaunchStats \
          --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
          --section InstructionStats python3 bench/profile_call.py --backend "$name" ${NCU_ARGS:---d 64 --s 4096} \
          >> "$OUT/bwd_ncu.txt" 2>&1
        echo "ncu $name rc=$?"
      done
      grep -E "^===|Duration|Registers Per|Executed Ipc A|Issue Slots Busy|L1/TEX Cache|Executed Instructions  |Dynamic Shared|Local Memory Spilling Requests  " "$OUT/bwd_ncu.txt" ;;
    pytests)  # varlen, kv_lens and sinks gradients through the Python package against float64
      timeout ${PYTEST_TIMEOUT:-100} python3 -m pytest -q -x tests/python/gpu/test_autograd_gpu.py \
        -k "${PYTEST_K:-varlen or kv_lens or sinks}" > "$OUT/bwd_pytests.log" 2>&1
      rc=$?; echo "pytests rc=$rc"; [[ $rc -eq 0 ]] || status=1; tail -5 "$OUT/bwd_pytests.log" ;;
    *) echo "unknown step '$step' (tests, grid, sweep, split, ncu, pytests)"; status=1 ;;
  esac
  echo "[$step took $((SECONDS - start)) s]"
done
exit $status
