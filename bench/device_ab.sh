#!/usr/bin/env bash
# A/B of kernel switches (FLASHJIT_NVRTC_OPTIONS) at the default tilings, same process order.
set -u
for opts in "" "-DFJ_LAZY_RESCALE=0" "-DFJ_EXP2_HALF2=1"; do
  echo "== options: '${opts:-default}'"
  FLASHJIT_NVRTC_OPTIONS="$opts" timeout 120 ./build/tools/flashjit-bench --dims ${DIMS:-64,128} --seqs ${SEQS:-4096} ${BENCH_ARGS:-} 2>&1 | grep -v "^device"
done
