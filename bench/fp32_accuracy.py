"""The exact fp32 backward's error against float64 at long sequences, by tiling (issue 24).

Exact mode (3xTF32) adds each k8 step's products to the accumulators through the tensor cores,
which truncate, unless a tiling leaves room for a fresh tile a step (docs/design/backward.md).
Its error grows with the number of adds, so short test shapes cannot tell whether a tiling stays
exact at S = 4K-16K. This prints dq, dk, dv relative L2 errors against float64 for the tiling the
engine picks (FLASHJIT_TUNE decides: off = the default tiling, offline = the tuned one where
`flashjit tune` stored it), one JSON line a shape.

    FLASHJIT_TUNE=off python3 bench/fp32_accuracy.py --d 64,128 --s 4096
"""
import argparse
import json
import math
import os

import torch


def reference(q, k, v, dout, causal):
    """float64 attention and its gradients; tensors [batch, seq, heads, dim]."""
    q, k, v = (x.double().detach().requires_grad_() for x in (q, k, v))
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
    if causal:
        n_q, n_k = s.shape[-2:]
        s = s.masked_fill(torch.ones(n_q, n_k, dtype=torch.bool, device=s.device).triu(n_k - n_q + 1), float("-inf"))
    out = torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), v)
    return torch.autograd.grad(out, (q, k, v), dout.double())


def main():
    import flashjit
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--d", default="64,128")
    p.add_argument("--s", default="4096")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--causal", action="store_true")
    args = p.parse_args()
    for d in map(int, args.d.split(",")):
        for s in map(int, args.s.split(",")):
            torch.manual_seed(0)
            q, k, v, dout = (torch.randn(1, s, args.heads, d, device="cuda") for _ in range(4))
            leaves = [x.clone().requires_grad_() for x in (q, k, v)]
            out = flashjit.flash_attn_func(*leaves, causal=args.causal)
            grads = torch.autograd.grad(out, leaves, dout)
            ref = reference(q, k, v, dout, args.causal)
            err = {n: ((g.double() - r).norm() / r.norm()).item() for n, g, r in zip(("dq", "dk", "dv"), grads, ref)}
            print(json.dumps({"head_dim": d, "seq": s, "causal": args.causal, "tune": os.environ.get("FLASHJIT_TUNE", "offline"),
                              "rel_l2": err}), flush=True)


if __name__ == "__main__":
    main()
