#!/usr/bin/env bash
# Builds flashjit-bench, test_gpu and libflashjit.so once per template variant, for an A/B on the
# device: each variant is this checkout's templates with patch files applied (kernels are embedded
# in the engine, so a variant costs one incremental build), packed into .carry/ab/NAME by
# pack_ab_builds.sh (the tools for device_bwd90_ab.sh, the library for ab_libs.py).
#   bash bench/build_template_variants.sh base= fence=/tmp/fence.patch both=/tmp/fence.patch+/tmp/bulk.patch
# NAME= (no patch) is the checkout as it is. templates/ must have no uncommitted change; it is
# left as it was, also when a patch or a build fails. BUILD_DIR (build) must be configured.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
git diff --quiet -- templates || { echo "templates/ has uncommitted changes: commit or stash them first" >&2; exit 1; }
out=$(mktemp -d /tmp/flashjit-variants.XXXXXX)
restore() { git checkout -- templates; }
trap restore EXIT
specs=()
for spec in "$@"; do
  name=${spec%%=*}; patches=${spec#*=}
  [[ $name =~ ^[A-Za-z0-9_]+$ ]] || { echo "variant name '$name': letters, digits and _ only" >&2; exit 1; }
  restore
  IFS=+ read -r -a list <<< "$patches"
  for p in "${list[@]}"; do
    [[ -z $p ]] && continue
    git apply "$p" || { echo "variant $name: $p does not apply" >&2; exit 1; }
  done
  echo "== $name: ${patches:-(as checked out)}"
  ninja -C "$build" flashjit-bench test_gpu flashjit | tail -1
  mkdir -p "$out/$name"
  cp "$build/tools/flashjit-bench" "$build/tests/gpu/test_gpu" "$out/$name/"
  cp -L "$build/libflashjit.so" "$out/$name/"
  specs+=("$name=$out/$name")
done
restore
ninja -C "$build" flashjit-bench test_gpu flashjit | tail -1  # the build matches the checkout again
bash bench/pack_ab_builds.sh "${specs[@]}"
rm -rf "$out"
