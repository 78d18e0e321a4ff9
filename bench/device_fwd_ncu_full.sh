#!/usr/bin/env bash
# ncu --set full of flashjit's fa3_sm90 forward and FlashAttention-4's sm90 forward, bf16, at
# head dim x sequence x causal shapes (B*S 16K, H*D 2048: bench/profile_call.py --pass forward),
# for issue 25's per-tile fixed cost at short sequences. Per kernel and shape: the details page
# and the source page (SASS, CSV: bench/ncu_sass_summary.py sums it by opcode), tarred into
# $OUT/ncu_fwd.tgz.
#   SHAPES="128x1024x0 128x4096x0" bash bench/device_fwd_ncu_full.sh
# (carry the build's libflashjit.so as FLASHJIT_LIB, and FA4 from ../shared/tools/fa4_setup.sh on PYTHONPATH)
set -u
root=$PWD
export FLASHJIT_CACHE_DIR=/tmp/fj-cache PYTHONUNBUFFERED=1
R=$OUT/ncu_fwd; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv > $R/gpu.txt
for shape in ${SHAPES:-128x1024x0 128x4096x0}; do  # DxSxCAUSAL
  IFS=x read -r d s c <<< "$shape"
  for b in "flashjit:regex:flashjit_fa3" "fa4:regex:flash_fwd|FlashAttentionForward"; do
    name=${b%%:*}; kernel=${b#*:}
    tag=${name}_d${d}_s${s}_c${c}
    timeout 240 ncu -k "$kernel" -s 2 -c 1 --set full --import-source no -o $R/$tag \
      python3 bench/profile_call.py --pass forward --backend $name --d $d --s $s --causal $c > $R/$tag.log 2>&1
    echo "$tag rc=$?"
    ncu -i $R/$tag.ncu-rep --page details > $R/$tag.details.txt 2>&1
    ncu -i $R/$tag.ncu-rep --page source --csv --print-source sass > $R/$tag.sass.csv 2>&1
    rm -f $R/$tag.ncu-rep
  done
done
cd $OUT && tar czf ncu_fwd.tgz ncu_fwd && rm -rf ncu_fwd
