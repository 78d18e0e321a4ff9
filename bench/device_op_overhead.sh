#!/usr/bin/env bash
# Issue 23 on the device (a GPU machine with PyTorch >= 2.10, e.g. 2.11, and no network): the
# torch op's C++ kernel (torch_op/) and the eager fast path (eager/) load on the device's torch and
# are in use, the Python GPU tests pass with them, with the Python kernel (FLASHJIT_TORCH_OP=0) and
# with the fast path off (FLASHJIT_EAGER=0), and bench/op_overhead.py measures host time per call.
# The libraries are built on the development machine and carried:
#   bash bench/pack_op_carry.sh
#     # -> .carry/op/{libflashjit.so, libflashjit_torch_op.so, _flashjit_eager.abi3.so, stub_engine.so}
# then, from the repo root on the device (carry .carry/op):
#   bash bench/device_op_overhead.sh [load] [tests] [tests_python_kernel] [tests_no_eager] [bench]
# Logs and JSON go to $OUT.
set -u
OUT=${OUT:-/tmp/flashjit-out}
mkdir -p "$OUT"
root=$PWD
# libflashjit_torch_op.so and _flashjit_eager.abi3.so are found beside it
export FLASHJIT_LIB=$root/.carry/op/libflashjit.so
export FLASHJIT_REQUIRE_TORCH_OP=1 FLASHJIT_REQUIRE_EAGER=1 FLASHJIT_CACHE_DIR=/tmp/fj-cache PYTHONUNBUFFERED=1
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv | tee "$OUT/gpu.txt"
steps=("$@"); [[ ${#steps[@]} -gt 0 ]] || steps=(load tests tests_python_kernel tests_no_eager bench)
for step in "${steps[@]}"; do
  start=$SECONDS
  case $step in
    load)  # the kernel in use, its registration, and one call of each kernel against the other
      python3 - > "$OUT/load.log" 2>&1 <<'PY'
import os, subprocess, sys, torch
from flashjit import ops
import flashjit
print("torch", torch.__version__, "| kernel", ops.kernel_impl(), "|", ops.python_kernel_reason(),
      "| eager", ops.eager_reason() or "in use", ops._EAGER)
print([l for l in torch._C._dispatch_dump("flashjit::attention").splitlines() if l.startswith("CUDA")])
q, k, v = (torch.randn(2, 300, 8, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
out, lse, _ = flashjit.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
torch.save((q, k, v, out, lse), "/tmp/op_load.pt")
code = ("import torch, flashjit; from flashjit import ops; q, k, v, o, l = torch.load('/tmp/op_load.pt'); "
        "o2, l2, _ = flashjit.flash_attn_func(q, k, v, causal=True, return_attn_probs=True); "
        "print(ops.kernel_impl(), torch.equal(o, o2), torch.equal(l, l2))")
print("python kernel, same outputs:", subprocess.run([sys.executable, "-c", code], env=dict(os.environ, FLASHJIT_TORCH_OP="0"),
                                                      capture_output=True, text=True).stdout.strip())
with torch.no_grad():
    before = ops.eager_calls()
    fast = flashjit.flash_attn_func(q, k, v, causal=True)
    taken = ops.eager_calls() - before
    print("eager fast path taken:", taken, "| same output as the op:",
          torch.equal(fast, torch.ops.flashjit.attention_dense(q, k, v, 0.0, True, -1, -1, 0.0)))
PY
      echo "load rc=$?"; cat "$OUT/load.log" | tail -5 ;;
    tests)
      timeout ${PYTEST_TIMEOUT:-300} python3 -m pytest -q -p no:cacheprovider \
        ${PYTEST_ARGS:-tests/python/gpu tests/python/test_torch_op.py tests/python/test_eager.py} \
        --junitxml="$OUT/pytest_gpu_cpp.xml" > "$OUT/pytest_gpu_cpp.log" 2>&1
      echo "python gpu tests (C++ kernel) rc=$?"; grep -E "passed|failed|error|FAILED|ERROR" "$OUT/pytest_gpu_cpp.log" | tail -25 ;;
    tests_python_kernel)
      FLASHJIT_TORCH_OP=0 FLASHJIT_REQUIRE_TORCH_OP=0 timeout ${PYTEST_TIMEOUT:-300} python3 -m pytest -q -p no:cacheprovider \
        ${PYTEST_ARGS:-tests/python/gpu} --junitxml="$OUT/pytest_gpu_python.xml" > "$OUT/pytest_gpu_python.log" 2>&1
      echo "python gpu tests (Python kernel) rc=$?"; grep -E "passed|failed|error|FAILED|ERROR" "$OUT/pytest_gpu_python.log" | tail -25 ;;
    tests_no_eager)  # every call through the operator, as before the fast path
      FLASHJIT_EAGER=0 FLASHJIT_REQUIRE_EAGER=0 timeout ${PYTEST_TIMEOUT:-300} python3 -m pytest -q -p no:cacheprovider \
        ${PYTEST_ARGS:-tests/python/gpu} --junitxml="$OUT/pytest_gpu_no_eager.xml" > "$OUT/pytest_gpu_no_eager.log" 2>&1
      echo "python gpu tests (FLASHJIT_EAGER=0) rc=$?"; grep -E "passed|failed|error|FAILED|ERROR" "$OUT/pytest_gpu_no_eager.log" | tail -25 ;;
    bench)
      stub=$root/.carry/op/stub_engine.so
      timeout ${BENCH_TIMEOUT:-400} python3 bench/op_overhead.py ${BENCH_ARGS:-$([[ -f $stub ]] && echo --stub-engine "$stub")} \
        --json "$OUT/op_overhead.json" \
        2>&1 | tee "$OUT/op_overhead.log" | tail -40 ;;
  esac
  echo "[$step took $((SECONDS - start)) s]"
done
