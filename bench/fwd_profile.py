"""One forward call of a backend for ncu (issue 25's speed): bf16, [batch, seq, heads, dim] inputs
larger than L2, the call run --calls times (the first compiles where the backend JIT-compiles).

    ncu -k regex:flashjit_fa3 -s 2 -c 1 python3 bench/fwd_profile.py --backend flashjit
    ncu -k regex:'flash_fwd|FlashAttentionForward' -s 2 -c 1 python3 bench/fwd_profile.py --backend fa4
"""
import argparse

import torch

from flashjit.bench import backends


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
    q, k, v = (torch.randn(batch, args.s, heads, args.d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    make = backends([args.backend])[args.backend]
    if isinstance(make, str):
        raise SystemExit("%s: %s" % (args.backend, make))
    call = make(q, k, v, bool(args.causal))
    for _ in range(args.calls):
        call()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
