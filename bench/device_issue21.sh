#!/usr/bin/env bash
# Issue 21 on the device: the new GPU tests (unowned slots, checked mode, peaked rows), the
# peaked-error comparison with cuDNN and FA2, and the A/B of this build against its parent with
# cuDNN in one process (bench/ab_libs.py). Logs and JSON go to $OUT.
# Usage (repo root, .carry holding build/, base/libflashjit.so and vs_peers.py; see
# bench/pack_device_build.sh): bash bench/device_issue21.sh [tests] [peaked] [sanitize] [ab]
set -u
OUT=${OUT:-/tmp/flashjit-out}
mkdir -p "$OUT"
if [[ -d .carry/build ]]; then rm -rf build && mv .carry/build build; fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv | tee "$OUT/gpu.txt"
export FLASHJIT_CACHE_DIR=/tmp/fj-cache PYTHONUNBUFFERED=1
steps=("$@"); [[ ${#steps[@]} -gt 0 ]] || steps=(tests peaked ab)
for step in "${steps[@]}"; do
  case $step in
    tests)
      timeout ${TEST_TIMEOUT:-240} ./build/tests/gpu/test_gpu -tc="${TESTS:-*unowned*,*checked mode*,peaked*}" \
        2>&1 | tee "$OUT/gpu_tests.log" | grep -vE "^  (f16|bf16|f32) " | tail -25 ;;
    peaked)
      timeout ${PEAKED_TIMEOUT:-150} python3 tests/gpu/test_peaked_error.py --lib build/libflashjit.so \
        --json "$OUT/peaked_error.json" 2>&1 | tee "$OUT/peaked_error.log" | tail -8 ;;
    sanitize)  # the fa3 matrix (NaN in unowned slots included) and the checked mode, each tool
      for tool in memcheck racecheck; do
        timeout ${SANITIZE_TIMEOUT:-150} compute-sanitizer --tool $tool --error-exitcode 9 ./build/tests/gpu/test_gpu \
          -tc="${SANITIZE_TESTS:-fa3_sm90: a small matrix*,checked mode: bad kv_lens*}" > "$OUT/sanitize_$tool.log" 2>&1
        echo "compute-sanitizer $tool rc=$?"; grep -E "ERROR SUMMARY|^\[doctest\] (test cases|Status)" "$OUT/sanitize_$tool.log"
      done ;;
    ab)
      timeout ${AB_TIMEOUT:-330} python3 bench/ab_libs.py --lib build/libflashjit.so --base-lib .carry/base/libflashjit.so \
        --peers-script .carry/vs_peers.py --what ${AB_WHAT:-prefill,decode} ${AB_D:+--D $AB_D} ${AB_DTYPES:+--dtypes $AB_DTYPES} ${AB_OPT:+"--opt-options=$AB_OPT"} \
        --out "$OUT" 2>&1 | tee "$OUT/ab.log" | grep -E "over|geomean" ;;
  esac
done
