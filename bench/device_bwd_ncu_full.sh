#!/usr/bin/env bash
# ncu --set full of flashjit's backward main kernel and FlashAttention-2's (SDPA flash), bf16, at
# head dim x sequence shapes (B*S 16K, H*D 2048: bench/profile_call.py), for reading stalls and
# shared-memory wavefronts per SASS instruction. Writes, per kernel and shape, the details page,
# the source page (SASS, CSV: bench/ncu_sass_summary.py sums it by opcode) and the raw metrics,
# tarred into $OUT/ncu.tgz.
#   SHAPES="64x16384 256x4096" bash bench/device_bwd_ncu_full.sh      (carry .carry/op)
# BACKENDS (flashjit sdpa-flash) may name fa4 too: FlashAttention-4's sm90 backward (install it
# first: bash .whl/fa4_setup.sh, PYTHONPATH as that script says). FLASHJIT_LIB overrides the library.
set -u
root=$PWD
export FLASHJIT_LIB=${FLASHJIT_LIB:-$root/.carry/op/libflashjit.so} FLASHJIT_CACHE_DIR=/tmp/fj-cache PYTHONUNBUFFERED=1
export PYTHONPATH=$root/python${PYTHONPATH:+:$PYTHONPATH}
R=$OUT/ncu; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.limit --format=csv > $R/gpu.txt
for shape in ${SHAPES:-64x16384}; do  # DxS, space-separated
  d=${shape%x*}; s=${shape#*x}
  for name in ${BACKENDS:-flashjit sdpa-flash}; do
    case $name in  # each backend's main backward kernel (not its preprocess or convert)
      flashjit) kernel=regex:flashjit_bwd_main ;;
      sdpa-flash) kernel=regex:flash_bwd_dq_dk_dv ;;
      fa4) kernel=regex:BackwardSm90 ;;
      *) echo "no kernel name known for backend $name" >&2; continue ;;
    esac
    tag=${name}_d${d}_s${s}
    timeout 240 ncu -k "$kernel" -s 1 -c 1 --set full --import-source no -o $R/$tag \
      python3 bench/profile_call.py --backend $name --d $d --s $s > $R/$tag.log 2>&1
    echo "$tag rc=$?"
    ncu -i $R/$tag.ncu-rep --page details > $R/$tag.details.txt 2>&1
    ncu -i $R/$tag.ncu-rep --page source --csv --print-source sass > $R/$tag.sass.csv 2>&1
    ncu -i $R/$tag.ncu-rep --page raw --csv > $R/$tag.raw.csv 2>&1
    rm -f $R/$tag.ncu-rep
  done
done
cd $OUT && tar czf ncu.tgz ncu && rm -rf ncu
