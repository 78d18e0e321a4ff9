"""One attention call of a backend for ncu (issues 24 and 25's speed): bf16, [batch, seq, heads,
dim] inputs larger than L2; --pass forward runs the forward --calls times (the first compiles
where the backend JIT-compiles), --pass backward records the forward once and runs the backward
--calls times.

    ncu -k regex:flashjit_bwd_main -c 1 python3 bench/profile_call.py --backend flashjit
    ncu -k regex:flash_bwd -c 1 python3 bench/profile_call.py --backend sdpa-flash
    ncu -k regex:flashjit_fa3 -s 2 -c 1 python3 bench/profile_call.py --pass forward --backend flashjit
    ncu -k regex:'flash_fwd|FlashAttentionForward' -s 2 -c 1 python3 bench/profile_call.py --pass forward --backend fa4
"""
import argparse

import torch

from flashjit.bench import backends, backward_of


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pass", dest="which", choices=("forward", "backward"), default="backward")
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
    make = backends([args.backend])[args.backend]
    if isinstance(make, str):  # flashjit.bench's note for a backend that is not importable
        raise SystemExit("%s: %s" % (args.backend, make))
    if args.which == "backward":
        make = backward_of(make, dout)
    call = make(q, k, v, bool(args.causal))
    for _ in range(args.calls):
        call()
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
