#!/usr/bin/env bash
# The main job: set up, build, then specialize and compile the default variants for sm_80 and
# sm_90a; with a GPU, also run, check against float64 and time them.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec ./build/tools/flashjit-demo "$@"
