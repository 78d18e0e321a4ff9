#!/usr/bin/env bash
# The Python package (pyproject.toml, python/flashjit) as a user installs it: a virtual
# environment with PyTorch from PyPI, `pip install .` (scikit-build-core builds libflashjit.so and
# the torch op's libflashjit_torch_op.so with the project's CMake into build-python/), then
# tests/python with pytest against the installed package. No GPU needed (numerics run in the GPU
# suite on the device). The venv is kept in build-venv/ (FLASHJIT_VENV overrides) and reused; a
# first run downloads ~3 GB of PyTorch and its CUDA libraries. transformers (a few tens of MB of
# prebuilt wheels with its dependencies) is pinned to the version the device runs, so the tests of
# flashjit.transformers, which read its mask functions, see the code they will meet there.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/packages.sh
ensure_packages "${build_packages[@]}" python3-venv
venv=$(realpath -m "${FLASHJIT_VENV:-build-venv}")  # absolute: pytest runs from a temp folder
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
py="$venv/bin/python"
"$py" -m pip install -q --upgrade pip
"$py" -c "import torch, pytest" 2>/dev/null || "$py" -m pip install -q "torch>=2.4" pytest
"$py" -c "import transformers" 2>/dev/null || "$py" -m pip install -q "transformers==5.17.0"
"$py" -c "import matplotlib" 2>/dev/null || "$py" -m pip install -q matplotlib  # flashjit.bench's plot
# The wheel with torch.ops.flashjit.attention's C++ kernel (torch_op/) and the eager fast path's
# extension (eager/), built against the venv's torch (pip builds in an isolated environment
# without it); the tests then require both in use.
"$py" -m pip install -q . -Ccmake.define.FLASHJIT_TORCH_PYTHON="$py" -Ccmake.define.FLASHJIT_BUILD_TORCH_OP=ON \
  -Ccmake.define.FLASHJIT_BUILD_EAGER=ON
export FLASHJIT_REQUIRE_TORCH_OP=1 FLASHJIT_REQUIRE_EAGER=1
# From outside the checkout, so `import flashjit` is the installed package, not python/.
root=$PWD
cd "$(mktemp -d)"
"$py" -m pytest -q -p no:cacheprovider --import-mode=importlib "$root/tests/python"
