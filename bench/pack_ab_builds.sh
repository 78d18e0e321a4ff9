#!/usr/bin/env bash
# Packs builds to compare on the device into .carry/ab/NAME (flashjit-bench and test_gpu,
# stripped; the engine is linked into both, so each build's templates travel with them; and
# libflashjit.so where DIR has one).
#   bash bench/pack_ab_builds.sh base=/tmp/base new=build      (DIR: a build folder or a copy)
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .carry/ab
for spec in "$@"; do
  name=${spec%%=*}; dir=${spec#*=}
  mkdir -p .carry/ab/$name
  for f in flashjit-bench test_gpu; do
    src=$(ls "$dir/$f" "$dir/tools/$f" "$dir/tests/gpu/$f" 2>/dev/null | head -1 || true)
    [[ -n $src ]] || { echo "no $f in $dir" >&2; exit 1; }
    cp "$src" .carry/ab/$name/ && strip .carry/ab/$name/$f
  done
  # The engine's library too where the folder has it (bench/ab_libs.py's --lib and --base-lib).
  lib=$(ls "$dir/libflashjit.so" 2>/dev/null || true)
  [[ -z $lib ]] || { cp -L "$lib" .carry/ab/$name/ && strip --strip-unneeded .carry/ab/$name/libflashjit.so; }
done
du -sh .carry/ab
