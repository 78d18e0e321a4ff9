#!/usr/bin/env bash
# Runs each libFuzzer target of build-asan/ (scripts/sanitize.sh builds them) for a bounded time,
# starting from its committed corpus (tests/fuzz/corpus/<target>/, never modified here). New
# inputs go to build-asan/fuzz/<target>/corpus/; an input that fails is saved in
# build-asan/fuzz/<target>/ and fails the script.
#
#   FUZZ_SECONDS   time per target (default 60)
#   FUZZ_TARGETS   which targets (default: all seven; at the default time, 7 minutes in all)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
targets=${FUZZ_TARGETS:-"fuzz_c_abi fuzz_c_abi_v2 fuzz_c_abi_backward fuzz_bundle_import fuzz_variant_json fuzz_workload_json fuzz_env_values"}
# Inputs up to 16 KiB: enough for every format's structure; the 400 KB nesting reproducer is
# still replayed whole by ctest.
max_len=16384
# Inputs run in microseconds to milliseconds: one that takes 10 s is a hang.
timeout_s=10
# ASan's shadow memory included; an input needing more is an unbounded allocation.
rss_limit_mb=4096
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
status=0
for t in $targets; do
  bin=build-asan/tests/fuzz/$t
  [ -x "$bin" ] || { echo "fuzz: $bin is missing; run scripts/sanitize.sh first" >&2; exit 1; }
  work=build-asan/fuzz/$t
  mkdir -p "$work/corpus"
  dict=()
  case $t in
    fuzz_variant_json | fuzz_workload_json) dict=(-dict=tests/fuzz/json.dict) ;;
    fuzz_c_abi | fuzz_c_abi_v2 | fuzz_c_abi_backward) dict=(-dict=tests/fuzz/c_abi.dict) ;;
  esac
  echo "== $t: ${seconds}s from $(ls tests/fuzz/corpus/$t | wc -l) seeds"
  if ! "$bin" -max_total_time="$seconds" -max_len=$max_len -timeout=$timeout_s -rss_limit_mb=$rss_limit_mb -print_final_stats=1 \
      "${dict[@]}" -artifact_prefix="$work/" "$work/corpus" "tests/fuzz/corpus/$t" >"$work/log.txt" 2>&1; then
    status=1
    echo "fuzz: $t FAILED; the input is in $work/, the report in $work/log.txt:" >&2
    tail -n 40 "$work/log.txt" >&2
  fi
  grep -E "^stat::number_of_executed_units|^stat::new_units_added" "$work/log.txt" | tr '\n' ' '
  echo
done
exit $status
