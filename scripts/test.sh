#!/usr/bin/env bash
# Set up, build, and run the whole test suite through ctest. The GPU suite reports SKIPPED on
# machines without a GPU; `ctest -L cpu` / `-L gpu` pick one suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
ctest --test-dir build --output-on-failure -j"$(nproc)" "$@"
