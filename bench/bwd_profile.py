"""One backward call of a backend for ncu (issue 24's speed): bf16, [batch, seq, heads, dim] inputs
larger than L2, the forward recorded once, the backward run --calls times.

    ncu -k regex:flashjit_bwd_main -c 1 python3 bench/bwd_profile.py --backend flashjit
    ncu -k regex:flash_bwd -c 1 python3 bench/bwd_profile.py --backend sdpa-flash
"""
import argparse

import torch

from flashjit.bench import backends, backward_of


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", default="flashjit")
    p.add_argument("--d", type=int, default=128)
    p.add_argument("--s", type=int, default=4096)
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--causal", type=int, default=0)
    p.add_argument("--calls", type=int, default=3)
    args = p.parse_args()
    batch, heads = max(1, args.tokens // args.s), max(1, args.width // args.d)
    q, k, v, dout = (torch.randn(batch, args.s, heads, args.d, device="cuda", dtype=torch.bfloat16) for _ in range(4))
    call = backward_of(backends([args.backend])[args.backend], dout)(q, k, v, bool(args.causal))
    for _ in range(args.calls):
        call()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
