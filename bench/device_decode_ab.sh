#!/usr/bin/env bash
# A/B of a decode kernel experiment (kernel macros through FLASHJIT_NVRTC_OPTIONS) against the
# default, on the device machine. The GPU decode tests run under the experiment first (a faster
# wrong kernel is no result); then the decode bench once per side (SDPA peers in each), and the
# tuner's candidate timings on two cells per side (B=1 32:8 32K; 512:128 query:kv heads at 4K,
# the grid of B=16 32:8 4K). Logs under $OUT.
# Usage (on the device, repo root, .carry/build carried):
#   AB_OPTIONS="-DFJ_DECODE_EARLY_ISSUE=1" bash bench/device_decode_ab.sh
set -u
OUT=${OUT:-/tmp/flashjit-out}
mkdir -p "$OUT"
if [[ -d .carry/build ]]; then rm -rf build && mv .carry/build build; fi
export FLASHJIT_CACHE_DIR=/tmp/flashjit-cache-decode-ab
rm -rf "$FLASHJIT_CACHE_DIR"
export FLASHJIT_COMMIT=${FLASHJIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
AB=${AB_OPTIONS:?set AB_OPTIONS to the -D options of the experiment}

echo "== GPU decode tests with $AB"
FLASHJIT_NVRTC_OPTIONS=$AB timeout ${TEST_TIMEOUT:-150} ./build/tests/gpu/test_gpu -sf="*test_decode*" \
  > "$OUT/ab_tests.log" 2>&1
echo "rc=$?"; grep -vE "^  (f16|bf16|f32)" "$OUT/ab_tests.log" | tail -4

for side in default ab; do
  opts=""; [[ $side == ab ]] && opts=$AB
  echo "== decode bench, $side ${opts}"
  FLASHJIT_NVRTC_OPTIONS=$opts PYTHONUNBUFFERED=1 timeout ${BENCH_TIMEOUT:-100} python3 bench/decode_bench.py \
    --lib build/libflashjit.so --parts ${PARTS:-cells,paged} --json "$OUT/decode_$side.json" \
    --md "$OUT/decode_$side.md" 2>&1 | tee "$OUT/decode_$side.log"
done

if [[ ${TUNE:-1} == 1 ]]; then
  for side in default ab; do
    opts=""; [[ $side == ab ]] && opts=$AB
    for cell in "32 32768" "512 4096"; do
      set -- $cell
      echo "== tuner candidates, $side, batch x heads $1, keys $2"
      FLASHJIT_NVRTC_OPTIONS=$opts timeout ${TUNE_TIMEOUT:-60} ./build/tools/flashjit tune --dtype bf16 --head-dim 128 --gqa \
        --seq 1 --seq-k "$2" --batch-heads "$1" --retune --json > "$OUT/tune_${side}_$1_$2.json" 2> "$OUT/tune_${side}_$1_$2.log"
      python3 - "$OUT/tune_${side}_$1_$2.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    c = sorted((x for x in r["candidates"] if x.get("ms")), key=lambda x: x["ms"])
    print("  best %s %.4f ms; default %s; " % (r["tiling"], r["ms"], r["default_tiling"]) +
          ", ".join("%s %.4f" % (x["tiling"], x["ms"]) for x in c[:8]))
PY
    done
  done
fi
