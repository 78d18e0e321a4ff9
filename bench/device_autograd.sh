#!/usr/bin/env bash
# Issue 24's autograd item on the device (a GPU machine with PyTorch, no network): gradients through
# flashjit (flashjit::attention_train -> flashjit::attention_backward -> flashjit_backward_v1).
# Runs the Python GPU tests that concern autograd (tests/python/gpu/test_autograd_gpu.py, and
# test_sdpa_backward_gpu.py: F.scaled_dot_product_attention's backward with flashjit as SDPA's flash
# backend; test_deterministic_gpu.py: the deterministic mode's bitwise repeats) with the torch op's C++
# forward kernel and with the Python one, and the CPU autograd
# tests (with the SDPA backend's). Both libraries
# are built on the development machine and carried:
#   bash bench/pack_op_carry.sh        # -> .carry/op/{libflashjit.so, libflashjit_torch_op.so}
# then, from the repo root on the device (carry .carry/op):
#   bash bench/device_autograd.sh [load] [tests] [tests_python_kernel] [cpu_tests]
# Logs and JUnit XML go to $OUT.
set -u
OUT=${OUT:-/tmp/flashjit-out}
mkdir -p "$OUT"
root=$PWD
export FLASHJIT_LIB=$root/.carry/op/libflashjit.so  # libflashjit_torch_op.so is found beside it
export FLASHJIT_CACHE_DIR=/tmp/fj-cache PYTHONUNBUFFERED=1
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv | tee "$OUT/gpu.txt"
steps=("$@"); [[ ${#steps[@]} -gt 0 ]] || steps=(load tests tests_python_kernel cpu_tests)
for step in "${steps[@]}"; do
  start=$SECONDS
  case $step in
    load)  # the kernels in use and one backward against the float64 reference
      python3 - > "$OUT/load.log" 2>&1 <<'PY'
import torch, flashjit
from flashjit import ops
print("torch", torch.__version__, "| forward kernel", ops.kernel_impl(), "|", ops.python_kernel_reason())
print([l for l in torch._C._dispatch_dump("flashjit::attention_backward").splitlines() if l.startswith("CUDA")])
q, k, v = (torch.randn(2, 300, 8, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
out = flashjit.flash_attn_func(q, k, v, causal=True)
print("grad_fn", type(out.grad_fn).__name__)
out.float().square().sum().backward()
print("grad norms", [round(t.grad.float().norm().item(), 3) for t in (q, k, v)])
PY
      echo "load rc=$?"; tail -5 "$OUT/load.log" ;;
    tests)
      timeout ${PYTEST_TIMEOUT:-400} python3 -m pytest -q -rs -s -p no:cacheprovider ${PYTEST_ARGS:-tests/python/gpu/test_autograd_gpu.py tests/python/gpu/test_sdpa_backward_gpu.py tests/python/gpu/test_deterministic_gpu.py} \
        --junitxml="$OUT/pytest_autograd_cpp.xml" > "$OUT/pytest_autograd_cpp.log" 2>&1
      echo "autograd gpu tests (C++ forward kernel) rc=$?"; grep -E "grad errors|passed|failed|error|FAILED|ERROR|SKIP" "$OUT/pytest_autograd_cpp.log" | tail -40 ;;
    tests_python_kernel)
      FLASHJIT_TORCH_OP=0 timeout ${PYTEST_TIMEOUT:-400} python3 -m pytest -q -rs -p no:cacheprovider \
        ${PYTEST_ARGS:-tests/python/gpu/test_autograd_gpu.py tests/python/gpu/test_sdpa_backward_gpu.py tests/python/gpu/test_deterministic_gpu.py} --junitxml="$OUT/pytest_autograd_python.xml" \
        > "$OUT/pytest_autograd_python.log" 2>&1
      echo "autograd gpu tests (Python forward kernel) rc=$?"; grep -E "passed|failed|error|FAILED|ERROR|SKIP" "$OUT/pytest_autograd_python.log" | tail -25 ;;
    cpu_tests)  # the CPU autograd tests on the device's torch (wiring, registration, refusals)
      timeout ${PYTEST_TIMEOUT:-300} python3 -m pytest -q -rs -p no:cacheprovider tests/python/test_autograd.py \
        tests/python/test_torch_op.py tests/python/test_sdpa.py tests/python/test_sdpa_backward.py --junitxml="$OUT/pytest_autograd_cpu.xml" > "$OUT/pytest_autograd_cpu.log" 2>&1
      echo "autograd cpu tests rc=$?"; grep -E "passed|failed|error|FAILED|ERROR" "$OUT/pytest_autograd_cpu.log" | tail -25 ;;
  esac
  echo "[$step took $((SECONDS - start)) s]"
done
