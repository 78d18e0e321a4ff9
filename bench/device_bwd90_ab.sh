#!/usr/bin/env bash
# A/B of bwd_sm90 builds on the device: the GPU suite's bwd_sm90 case on each, then
# flashjit-bench --pass backward --family bwd_sm90 in rounds of A B .. B A order (same process
# order reversed each round), medians per cell, then ncu of the main kernel per build.
#   here: bash bench/pack_ab_builds.sh NAME=DIR ...  (each DIR holds flashjit-bench and test_gpu)
#   device: VARIANTS="base new" bash bench/device_bwd90_ab.sh [test] [sanitize] [bench] [ncu]   (carry .carry/ab)
# sanitize: compute-sanitizer memcheck, racecheck and synccheck over the same test case, every
# build but the first (after test, whose disk cache spares them the compiles).
# ROUNDS (3), DIMS (64,128), SEQS (4096,16384), DTYPE (bf16), GROUP (1), NCU_SHAPE ("128 4096 no");
# TILINGS_<name>: that build's --tilings (default: each cell's default tiling).
set -u
OUT=${OUT:-/tmp/flashjit-out}; mkdir -p "$OUT"
export FLASHJIT_CACHE_DIR=${FLASHJIT_CACHE_DIR:-/tmp/fj-cache}
read -r -a variants <<< "${VARIANTS:-base new}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv | tee "$OUT/gpu.txt"
# cmd: build $1's flashjit-bench on bwd_sm90's backward at its TILINGS_<name>, options to follow.
bench_cmd() {
  local tilings_of=TILINGS_$1
  cmd=(.carry/ab/$1/flashjit-bench --tilings "${!tilings_of:-default}" --pass backward --family bwd_sm90
       --dtype "${DTYPE:-bf16}")
}
steps=("$@"); [[ ${#steps[@]} -gt 0 ]] || steps=(test bench ncu)
for step in "${steps[@]}"; do
  start=$SECONDS
  case $step in
    test)  # every build but the first (the baseline)
      for v in "${variants[@]:1}"; do
        timeout ${TEST_TIMEOUT:-400} .carry/ab/$v/test_gpu -tc='backward: bwd_sm90*' > "$OUT/test_$v.log" 2>&1
        echo "test $v rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' "$OUT/test_$v.log" | tr '\n' ' ')"
      done ;;
    sanitize)
      for v in "${variants[@]:1}"; do
        for tool in memcheck racecheck synccheck; do
          timeout ${SANITIZE_TIMEOUT:-300} compute-sanitizer --tool $tool --error-exitcode 9 .carry/ab/$v/test_gpu \
            -tc='backward: bwd_sm90*' > "$OUT/sanitize_${v}_$tool.log" 2>&1
          echo "sanitize $v $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|^\[doctest\] (test cases|assertions)' "$OUT/sanitize_${v}_$tool.log" | tr '\n' ' ')"
        done
      done ;;
    bench)
      reversed=(); for ((i = ${#variants[@]} - 1; i >= 0; --i)); do reversed+=("${variants[$i]}"); done
      for ((r = 0; r < ${ROUNDS:-3}; ++r)); do
        for v in "${variants[@]}" "${reversed[@]}"; do
          bench_cmd "$v"
          timeout ${BENCH_TIMEOUT:-120} "${cmd[@]}" --dims ${DIMS:-64,128} --seqs ${SEQS:-4096,16384} --group ${GROUP:-1} --causal both \
            --warmup 3 --reps 15 --json "$OUT/bench_${v}_${r}_$RANDOM.json" > /dev/null 2>> "$OUT/bench_errors.log"
        done
      done
      python3 - "$OUT" "${variants[@]}" <<'PY' | tee "$OUT/bench_summary.txt"
import glob, json, statistics, sys
out, names = sys.argv[1], sys.argv[2:]
cells = {}
for v in names:
    for f in glob.glob("%s/bench_%s_*.json" % (out, v)):
        for r in json.load(open(f))["results"]:
            cells.setdefault((r["D"], r["S"], r["causal"]), {}).setdefault(v, []).append(r["tflops"])
print("D     S      causal " + " ".join("%10s" % v for v in names) + "   " + " ".join("%s/%s" % (v, names[0]) for v in names[1:]))
ratios = {v: [] for v in names[1:]}
for key in sorted(cells):
    med = {v: statistics.median(cells[key].get(v, [0])) for v in names}
    for v in names[1:]: ratios[v].append(med[v] / med[names[0]])
    print("%-5d %-6d %-6s " % key + " ".join("%10.1f" % med[v] for v in names) + "   " +
          " ".join("%.3f" % (med[v] / med[names[0]]) for v in names[1:]))
for v in names[1:]:
    g = statistics.geometric_mean(ratios[v])
    print("geomean %s/%s %.3f (min %.3f)" % (v, names[0], g, min(ratios[v])))
PY
      ;;
    ncu)
      read -r d s causal <<< "${NCU_SHAPE:-128 4096 no}"
      for v in "${variants[@]}"; do
        bench_cmd "$v"
        timeout 200 ncu -k regex:flashjit_bwd_main -s 1 -c 1 --section SpeedOfLight --section Occupancy \
          --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
          --section ComputeWorkloadAnalysis --section InstructionStats \
          "${cmd[@]}" --dims $d --seqs $s --causal $causal --warmup 1 --reps 1 \
          > "$OUT/ncu_$v.txt" 2>&1
        echo "ncu $v rc=$?"; grep -E "Duration|SM Frequency|Compute \(SM\) Throughput|Memory Throughput|Registers Per|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|Executed Instructions  |L2 Hit|Stall" "$OUT/ncu_$v.txt" | head -16
      done ;;
  esac
  echo "[$step took $((SECONDS - start)) s]"
done
# The device tool brings back a limited number of files: one archive, and the summary beside it.
(cd "$OUT" && tar czf ab_runs.tgz --remove-files $(ls | grep -v -e '^ab_runs.tgz$' -e '^bench_summary.txt$') 2>/dev/null)
