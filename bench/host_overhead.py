#!/usr/bin/env python3
"""Host time per call on a tiny problem (B1 S64 H1 D64 fp16), from Python, in one process:
PyTorch SDPA's flash and cuDNN backends against flashjit through its C ABI (ctypes), its torch
operator (torch.ops.flashjit.attention), its FlashAttention-style API and SDPA routed to flashjit.
Measures wall time of 200 back-to-back calls (no sync inside), median of 51 rounds."""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import flashjit_ctypes as fj  # noqa: E402
import flashjit  # noqa: E402


def per_call_us(fn, calls):
    # Rounds short enough that the launch queue never fills (a full queue times the GPU instead).
    rounds = []
    for _ in range(51):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - t) / calls * 1e6)
        torch.cuda.synchronize()
    rounds.sort()
    return rounds[len(rounds) // 2]


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--lib", default="build/libflashjit.so")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--json", help="also write the results here")
    a = p.parse_args()
    lib = fj.load(a.lib)
    q, k, v = (torch.randn(1, 64, 1, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    o = torch.empty_like(q)
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    stream = torch.cuda.current_stream().cuda_stream
    args = fj.make_args(q, k, v, o)
    for _ in range(50):
        fj.forward_args(lib, args, stream)
    res = {"flashjit (ctypes, args prepared once)": per_call_us(lambda: fj.forward_args(lib, args, stream), a.calls),
           "flashjit (ctypes, args built per call)": per_call_us(lambda: fj.forward(lib, q, k, v, o), a.calls)}
    os.environ.setdefault("FLASHJIT_LIB", a.lib)
    import flashjit.ops  # noqa: F401  (defines torch.ops.flashjit.attention)
    op = torch.ops.flashjit.attention
    res["flashjit torch op (torch.ops.flashjit.attention)"] = per_call_us(
        lambda: op(q, k, v, None, None, 0, 0, None, None, None, None, 0.0, False, -1, -1, 0.0, False, False), a.calls)
    res["flashjit.flash_attn_func"] = per_call_us(lambda: flashjit.flash_attn_func(q, k, v), a.calls)
    from torch.nn import attention as nn_attention
    from flashjit import sdpa
    nn_attention.activate_flash_attention_impl(sdpa.IMPL_NAME)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        res["SDPA flash routed to flashjit"] = per_call_us(lambda: F.scaled_dot_product_attention(qt, kt, vt), a.calls)
    nn_attention.restore_flash_attention_impl()
    for name, backend in (("SDPA flash", SDPBackend.FLASH_ATTENTION), ("SDPA cuDNN", SDPBackend.CUDNN_ATTENTION)):
        with sdpa_kernel(backend):
            F.scaled_dot_product_attention(qt, kt, vt)
            res[name] = per_call_us(lambda: F.scaled_dot_product_attention(qt, kt, vt), a.calls)
    for k_, v_ in res.items():
        print("%-52s %7.1f us per call" % (k_, v_))
    if a.json:
        import json
        with open(a.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "us_per_call": res}, f, indent=1)


if __name__ == "__main__":
    main()
