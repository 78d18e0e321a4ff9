#!/usr/bin/env bash
# Registers, local frame (spills) and static shared memory of compiled kernels, with no GPU:
# warms the variants the arguments name (flashjit warmup's flags) into a scratch cache and reads
# each cubin (scripts/cubin_resources.py).
# Usage: scripts/kernel_resources.sh --arch sm_90a --dtype bf16 --head-dim 128 --all-tilings
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$root/build/tools/flashjit" warmup --cache-dir "$scratch" "$@" >/dev/null
find "$scratch" -name '*.fjk' -print0 | sort -z | xargs -0 python3 "$root/scripts/cubin_resources.py"
