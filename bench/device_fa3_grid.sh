#!/usr/bin/env bash
# fa3_sm90 as the default on sm_90: the whole GPU suite, the engine's host costs (dispatch now
# encodes tensor maps), and the 36-cell prefill grid for fp16 and bf16 beside SDPA's flash and
# cuDNN in the same process. Logs under $OUT.
# Usage (on the device, repo root, .carry/build carried): bash bench/device_fa3_grid.sh
# (SUITE=0, HOST=0, DTYPES=none skip parts; EXTRA=1 adds the GQA and MLA cells, SANITIZE=1 the sanitizers.)
# Tables come back in tables.txt, JSON and the clock/power samples in results_json.tgz.
set -u
OUT=${OUT:-/tmp/flashjit-out}
mkdir -p "$OUT"
if [[ -d .carry/build ]]; then rm -rf build && mv .carry/build build; fi
export FLASHJIT_CACHE_DIR=/tmp/flashjit-cache-fa3-grid
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
# The SM clock, power and clock-event reasons (0x4: the software power cap) every 200 ms.
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv,noheader -lms 200 > "$OUT/power.csv" 2>&1 &
smi=$!

if [[ ${SUITE:-1} == 1 ]]; then
  echo "== GPU suite"
  timeout ${SUITE_TIMEOUT:-300} ./build/tests/gpu/test_gpu > "$OUT/gpu_suite.log" 2>&1
  echo "rc=$?"; grep -E "^\[doctest\]|ERROR|FAILED|SKIPPED" "$OUT/gpu_suite.log" | tail -20
fi
if [[ ${HOST:-1} == 1 ]]; then
  echo "== host costs"
  timeout 120 ./build/tools/flashjit-engine-bench dispatch --json "$OUT/dispatch.json" 2>&1 | tail -8
fi
for dt in ${DTYPES:-float16 bfloat16}; do
  [[ $dt == none ]] && continue
  echo "== prefill grid, $dt"
  timeout 250 python3 bench/sdpa_compare.py --lib build/libflashjit.so --dtype $dt --out "$OUT/grid_$dt.md" \
    --json "$OUT/grid_$dt.json" 2>&1 | tail -40
done
if [[ ${EXTRA:-0} == 1 ]]; then
  echo "== GQA 32:8 and MLA 192/128, bfloat16"
  timeout 150 python3 bench/sdpa_compare.py --lib build/libflashjit.so --dtype bfloat16 --dims 128 --seqs 4096,8192 \
    --group 4 --out "$OUT/gqa.md" --json "$OUT/gqa.json" 2>&1 | tail -6
  timeout 150 python3 bench/sdpa_compare.py --lib build/libflashjit.so --dtype bfloat16 --dims 192 --dv 128 \
    --seqs 1024,4096,16384 --out "$OUT/mla.md" --json "$OUT/mla.json" 2>&1 | tail -8
fi
if [[ ${SANITIZE:-0} == 1 ]]; then
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer $tool, fa3_sm90 small matrix"
    timeout ${SANITIZE_TIMEOUT:-150} compute-sanitizer --tool $tool --error-exitcode 9 ./build/tests/gpu/test_gpu \
      -tc="fa3_sm90: a small matrix*" > "$OUT/sanitize_$tool.log" 2>&1
    echo "rc=$?"; tail -4 "$OUT/sanitize_$tool.log"
  done
fi
kill $smi 2>/dev/null
echo "== SM clock under load (samples above 400 W: count, MHz, power, reasons)"
awk -F', ' '$3+0 > 400 {print int($2/100)*100 " MHz", int($3/100)*100 " W", $5}' "$OUT/power.csv" | sort | uniq -c |
  sort -k2 -n | tail -12
# Few files travel back: the tables in one, the JSON in one archive.
(cd "$OUT" && cat $(ls *.md 2>/dev/null) > tables.txt 2>/dev/null; tar -czf results_json.tgz $(ls *.json 2>/dev/null) power.csv &&
  rm -f *.json power.csv $(ls *.md 2>/dev/null))
