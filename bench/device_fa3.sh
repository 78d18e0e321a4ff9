#!/usr/bin/env bash
# fa3_sm90 on the device machine: the Hopper probes (TMA, mbarrier, wgmma forms) and the tensor
# map test, then the family's GPU tests, then (BENCH=1) its candidate tilings on the prefill grid
# next to fa2_sm80's default, and SDPA's flash and cuDNN in the same run. Logs under $OUT.
# Usage (on the device, repo root, .carry/build carried): BENCH=1 bash bench/device_fa3.sh
# (TESTS=0 skips the probes and tests.)
set -u
OUT=${OUT:-/tmp/flashjit-out}
mkdir -p "$OUT"
if [[ -d .carry/build ]]; then rm -rf build && mv .carry/build build; fi
export FLASHJIT_CACHE_DIR=/tmp/flashjit-cache-fa3
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"

if [[ ${TESTS:-1} == 1 ]]; then
  echo "== sm_90 probes and tensor maps"
  timeout 120 ./build/tests/gpu/test_gpu -tc="sm_90*,the driver encodes*" > "$OUT/probes.log" 2>&1
  echo "rc=$?"; tail -25 "$OUT/probes.log"

  echo "== fa3_sm90 GPU tests"
  timeout ${TEST_TIMEOUT:-200} ./build/tests/gpu/test_gpu -sf="*test_fa3*" > "$OUT/fa3_tests.log" 2>&1
  echo "rc=$?"; tail -40 "$OUT/fa3_tests.log"
fi

[[ ${BENCH:-0} == 1 ]] || exit 0
for dt in ${DTYPES:-bf16}; do
  echo "== fa3_sm90 tilings, $dt"
  timeout 200 ./build/tools/flashjit-bench --family fa3_sm90 --dtype $dt --dims ${DIMS:-64,128,256} \
    --seqs ${SEQS:-1024,4096,16384} --tilings ${TILINGS:-all} --json "$OUT/fa3_$dt.json" 2>&1 | tee "$OUT/fa3_$dt.log"
done
if [[ ${PEERS:-1} == 1 ]]; then
  echo "== fa2_sm80 default and SDPA peers"
  timeout 200 python3 bench/sdpa_compare.py --lib build/libflashjit.so --dtype bfloat16 --dims ${DIMS:-64,128,256} \
    --seqs ${SEQS:-1024,4096,16384} --out "$OUT/peers.md" --json "$OUT/peers.json" 2>&1 | tail -45
fi
