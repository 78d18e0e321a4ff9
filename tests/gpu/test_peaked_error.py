#!/usr/bin/env python3
"""flashjit's error on peaked attention against cuDNN's and FlashAttention-2's, same inputs.

Trained models have peaked softmax rows; a kernel's own error shows there (issue 21). Scores of
standard deviation 1, 3 and 8 (q and k each scaled by sqrt(std)), B = 2, H = 8, S = 2048, every
head dim 64/128/256, causal or not, bf16 and fp16: the relative L2 error of each output against
float64 on the same inputs. flashjit runs through the C ABI (python/flashjit_ctypes.py) on the
family the engine picks (fa3_sm90 on Hopper); decode shapes (one query, GQA 4:1) run decode_sm80.
Peers: PyTorch SDPA's cuDNN and FLASH backends, whichever serve the case.

Passes when flashjit's error is at most the best peer's times (1 + MARGIN): MARGIN covers two
correct kernels' rounding orders, which move the error by ~1% from case to case.

    python3 tests/gpu/test_peaked_error.py --lib build/libflashjit.so [--json OUT.json]
Exit 77 (ctest: skipped) without torch or a CUDA device.
"""
import argparse
import json
import math
import os
import sys

SKIP = 77
MARGIN = 0.02
STDS = (1.0, 3.0, 8.0)


def rel_l2(out, ref):
    d = out.double() - ref
    return float(d.norm() / ref.norm())


def reference(q, k, v, causal, scale):
    """float64 attention, [B, H, S, D] inputs (GQA heads repeated), one batch at a time."""
    import torch
    outs = []
    g = q.shape[1] // k.shape[1]
    for b in range(q.shape[0]):
        qb, kb, vb = q[b].double(), k[b].double().repeat_interleave(g, 0), v[b].double().repeat_interleave(g, 0)
        s = qb @ kb.transpose(-1, -2) * scale
        if causal:
            sq, sk = s.shape[-2], s.shape[-1]
            keep = torch.ones(sq, sk, dtype=torch.bool, device=s.device).tril(sk - sq)
            s = s.masked_fill(~keep, float("-inf"))
        outs.append(torch.softmax(s, -1) @ vb)
    return torch.stack(outs)


def peers_error(q, k, v, causal, ref):
    """{peer: error} for SDPA's cuDNN and FLASH backends on [B, H, S, D] tensors."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    out = {}
    g = q.shape[1] // k.shape[1]
    kk, vv = (k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)) if g > 1 else (k, v)
    for name, be in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("fa2", SDPBackend.FLASH_ATTENTION)):
        try:
            with sdpa_kernel([be]):
                o = F.scaled_dot_product_attention(q, kk, vv, is_causal=causal)
            torch.cuda.synchronize()
            out[name] = rel_l2(o, ref)
        except Exception:  # a backend that does not serve this shape is left out
            pass
    return out


def run_case(fj, lib, dtype, D, S, causal, std, hq=8, hkv=8, sq=None, seed=0):
    import torch
    sq = sq or S
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = math.sqrt(std)
    q = (torch.randn(2, hq, sq, D, device="cuda", generator=g) * a).to(dtype)
    k = (torch.randn(2, hkv, S, D, device="cuda", generator=g) * a).to(dtype)
    v = torch.randn(2, hkv, S, D, device="cuda", generator=g).to(dtype)
    ref = reference(q, k, v, causal, 1.0 / math.sqrt(D))
    o = torch.empty(2, sq, hq, D, device="cuda", dtype=dtype)
    fj.forward(lib, q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), o, causal=causal)
    torch.cuda.synchronize()
    row = dict(dtype=str(dtype).replace("torch.", ""), D=D, Sq=sq, Sk=S, Hq=hq, Hkv=hkv, causal=causal, std=std,
               flashjit=rel_l2(o.transpose(1, 2), ref), rounding=rel_l2(ref.to(dtype), ref))
    row.update(peers_error(q, k, v, causal, ref))
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True, help="libflashjit.so")
    ap.add_argument("--json", help="write every case's errors here")
    args = ap.parse_args()
    try:
        import torch
    except Exception as e:
        print("SKIPPED: no torch (%s)" % e)
        return SKIP
    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA device")
        return SKIP
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import flashjit_ctypes as fj
    lib = fj.load(args.lib)
    rows, failed = [], 0
    seed = 0
    with torch.no_grad():
        for dtype in (torch.bfloat16, torch.float16):
            for D in (64, 128, 256):
                for causal in (False, True):
                    for std in STDS:
                        seed += 1
                        rows.append(run_case(fj, lib, dtype, D, 2048, causal, std, seed=seed))
            for std in STDS:  # decode: one query and four per sequence, GQA 4:1
                for sq in (1, 4):
                    seed += 1
                    rows.append(run_case(fj, lib, dtype, 128, 4096, False, std, hq=32, hkv=8, sq=sq, seed=seed))
    print("%-8s %4s %5s %5s %2s %4s | %9s %9s %9s %9s | %s" % ("dtype", "D", "Sq", "Sk", "c", "std", "flashjit",
                                                            "cudnn", "fa2", "rounding", "fj/best"))
    for r in rows:
        peers = [r[p] for p in ("cudnn", "fa2") if p in r]
        ratio = r["flashjit"] / min(peers) if peers else float("nan")
        ok = bool(peers) and ratio <= 1 + MARGIN
        failed += 0 if ok else 1
        r["ratio_to_best_peer"] = ratio
        print("%-8s %4d %5d %5d %2s %4.0f | %9.3e %9s %9s %9.3e | %.3f%s" % (
            r["dtype"], r["D"], r["Sq"], r["Sk"], "c" if r["causal"] else "-", r["std"], r["flashjit"],
            "%.3e" % r["cudnn"] if "cudnn" in r else "-", "%.3e" % r["fa2"] if "fa2" in r else "-", r["rounding"],
            ratio, "" if ok else "  FAIL"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print("%d of %d cases within %.0f%% of the best peer's error" % (len(rows) - failed, len(rows), MARGIN * 100))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
