#!/usr/bin/env python3
"""One decode cell's kernels, flashjit then SDPA cuDNN, each launched a few times: a driver for
ncu (bf16, D = 128, one query token, random caches larger than L2).

    ncu --section SpeedOfLight ... python3 bench/decode_profile.py --cell 1,32,8,32768
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import flashjit_ctypes as fj  # noqa: E402

LAUNCHES = 3  # the first may compile or load; ncu reads the later ones


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", default="build/libflashjit.so")
    p.add_argument("--cell", default="1,32,8,32768", help="B,Hq,Hkv,L")
    a = p.parse_args()
    b, hq, hkv, length = (int(x) for x in a.cell.split(","))
    lib = fj.load(a.lib)
    torch.manual_seed(0)
    q = torch.randn(b, 1, hq, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, length, hkv, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    o = torch.empty_like(q)
    args = fj.make_args_v2(q, k, v, o)
    stream = torch.cuda.current_stream().cuda_stream
    for _ in range(LAUNCHES):
        fj.forward_args(lib, args, stream)
    torch.cuda.synchronize()
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        for _ in range(LAUNCHES):
            F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
