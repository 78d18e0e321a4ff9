#!/usr/bin/env bash
# fa3_sm90's K/V tiles shared by pairs of CTAs (knob c: TMA multicast, each CTA loading half of
# every tile): the long non-causal default tiling of each head dim with c1 and with c2 in one
# process, two passes in reverse order (c1, c2, c2, c1), fp16 and bf16; ncu's L2 and SM
# throughput of both at D = 128 16K; then the family's GPU tests (every case also in pairs where
# the semantics allow) and compute-sanitizer on the small matrix. Logs and JSON under $OUT.
# Usage (on the device, repo root, .carry/build carried): bash bench/device_fa3_cluster.sh
# (BENCH=0, NCU=0, TESTS=0, SANITIZE=0 skip parts; SEQS overrides 1024,4096,16384.)
set -u
OUT=${OUT:-/tmp/flashjit-out}
mkdir -p "$OUT"
if [[ -d .carry/build ]]; then rm -rf build && mv .carry/build build; fi
export FLASHJIT_CACHE_DIR=/tmp/flashjit-cache-fa3-cluster
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"

if [[ ${BENCH:-1} == 1 ]]; then
  mkdir -p "$OUT/cluster"
  declare -A base=([64]="g3n112s2p0" [128]="g2n176s2p0" [256]="g2n80s2p0")
  for dt in f16 bf16; do
    for d in ${DIMS:-128 256 64}; do
      b=${base[$d]}
      echo "== fa3_sm90 $dt D=$d non-causal, c1 against c2 (two passes, reverse order)"
      timeout 150 ./build/tools/flashjit-bench --family fa3_sm90 --dtype $dt --dims $d --seqs ${SEQS:-1024,4096,16384} \
        --causal no --tilings "${b}c1,${b}c2,${b}c2,${b}c1" --json "$OUT/cluster/${dt}_d$d.json" 2>&1 |
        tee -a "$OUT/cluster.log" | grep -v '^$'
    done
  done
  tar -C "$OUT" -czf "$OUT/cluster_json.tgz" cluster && rm -rf "$OUT/cluster"
fi
if [[ ${NCU:-1} == 1 ]]; then
  metrics=sm__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed
  metrics+=,lts__t_sectors_srcunit_tex_op_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
  metrics+=,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
  metrics+=,gpu__time_duration.sum
  for c in c1 c2; do
    echo "== ncu D=128 16K non-causal bf16 g2n176s2p0$c"
    timeout 120 ncu --metrics "$metrics" -k regex:flashjit_fa3 --launch-skip 1 -c 1 \
      ./build/tools/flashjit-bench --family fa3_sm90 --dtype bf16 --dims 128 --seqs 16384 --causal no \
      --tilings g2n176s2p0$c --warmup 1 --reps 1 > "$OUT/ncu_$c.txt" 2>&1
    echo "rc=$?"; grep -E "pct|sum|duration" "$OUT/ncu_$c.txt" | sed 's/  */ /g'
  done
  cat "$OUT/ncu_c1.txt" "$OUT/ncu_c2.txt" > "$OUT/ncu.txt" && rm -f "$OUT/ncu_c1.txt" "$OUT/ncu_c2.txt"
fi
if [[ ${TESTS:-1} == 1 ]]; then
  echo "== fa3_sm90 GPU tests"
  filter=${FILTER:-'fa3_sm90: dtypes*,fa3_sm90: head dims*,fa3_sm90: varlen*,fa3_sm90: every*,fa3_sm90: a small*'}
  timeout ${TEST_TIMEOUT:-400} ./build/tests/gpu/test_gpu -tc="$filter" > "$OUT/fa3_tests.log" 2>&1
  echo "rc=$?"; grep -E "^\[doctest\]|ERROR|FAILED|SKIPPED" "$OUT/fa3_tests.log" | tail -20
  grep -c "c2 " "$OUT/fa3_tests.log" | sed 's/^/lines with c2 tilings: /'
fi
if [[ ${SANITIZE:-0} == 1 ]]; then
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer $tool, fa3_sm90 small matrix"
    timeout ${SANITIZE_TIMEOUT:-200} compute-sanitizer --tool $tool --error-exitcode 9 ./build/tests/gpu/test_gpu \
      -tc="fa3_sm90: a small matrix*" > "$OUT/sanitize_$tool.log" 2>&1
    echo "rc=$?"; tail -4 "$OUT/sanitize_$tool.log"
  done
fi
