#!/usr/bin/env bash
# Issue 23's package test on the device: `pip wheel .` (scikit-build-core driving CMake, the torch
# op and the eager fast path's extension built against the device's PyTorch), installed into the device's PyTorch environment (a venv),
# then used with the CUDA toolkit hidden (/usr/local/cuda moved away for the run, no CUDA_HOME):
# NVRTC must come from the nvidia-cuda-nvrtc wheel a CUDA PyTorch installs. Runs, from a folder
# outside the checkout so the installed package is the one imported: which NVRTC and library
# were loaded, then tests/python whole (the CPU tests and every Python GPU test).
#   bash bench/device_wheel.sh          (logs to $OUT)
set -u
OUT=${OUT:-/tmp/flashjit-out}
mkdir -p "$OUT"
root=$PWD
start=$SECONDS
# nlohmann/json's headers and CMake package, carried where the device has none (.carry/nlohmann).
# xxhash.h (header-only use) likewise, from .carry/deps/include.
json_dir=()
if [[ ! -d /usr/include/nlohmann && -d .carry/nlohmann ]]; then
  json_dir=(-Ccmake.define.nlohmann_json_DIR="$root/.carry/nlohmann/share/cmake/nlohmann_json")
fi
if [[ ! -e /usr/include/xxhash.h && -e .carry/deps/include/xxhash.h ]]; then
  json_dir+=(-Ccmake.define.XXHASH_INCLUDE_DIR="$root/.carry/deps/include")
fi
# The compiler: WHEEL_CXX, else the image's default ($CXX: /opt/gcc's, which links libstdc++
# statically; CMakeLists.txt keeps those symbols private).
cxx=${WHEEL_CXX:-${CXX:-$(command -v g++)}}
cc=${cxx%++}cc; [[ -x $cc ]] || cc=${cxx%g++}gcc
echo "compiler: $cxx: $("$cxx" --version | head -1) (image default: $(g++ --version | head -1))"
echo "libstdc++ in a PyTorch process: $(python3 -c 'import torch; print(sorted({l.split()[-1] for l in open("/proc/self/maps") if "libstdc++" in l}))')"
rm -rf build-python /tmp/wheel  # a CMake cache of another compiler would be refused
CC=$cc CXX=$cxx python3 -m pip wheel -q --no-deps --no-build-isolation -w /tmp/wheel . \
  -Ccmake.define.FLASHJIT_TORCH_PYTHON="$(command -v python3)" -Ccmake.define.FLASHJIT_BUILD_TORCH_OP=ON \
  -Ccmake.define.FLASHJIT_BUILD_EAGER=ON -Ccmake.build-type=Release "${json_dir[@]}" > "$OUT/wheel_build.log" 2>&1
echo "wheel build rc=$? ($((SECONDS - start)) s): $(ls /tmp/wheel)"
# Into the environment that holds PyTorch (the device's python3 is itself a venv, whose packages a
# --system-site-packages venv would not see).
py=$(command -v python3)
"$py" -m pip install -q --no-deps --no-index /tmp/wheel/flashjit-*.whl
echo "install rc=$? into $("$py" -c 'import sys; print(sys.prefix)')"
toolkit=/usr/local/cuda
hidden=
if [[ -e $toolkit ]]; then mv "$toolkit" "$toolkit.hidden" && hidden=1; fi
restore() { [[ -n $hidden ]] && mv "$toolkit.hidden" "$toolkit"; hidden=; }
trap restore EXIT
cd "$(mktemp -d)"
clean_env=(env -u CUDA_HOME -u CUDA_PATH -u FLASHJIT_LIB -u PYTHONPATH -u FLASHJIT_NVRTC_PATH
           PATH="$(dirname "$py"):/usr/bin:/bin" FLASHJIT_CACHE_DIR=/tmp/fj-wheel-cache FLASHJIT_REQUIRE_TORCH_OP=1
           FLASHJIT_REQUIRE_EAGER=1)
"${clean_env[@]}" python - > "$OUT/wheel_use.log" 2>&1 <<'PY'
import os, torch, flashjit
from flashjit import ops
q, k, v = (torch.randn(2, 333, 8, 128, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
out = flashjit.flash_attn_func(q, k, v, causal=True)
out.float().square().sum().backward()
with torch.no_grad():
    before = ops.eager_calls()
    again = flashjit.flash_attn_func(q, k, v, causal=True)
    print("eager path:", ops.eager_reason() or "in use", "| calls it ran:", ops.eager_calls() - before,
          "| same output:", torch.equal(again, out.detach()))
torch.cuda.synchronize()
maps = open("/proc/self/maps").read()
libs = sorted({l.split()[-1] for l in maps.splitlines() if "nvrtc" in l or "flashjit" in l})
print("toolkit present:", os.path.exists("/usr/local/cuda"), "| kernel:", ops.kernel_impl())
print("library:", flashjit.library_path())
print("\n".join(libs))
print("grad norms", [round(t.grad.float().norm().item(), 2) for t in (q, k, v)])
PY
echo "use rc=$?"; cat "$OUT/wheel_use.log"
# WHEEL_PYTEST_TIMEOUT bounds the suite (seconds) where the device call's limit is near.
timeout "${WHEEL_PYTEST_TIMEOUT:-3600}" "${clean_env[@]}" python -m pytest -q -p no:cacheprovider \
  --import-mode=importlib "$root/tests/python" > "$OUT/wheel_pytest.log" 2>&1
echo "pytest rc=$?"; tail -3 "$OUT/wheel_pytest.log"
restore
echo "[wheel took $((SECONDS - start)) s]"
