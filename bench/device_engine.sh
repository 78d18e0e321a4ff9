#!/usr/bin/env bash
# Engine costs and tuning on the device machine (issue 3 measurements). Logs under $OUT.
set -u
OUT=${OUT:-/tmp/flashjit-out}
mkdir -p "$OUT"
export FLASHJIT_CACHE_DIR=/tmp/flashjit-cache-engine
rm -rf "$FLASHJIT_CACHE_DIR"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== engine costs"
timeout 200 ./build/tools/flashjit-engine-bench all --json "$OUT/engine_costs.json" 2>&1 | tail -8
echo "== host overhead from Python"
timeout 60 python3 bench/host_overhead.py --lib build/libflashjit.so 2>&1 | tail -5
echo "== offline tuning"
timeout 200 ./build/tools/flashjit tune --dtype f16 --head-dim 64,128 --mask none,causal --seq 4096 --batch-heads 64 --json > "$OUT/tune.json" 2> "$OUT/tune.log"
echo "rc=$?"; tail -6 "$OUT/tune.log"
python3 - "$OUT/tune.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["results"]:
    print("%-44s %-13s %6.1f TF/s  default %-13s %6.1f TF/s  x%.2f  %.1f s" % (r["key"][:44], r["tiling"], r["tflops"], r["default_tiling"], r["default_tflops"], r["tflops"]/r["default_tflops"] if r["default_tflops"] else 0, r["seconds"]))
PY
