#!/usr/bin/env bash
# ncu on two decode cells, flashjit's kernel and SDPA cuDNN's in one process (bench/decode_profile.py).
# Usage (on the device, repo root, .carry/build carried): bash bench/decode_profile.sh; logs under $OUT.
set -u
OUT=${OUT:-/tmp/flashjit-out}
mkdir -p "$OUT"
if [[ -d .carry/build ]]; then rm -rf build && mv .carry/build build; fi
export FLASHJIT_CACHE_DIR=/tmp/flashjit-cache-profile
for cell in 1,32,8,32768 16,32,8,4096; do
  log="$OUT/ncu_${cell//,/_}.txt"
  # InstructionStats and ComputeWorkloadAnalysis: the instruction mix and the busiest pipe, the
  # open question against cuDNN's kernel (bench/NOTES.md, 12).
  timeout 150 ncu --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section InstructionStats --section ComputeWorkloadAnalysis \
    -k regex:'flashjit_decode|sdpa' -c 8 \
    python3 bench/decode_profile.py --cell "$cell" > "$log" 2>&1
  echo "cell $cell rc=$?"
  grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|Grid Size|Block Size|Warp Cycles Per Issued" "$log"
done
