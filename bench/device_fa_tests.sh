#!/usr/bin/env bash
# FlashAttention's own test files run against flashjit's FlashAttention-compatible API (issue 23).
#
# The test files are FlashAttention's, read from a checkout or `git show` of
# github.com/Dao-AILab/flash-attention (tests/test_flash_attn.py for FA2; hopper/test_flash_attn.py
# for FA3, with hopper/padding.py and hopper/test_util.py beside it). They never enter this repo.
# tests/fa_compat holds a stand-in `flash_attn` package (and FA3's `flash_attn_interface`) that maps
# their imports onto flashjit; what flashjit lacks raises NotImplementedError naming the feature,
# and no backward pass is faked: MODE=train runs the files' gradient checks through flashjit's own
# backward, which refuses what it lacks by name.
#
# Usage (on the device, from the repo root, build/libflashjit.so built):
#   FA2_TEST=path/to/fa2/test_flash_attn.py FA3_TEST=path/to/hopper/test_flash_attn.py \
#     bash bench/device_fa_tests.sh [--help]
# With the files fetched into .carry/fa_tests/{fa2,fa3}/ (and the library in build/ or .carry/build/),
# `bash bench/device_fa_tests.sh` alone runs both. A copy of this script and of tests/fa_compat kept
# as .carry/fa_tests/device_fa_tests.sh and .carry/fa_tests/fa_compat/ works the same from the root.
# Environment:
#   FA2_TEST, FA3_TEST  test files; a missing or empty one is left out (default .carry/fa_tests/fa{2,3}/test_flash_attn.py)
#   FA2_FUNCS, FA3_FUNCS  test functions to run (space-separated; defaults below: the forward ones,
#                       or with MODE=train the dense ones that take gradients).
#                       Left out by default: FA2's test_flash_attn_kvcache_paged_block_table_bounds: it
#                       passes cache_seqlens past the block table's capacity, which flashjit checks only in
#                       its checked mode; unchecked, the kernel reads past the table, which can end the
#                       process's CUDA context and fail every later case. Run it alone, checked:
#                       FLASHJIT_CHECK=1 FA2_FUNCS=test_flash_attn_kvcache_paged_block_table_bounds FA3_TEST=
#                       (it also expects FA2's RuntimeError text "block_table", which flashjit's differs from).
#                       FA2's test_flash_attn_varlen_paged_kv_num_splits calls FA2's private
#                       _flash_attn_varlen_forward (a NotImplementedError stub here); the *bwd*,
#                       *deterministic* and combine tests are backward or FA3-kernel tests (MODE=train
#                       runs FA2's dense ones).
#   MODE=forward|train|asis
#                       forward (default): run a forward-only copy of each file, made in a temp folder
#                       by tests/fa_compat/forward_only.py (drops the backward calls and the checks on
#                       gradients; the forward call and its assertions are kept as written); FA3 also
#                       gets FLASH_ATTENTION_DISABLE_BACKWARD=TRUE, FA3's own switch.
#                       train: the files unchanged, backward statements and gradient checks kept, so
#                       they run through flashjit's backward (every forward semantic the files use but
#                       dropout, which raises NotImplementedError; deterministic=True reaches the
#                       backward's fixed-order dQ). Default functions: every one that takes gradients:
#                       FA2's test_flash_attn_qkvpacked, _output, _causal, _splitkv, _race_condition,
#                       _bwd_overflow, _bwd_transpose, _deterministic and their varlen forms
#                       (_varlen_qkvpacked, _varlen_output, _varlen_causal, _bwd_varlen_overflow,
#                       _varlen_deterministic); FA3's _output, _varlen_output, _race_condition (FA3
#                       runs without FLASH_ATTENTION_DISABLE_BACKWARD). What the backward refuses is
#                       tallied "unsupported" by feature (NotImplementedError, or FlashjitError
#                       "unsupported: ... refused: <feature>: ..."), not as a failure.
#                       asis: the files unchanged with the forward default functions (their gradients
#                       also go through flashjit's backward, as with train).
#   STRIDE=N            keep every Nth parametrized case of each function (default 7), OFFSET=K its start
#   PER_FUNC="M f=M2"   then at most M cases per function, evenly spaced, M2 for function f (default
#                       "60 test_flash_attn_kvcache=480": in both kvcache tests most cases stop at once at
#                       an unsupported feature (rotary, cache_leftpad; FA3 also cache_batch_idx, varlen q),
#                       so 60 would leave FA2 about 7 and FA3 about 4 cases that reach the kernel)
#   PYTEST_ARGS         more pytest arguments (e.g. -x, or -k on the case ids)
#   TIMEOUT=S           seconds for everything (default 450): after 45 s a file for start-up and
#                       collection, the rest is split evenly between the files; cases not started in
#                       time are reported "not run (budget)"; a file that overruns is interrupted
#                       (SIGINT), which still writes its tally
#   COLLECT_ONLY=1      only collect and report the counts (no GPU or library needed: without CUDA,
#                       FA_COMPAT_FAKE_CAPABILITY=9.0 answers the files' module-level capability checks)
#   FLASHJIT_LIB        the library (default build/libflashjit.so, else .carry/build/libflashjit.so)
#   FLASHJIT_ROOT       the repo root (default: the current folder if it holds python/flashjit)
#   FA_COMPAT_DIR       the shim (default tests/fa_compat, else fa_compat beside this script)
#   PYTHON              the interpreter (default python3)
#   FA3_ENV             FA3's own switches for its run (default "FLASH_ATTENTION_DISABLE_LOCAL=TRUE
#                       FLASH_ATTENTION_DISABLE_FP8=TRUE"; FA3_ENV= runs the file's full matrix). Why: with
#                       LOCAL on, each output/varlen case first tries a random attention_chunk (chunked-local
#                       attention, which flashjit lacks) and stops at that NotImplementedError before its
#                       attention_chunk=0 pass; the switch also drops FA3's local=True windows (FA2's file
#                       tests windows). FP8 needs q/k/v_descale, which flashjit lacks.
#                       Other FLASH_ATTENTION_DISABLE_* (SPLIT, PAGEDKV, APPENDKV, ...) pass through.
# Writes 8 files to $OUT (default /tmp/fa-tests-out), 4 a test file: fa{2,3}_summary.md (the tally),
# fa{2,3}_summary.md.json (every case's outcome and reason), fa{2,3}_junit.xml, and fa{2,3}.log (with
# MODE=forward, it starts with what the forward-only copy left out, by function and original line).
set -u
if [[ ${1:-} == --help || ${1:-} == -h ]]; then sed -n '2,/^set -u/p' "$0" | sed 's/^# \{0,1\}//; /^set -u/d'; exit 0; fi
here=$(cd "$(dirname "$0")" && pwd)
# The repo root: FLASHJIT_ROOT, else the current folder when it holds python/flashjit, else above this script.
root=${FLASHJIT_ROOT:-$( [[ -d python/flashjit ]] && pwd || (cd "$here/.." && pwd) )}
# The shim: FA_COMPAT_DIR, else tests/fa_compat of the repo, else fa_compat beside this script (a copy).
shim=${FA_COMPAT_DIR:-$root/tests/fa_compat}
[[ -f $shim/fa_compat_plugin.py ]] || shim=$here/fa_compat
OUT=$(realpath -m "${OUT:-/tmp/fa-tests-out}")
mkdir -p "$OUT"
py=${PYTHON:-python3}
lib=$root/build/libflashjit.so
[[ -f $lib ]] || lib=$root/.carry/build/libflashjit.so
FLASHJIT_LIB=$(realpath -m "${FLASHJIT_LIB:-$lib}"); export FLASHJIT_LIB  # absolute: pytest runs in the test's folder
[[ -f $shim/fa_compat_plugin.py ]] || { echo "no fa_compat shim at $shim (set FA_COMPAT_DIR)"; exit 2; }
export PYTHONPATH="$shim:$root/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
MODE=${MODE:-forward}
[[ $MODE == forward || $MODE == train || $MODE == asis ]] || { echo "MODE must be forward, train or asis"; exit 2; }
export FA_COMPAT_MODE=$MODE
FA2_TEST=${FA2_TEST-$root/.carry/fa_tests/fa2/test_flash_attn.py}
FA3_TEST=${FA3_TEST-$root/.carry/fa_tests/fa3/test_flash_attn.py}
if [[ $MODE == train ]]; then
  FA2_FUNCS=${FA2_FUNCS:-test_flash_attn_qkvpacked test_flash_attn_varlen_qkvpacked test_flash_attn_output test_flash_attn_varlen_output test_flash_attn_causal test_flash_attn_varlen_causal test_flash_attn_splitkv test_flash_attn_race_condition test_flash_attn_bwd_overflow test_flash_attn_bwd_transpose test_flash_attn_bwd_varlen_overflow test_flash_attn_deterministic test_flash_attn_varlen_deterministic}
  FA3_FUNCS=${FA3_FUNCS:-test_flash_attn_output test_flash_attn_varlen_output test_flash_attn_race_condition}
else
  FA2_FUNCS=${FA2_FUNCS:-test_flash_attn_qkvpacked test_flash_attn_varlen_qkvpacked test_flash_attn_output test_flash_attn_varlen_output test_flash_attn_causal test_flash_attn_varlen_causal test_flash_attn_splitkv test_flash_attn_kvcache test_flash_attn_race_condition}
  FA3_FUNCS=${FA3_FUNCS:-test_flash_attn_output test_flash_attn_varlen_output test_flash_attn_kvcache test_flash_attn_race_condition}
fi
export FA_COMPAT_STRIDE=${STRIDE:-7} FA_COMPAT_OFFSET=${OFFSET:-0} FA_COMPAT_PER_FUNC=${PER_FUNC:-60 test_flash_attn_kvcache=480}
TIMEOUT=${TIMEOUT:-450}
FA3_ENV=${FA3_ENV-FLASH_ATTENTION_DISABLE_LOCAL=TRUE FLASH_ATTENTION_DISABLE_FP8=TRUE}
COLLECT_ONLY=${COLLECT_ONLY:-0}
collect=()
if [[ $COLLECT_ONLY == 1 ]]; then
  collect=(--collect-only)
  "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null || export FA_COMPAT_FAKE_CAPABILITY=${FA_COMPAT_FAKE_CAPABILITY:-9.0}
else
  [[ -f $FLASHJIT_LIB ]] || { echo "no $FLASHJIT_LIB: build flashjit first (or set FLASHJIT_LIB)"; exit 2; }
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null
t0=$(date +%s)
tmp=$(mktemp -d)

prepare() {  # $1 tag, $2 test file -> prints the file pytest should run
  local tag=$1 src=$2
  : > "$OUT/$tag.log"
  if [[ $MODE != forward ]]; then echo "$src"; return; fi  # train, asis: the file as written
  mkdir -p "$tmp/$tag"
  cp "$(dirname "$src")"/*.py "$tmp/$tag/"  # FA3's padding.py and test_util.py travel with it
  "$py" "$shim/forward_only.py" "$src" "$tmp/$tag/$(basename "$src")" "$tmp/$tag.dropped" >&2 || return 1
  { echo "== forward-only copy of $src: dropped"; cat "$tmp/$tag.dropped"; echo; } >> "$OUT/$tag.log"
  echo "$tmp/$tag/$(basename "$src")"
}

run_one() {  # $1 tag, $2 test file, $3 functions, $4 budget seconds
  local tag=$1 file=$2 funcs=$3 budget=$4 ids=() f
  for f in $funcs; do ids+=("$file::$f"); done
  echo "== $tag: $file ($MODE), budget ${budget}s, stride $FA_COMPAT_STRIDE offset $FA_COMPAT_OFFSET per-function cap '$FA_COMPAT_PER_FUNC'"
  [[ $tag == fa3 ]] && echo "   FA3 switches: ${FA3_ENV:-none}"
  ( [[ $tag == fa3 && $MODE == forward ]] && export FLASH_ATTENTION_DISABLE_BACKWARD=TRUE
    [[ $tag == fa3 && -n $FA3_ENV ]] && export $FA3_ENV
    cd "$(dirname "$file")" && FA_COMPAT_BUDGET_S=$budget FA_COMPAT_SUMMARY="$OUT/${tag}_summary.md" \
      timeout -s INT -k 30 $((budget + 45)) "$py" -m pytest -q -p fa_compat_plugin -p no:cacheprovider \
      --rootdir "$(dirname "$file")" -c /dev/null --junitxml "$OUT/${tag}_junit.xml" -o junit_family=xunit1 \
      --tb=line -rN "${collect[@]}" ${PYTEST_ARGS:-} "${ids[@]}" ) \
    >> "$OUT/${tag}.log" 2>&1
  echo "pytest exit $? (log: $OUT/${tag}.log)"
  [[ -f $OUT/${tag}_summary.md ]] && cat "$OUT/${tag}_summary.md"
}

[[ -n $FA2_TEST ]] && FA2_TEST=$(realpath -m "$FA2_TEST")
[[ -n $FA3_TEST ]] && FA3_TEST=$(realpath -m "$FA3_TEST")
files=()
[[ -n $FA2_TEST && -f $FA2_TEST ]] && files+=(fa2) || echo "FA2: no test file (FA2_TEST=$FA2_TEST), left out"
[[ -n $FA3_TEST && -f $FA3_TEST ]] && files+=(fa3) || echo "FA3: no test file (FA3_TEST=$FA3_TEST), left out"
n=${#files[@]}
for tag in "${files[@]}"; do
  src=FA2_TEST; funcs=$FA2_FUNCS
  [[ $tag == fa3 ]] && { src=FA3_TEST; funcs=$FA3_FUNCS; }
  file=$(prepare $tag "${!src}") || { echo "$tag: could not prepare ${!src}"; continue; }
  left=$(( TIMEOUT - ($(date +%s) - t0) - 45 * n ))   # 45 s a file for start-up and collection
  budget=$(( left / n )); (( budget < 30 )) && budget=30
  run_one $tag "$file" "$funcs" $budget
  n=$((n - 1))
done
rm -rf "$tmp"
echo "total $(( $(date +%s) - t0 )) s; summaries in $OUT"
