"""Where a backward call's GPU time goes, kernel by kernel, for each backend (issue 24's speed):
the forward recorded once, the backward run --calls times under torch.profiler, each kernel's
CUDA time per call. bf16, the prefill grid's shapes (B*S = 16K, H*D = 2048).

    python3 bench/bwd_kernel_split.py --cells 64:4096:0,128:1024:0 --backends flashjit,sdpa-flash
"""
import argparse
import collections

import torch
from torch.profiler import ProfilerActivity, profile

from flashjit.bench import backends, backward_of


def split(backend, make, d, s, causal, calls, tokens, width):
    batch, heads = max(1, tokens // s), max(1, width // d)
    q, k, v, dout = (torch.randn(batch, s, heads, d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    call = backward_of(make, dout)(q, k, v, causal)
    for _ in range(3):  # compiles, allocations and clocks outside the profile
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    us = collections.defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            us[e.name] += e.device_time / calls
    return us


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cells", default="64:4096:0,128:1024:0,128:4096:0", help="D:S:causal, comma separated")
    p.add_argument("--backends", default="flashjit,sdpa-flash")
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--width", type=int, default=2048)
    args = p.parse_args()
    makers = backends(args.backends.split(","))
    for cell in args.cells.split(","):
        d, s, causal = (int(x) for x in cell.split(":"))
        for name, make in makers.items():
            us = split(name, make, d, s, bool(causal), args.calls, args.tokens, args.width)
            total = sum(us.values())
            print("D%d S%d %s %s: %.1f us a call" % (d, s, "causal" if causal else "full", name, total))
            for kernel, t in sorted(us.items(), key=lambda kv: -kv[1]):
                print("    %8.1f us  %5.1f%%  %s" % (t, 100 * t / total, kernel[:110]))
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
