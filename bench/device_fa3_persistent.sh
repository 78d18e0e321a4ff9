#!/usr/bin/env bash
# fa3_sm90's persistent grid (knob p) and TMA-stored output on the device machine: the family's
# GPU tests (every case on both grids, CTAs walking many tiles), compute-sanitizer on the small
# matrix, then each head dim's default tilings on both grids timed in one process
# (flashjit-bench), for fp16 and bf16. Logs and JSON under $OUT.
# Usage (on the device, repo root, .carry/build carried): bash bench/device_fa3_persistent.sh
# (TESTS=0, SANITIZE=0, BENCH=0 skip parts; SEQS overrides 1024,4096,16384.)
set -u
OUT=${OUT:-/tmp/flashjit-out}
mkdir -p "$OUT"
if [[ -d .carry/build ]]; then rm -rf build && mv .carry/build build; fi
export FLASHJIT_CACHE_DIR=/tmp/flashjit-cache-fa3-persistent
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"

if [[ ${TESTS:-1} == 1 ]]; then
  echo "== fa3_sm90 GPU tests (every candidate tiling: EVERY=1)"
  filter='fa3_sm90: dtypes*,fa3_sm90: head dims*,fa3_sm90: varlen*,fa3_sm90: a persistent*,fa3_sm90: a small*'
  [[ ${EVERY:-0} == 1 ]] && filter="fa3_sm90*"
  timeout ${TEST_TIMEOUT:-480} ./build/tests/gpu/test_gpu -tc="$filter" > "$OUT/fa3_tests.log" 2>&1
  echo "rc=$?"; grep -E "^\[doctest\]|ERROR|FAILED|SKIPPED" "$OUT/fa3_tests.log" | tail -20
fi
if [[ ${SANITIZE:-1} == 1 ]]; then
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer $tool, fa3_sm90 small matrix on both grids"
    timeout ${SANITIZE_TIMEOUT:-200} compute-sanitizer --tool $tool --error-exitcode 9 ./build/tests/gpu/test_gpu \
      -tc="fa3_sm90: a small matrix*" > "$OUT/sanitize_$tool.log" 2>&1
    echo "rc=$?"; tail -4 "$OUT/sanitize_$tool.log"
  done
fi
[[ ${BENCH:-1} == 1 ]] || exit 0
mkdir -p "$OUT/persistent"
# Each head dim's default tilings (long and short sequences) on one CTA per tile (p0) and on the
# persistent grid (p1): the same compiled kernel, so only the grid differs.
declare -A pairs=([64]="g3n112s2p0c1,g3n112s2p1c1,g1n128s2p0c1,g1n128s2p1c1" [128]="g2n112s2p0c1,g2n112s2p1c1,g2n128s2p0c1,g2n128s2p1c1"
                  [256]="g2n80s2p0c1,g2n80s2p1c1")
for dt in f16 bf16; do
  for d in 64 128 256; do
    echo "== fa3_sm90 $dt D=$d, p0 against p1"
    timeout 150 ./build/tools/flashjit-bench --family fa3_sm90 --dtype $dt --dims $d --seqs ${SEQS:-1024,4096,16384} \
      --tilings "${pairs[$d]}" --json "$OUT/persistent/${dt}_d$d.json" 2>&1 | tee -a "$OUT/persistent.log" | grep -v '^$'
  done
done
# The device tool brings back a handful of files: one archive of the JSON.
tar -C "$OUT" -czf "$OUT/persistent_json.tgz" persistent && rm -rf "$OUT/persistent"
