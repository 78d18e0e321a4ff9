#!/usr/bin/env bash
# Issue 27 on a machine of several GPUs (nvidia-h100-x4 or x2): PyTorch's context parallelism with
# flashjit as SDPA's flash implementation, checked against one GPU, then its scaling against the
# same ring on PyTorch's own flash kernels. Libraries built here and carried (.carry/op from
# bench/pack_op_carry.sh; .carry/build for the C++ GPU tests).
#
#   bash bench/device_cp.sh [tests] [check] [scaling]      (all three when none is named)
#
# tests:   on the last GPU, beside the rest: the backward's C++ GPU tests, the sm_margin planning
#          test, and the Python GPU tests of the backward, autograd, SDPA backward and the ring
#          simulated on one GPU.
# check:   examples/context_parallel.py --check on 2 GPUs and on all of them: causal (balanced,
#          all-gather and all-to-all), non-causal, forward and backward.
# scaling: bench/cp_scaling.py: the one-GPU baseline on the last GPU while 2 GPUs run the ring on
#          the first two, then the ring on all GPUs (SEQS, default 131072,524288), K/V all-gathered
#          and passed (ROTATES); MARGIN=n adds flashjit with n SMs left to NCCL (all-to-all).
# sm_margin: the sm_margin planning test on a real GPU (fa3's persistent grid).
# Logs and JSON lines go to $OUT.
set -u
OUT=${OUT:-/tmp/flashjit-out}
mkdir -p "$OUT"
root=$PWD
if [[ -d .carry/build ]]; then rm -rf build && mv .carry/build build; fi
export FLASHJIT_LIB=$root/.carry/op/libflashjit.so FLASHJIT_CACHE_DIR=/tmp/fj-cache PYTHONUNBUFFERED=1
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # KINDS.md: never multicast
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
last=$((gpus - 1))
nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,power.limit --format=csv | tee "$OUT/gpu.txt"
seqs=${SEQS:-131072,524288}
run_n() {  # run_n N GPU_LIST SCRIPT ARGS...: torchrun on those GPUs
  local n=$1 list=$2; shift 2
  CUDA_VISIBLE_DEVICES=$list timeout "${STEP_TIMEOUT:-400}" python3 -m torch.distributed.run --standalone \
    --nproc_per_node="$n" "$@"
}
first_n() { seq -s, 0 $(($1 - 1)); }

steps=("$@"); [[ ${#steps[@]} -gt 0 ]] || steps=(tests check scaling)
status=0
for step in "${steps[@]}"; do
  start=$SECONDS
  case $step in
    tests)
      (
        export CUDA_VISIBLE_DEVICES=$last
        timeout 300 ./build/tests/gpu/test_gpu -tc="backward*" > "$OUT/bwd_tests.log" 2>&1
        echo "test_gpu backward rc=$?"; grep -E "ERROR|^\[doctest\] (test cases|assertions|Status)" "$OUT/bwd_tests.log" | tail -8
        if [[ -x build/tests/engine/test_engine_sm_margin ]]; then
          ./build/tests/engine/test_engine_sm_margin > "$OUT/sm_margin_test.log" 2>&1
          echo "test_engine_sm_margin rc=$?"; grep -E "SKIPPED|Status" "$OUT/sm_margin_test.log"
        fi
        timeout 400 python3 -m pytest -q -rs -s -p no:cacheprovider tests/python/gpu/test_ring_gpu.py \
          tests/python/gpu/test_autograd_gpu.py tests/python/gpu/test_sdpa_backward_gpu.py > "$OUT/pytest_gpu.log" 2>&1
        echo "python gpu tests rc=$?"; grep -E "^world|passed|failed|FAILED|ERROR" "$OUT/pytest_gpu.log" | tail -30
      ) > "$OUT/tests_step.log" 2>&1 &
      tests_pid=$! ;;
    check)
      for n in 2 $gpus; do
        for opts in "--causal 1 --rotate allgather" "--causal 1 --rotate alltoall" "--causal 0 --rotate allgather"; do
          [[ $n -eq $gpus && $opts == *alltoall* && $gpus -eq 2 ]] && continue
          echo "== $n GPUs $opts"
          run_n "$n" "$(first_n "$n")" examples/context_parallel.py --seq ${CHECK_SEQ:-65536} --check --json $opts \
            >> "$OUT/cp_check.log" 2>&1
          rc=$?; echo "rc=$rc"; [[ $rc -eq 0 ]] || status=1
          grep -E '^\{' "$OUT/cp_check.log" | tail -1
        done
      done ;;
    scaling)
      # The one-GPU baseline runs on the tests' GPU: after them, never beside them.
      if [[ -n ${tests_pid:-} ]]; then wait "$tests_pid"; cat "$OUT/tests_step.log"; tests_pid=; fi
      [[ $gpus -ge 3 ]] && { run_n 1 "$last" bench/cp_scaling.py --seqs "$seqs" --out "$OUT/cp_1gpu.jsonl" \
        > "$OUT/cp_1gpu.log" 2>&1; echo "1 GPU rc=$?"; } &
      one_pid=$!
      [[ $gpus -lt 3 ]] && { run_n 1 0 bench/cp_scaling.py --seqs "$seqs" --out "$OUT/cp_1gpu.jsonl" > "$OUT/cp_1gpu.log" 2>&1; echo "1 GPU rc=$?"; }
      run_n 2 0,1 bench/cp_scaling.py --seqs "$seqs" --out "$OUT/cp_2gpu.jsonl" > "$OUT/cp_2gpu.log" 2>&1
      echo "2 GPUs rc=$?"
      wait $one_pid
      if [[ $gpus -ge 4 ]]; then
        for rotate in ${ROTATES:-allgather alltoall}; do
          run_n "$gpus" "$(first_n "$gpus")" bench/cp_scaling.py --seqs "$seqs" --rotate "$rotate" \
            --out "$OUT/cp_${gpus}gpu.jsonl" >> "$OUT/cp_${gpus}gpu.log" 2>&1
          echo "$gpus GPUs $rotate rc=$?"
        done
      fi
      if [[ -n ${MARGIN:-} ]]; then  # flashjit alone, SMs left to NCCL's passes (all-to-all overlaps them)
        run_n "$gpus" "$(first_n "$gpus")" bench/cp_scaling.py --seqs "$seqs" --rotate alltoall --impls flashjit \
          --sm-margin "$MARGIN" --out "$OUT/cp_margin.jsonl" >> "$OUT/cp_margin.log" 2>&1
        echo "$gpus GPUs alltoall sm_margin $MARGIN rc=$?"; cat "$OUT/cp_margin.jsonl"
      fi
      python3 bench/cp_table.py "$OUT"/cp_*gpu.jsonl --plot "$OUT/cp_scaling.png" | tee "$OUT/cp_table.md" ;;
    sm_margin)
      ./build/tests/engine/test_engine_sm_margin > "$OUT/sm_margin_test.log" 2>&1
      echo "test_engine_sm_margin rc=$?"; grep -E "SKIPPED|ERROR|Status" "$OUT/sm_margin_test.log" ;;
    *) echo "unknown step '$step' (tests, check, scaling, sm_margin)"; status=1 ;;
  esac
  echo "[$step took $((SECONDS - start)) s]"
done
if [[ -n ${tests_pid:-} ]]; then wait "$tests_pid"; cat "$OUT/tests_step.log"; fi
exit $status
