#!/usr/bin/env bash
# The GPU checks of a build on the device: the C++ GPU suite, the Python package's GPU tests (run
# from the checkout against the carried library) and the per-call host overhead from Python.
# Logs and JSON go to $OUT. Usage (repo root, .carry/build from bench/pack_device_build.sh):
#   bash bench/device_check.sh [suite] [python] [overhead]
set -u
OUT=${OUT:-/tmp/flashjit-out}
mkdir -p "$OUT"
if [[ -d .carry/build ]]; then rm -rf build && mv .carry/build build; fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv | tee "$OUT/gpu.txt"
export FLASHJIT_CACHE_DIR=/tmp/fj-cache PYTHONUNBUFFERED=1 FLASHJIT_LIB=$PWD/build/libflashjit.so
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
steps=("$@"); [[ ${#steps[@]} -gt 0 ]] || steps=(suite python overhead)
for step in "${steps[@]}"; do
  start=$SECONDS
  case $step in
    suite)
      timeout ${SUITE_TIMEOUT:-240} ./build/tests/gpu/test_gpu ${SUITE_TESTS:+-tc="$SUITE_TESTS"} > "$OUT/gpu_suite.log" 2>&1
      echo "gpu suite rc=$?"; grep -E "^\[doctest\] (test cases|assertions|Status)|ERROR|FAILED" "$OUT/gpu_suite.log" | tail -20 ;;
    python)
      timeout ${PYTEST_TIMEOUT:-300} python3 -m pytest -q -p no:cacheprovider ${PYTEST_ARGS:-tests/python/gpu} \
        --junitxml="$OUT/pytest_gpu.xml" > "$OUT/pytest_gpu.log" 2>&1
      echo "python gpu tests rc=$?"; grep -E "passed|failed|error|FAILED|ERROR" "$OUT/pytest_gpu.log" | tail -25 ;;
    overhead)
      timeout 120 python3 bench/host_overhead.py --lib build/libflashjit.so --json "$OUT/host_overhead.json" \
        2>&1 | tee "$OUT/host_overhead.log" | tail -8 ;;
  esac
  echo "[$step took $((SECONDS - start)) s]"
done
