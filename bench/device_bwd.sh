#!/usr/bin/env bash
# Issue 24 on the device: the backward's GPU tests (dq, dk, dv against float64 on odd shapes),
# then compute-sanitizer memcheck and racecheck on its small case. Logs go to $OUT; nothing is
# packed here.
# Usage (repo root, .carry/build from bash bench/pack_device_build.sh):
#   bash bench/device_bwd.sh [tests] [sanitize]      (both when none is named)
set -u
OUT=${OUT:-/tmp/flashjit-out}
mkdir -p "$OUT"
if [[ -d .carry/build ]]; then rm -rf build && mv .carry/build build; fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv | tee "$OUT/gpu.txt"
export FLASHJIT_CACHE_DIR=/tmp/fj-cache
steps=("$@"); [[ ${#steps[@]} -gt 0 ]] || steps=(tests sanitize)
status=0
for step in "${steps[@]}"; do
  case $step in
    tests)
      timeout ${TEST_TIMEOUT:-300} ./build/tests/gpu/test_gpu -tc="${TESTS:-backward*}" > "$OUT/bwd_tests.log" 2>&1
      rc=$?; echo "test_gpu backward rc=$rc"; [[ $rc -eq 0 ]] || status=1
      grep -E "^  (f16|bf16) |ERROR|rel_l2|^\[doctest\] (test cases|assertions|Status)" "$OUT/bwd_tests.log" | tail -60 ;;
    sanitize)  # the small case; the disk cache from `tests` spares the sanitizers the compile
      for tool in memcheck racecheck; do
        timeout ${SANITIZE_TIMEOUT:-240} compute-sanitizer --tool $tool --error-exitcode 9 ./build/tests/gpu/test_gpu \
          -tc="${SANITIZE_TESTS:-backward: small*}" > "$OUT/bwd_sanitize_$tool.log" 2>&1
        rc=$?; echo "compute-sanitizer $tool rc=$rc"; [[ $rc -eq 0 ]] || status=1
        grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[doctest\] (test cases|Status)" "$OUT/bwd_sanitize_$tool.log"
      done ;;
    *) echo "unknown step '$step' (tests, sanitize)"; status=1 ;;
  esac
done
exit $status
