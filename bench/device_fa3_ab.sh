#!/usr/bin/env bash
# A/B of fa3_sm90 kernel switches (FLASHJIT_NVRTC_OPTIONS, each setting its own cache) and
# tilings over a few cells, in interleaved passes (A B B A ...) so the card's power-capped clock
# drifts across every setting alike; nvidia-smi samples clock and power beside it.
# Usage (on the device, repo root, .carry/build carried):
#   SETTINGS="default;-DFJ_LAZY_RESCALE=0;tiling=g2n128s2p0c1" CELLS="d128:--dims 128 --seqs 16384 --causal no" \
#   PASSES=4 bash bench/device_fa3_ab.sh
# A setting is NVRTC options, "tiling=<tiling>", or both ("-DFJ_X=1 tiling=g2n144s2p0c2");
# "default": neither. Sustained load (the power cap's clock): a cell's args may carry --warmup,
# e.g. CELLS="d128:--dims 128 --seqs 16384 --causal no --warmup 600" REPS=700.
set -u
OUT=${OUT:-/tmp/flashjit-out}
mkdir -p "$OUT"
if [[ -d .carry/build ]]; then rm -rf build && mv .carry/build build; fi
IFS=';' read -r -a settings <<< "${SETTINGS:-default}"
IFS=';' read -r -a cells <<< "${CELLS:-d128:--dims 128 --seqs 16384 --causal no}"
passes=${PASSES:-4}
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_event_reasons.active --format=csv -lms 200 \
  > "$OUT/power.csv" 2>/dev/null &
smi=$!
for ((pass = 0; pass < passes; ++pass)); do
  order=("${!settings[@]}")
  if ((pass % 2 == 1)); then order=($(printf '%s\n' "${order[@]}" | tac)); fi
  for i in "${order[@]}"; do
    setting=${settings[$i]}
    opts="" tiling=""
    for word in $setting; do
      case "$word" in
        default) ;;
        tiling=*) tiling="--tilings ${word#tiling=}" ;;
        *) opts="$opts $word" ;;
      esac
    done
    for cell in "${cells[@]}"; do
      label=${cell%%:*} args=${cell#*:}
      line=$(FLASHJIT_CACHE_DIR=/tmp/fj-ab-cache-$i FLASHJIT_NVRTC_OPTIONS="$opts" timeout 120 \
        ./build/tools/flashjit-bench --family fa3_sm90 ${DTYPE:+--dtype $DTYPE} $args $tiling --reps ${REPS:-50} 2>&1 |
        grep -E "^[0-9]" | tail -1)
      clock=$(nvidia-smi --query-gpu=clocks.sm --format=csv,noheader,nounits 2>/dev/null)
      echo "pass $pass | $setting | $label | $line | ${clock} MHz"
    done
  done
done | tee "$OUT/ab.txt"
kill $smi 2>/dev/null
# Per setting and cell: the median TFLOP/s over the passes (the bench's seventh column).
python3 - "$OUT/ab.txt" <<'EOF'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    parts = [p.strip() for p in line.split("|")]
    if len(parts) < 4 or not parts[3]:
        continue
    runs[(parts[2], parts[1])].append(float(parts[3].split()[6]))
for (cell, setting), v in sorted(runs.items()):
    print("%-12s %-34s median %6.1f  passes %s" % (cell, setting, statistics.median(v), " ".join("%.0f" % x for x in v)))
EOF
