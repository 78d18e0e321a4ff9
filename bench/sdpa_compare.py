#!/usr/bin/env python3
"""Times flashjit (through its C ABI, ctypes) against PyTorch SDPA's flash and cudnn backends in
the same process, on the prefill grid of shared/notes/anchors.md: fp16, B*S = 16384 tokens,
Hq*D = 2048. CUDA events, warm-up, median; inputs are random normal and larger than L2 (64 MiB
per tensor). Also checks flashjit's output against SDPA's math backend in float64 on a slice.

    python3 bench/sdpa_compare.py --lib build/libflashjit.so --out bench/results/h100.md
"""
import argparse
import datetime
import json
import os
import subprocess
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import flashjit_ctypes as fj  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import timing  # noqa: E402


WARMUP, REPS = 5, 20


def median_of_rounds(fns, rounds):
    # One call per event pair, as this table has always been timed (prefill calls run 0.1 ms
    # and more, where a ctypes call's host latency does not show).
    return timing.median_of_rounds(fns, WARMUP, REPS, rounds, calls=1)


def sm_clock_mhz():
    """The SM clock now (nvidia-smi), read right after a cell's timing: the H100 drops it under its
    power cap (seen down to ~1.2 GHz from 1.98 during the heaviest cells), which moves every
    peer's absolute TFLOP/s; None where nvidia-smi cannot say."""
    try:
        out = subprocess.check_output(["nvidia-smi", "--query-gpu=clocks.sm", "--format=csv,noheader,nounits",
                                       "-i", str(torch.cuda.current_device())], text=True, timeout=10)
        return int(out.split()[0])
    except Exception:
        return None


def sdpa_call(backend, qt, kt, vt, causal, group, name):
    """One SDPA call on `backend`; GQA through enable_gqa, or through K and V repeated per query
    head when the backend refuses it (it then reads group x the K/V bytes: noted). Each form is
    tried once here; None where the backend refuses them all."""
    def call(k, v, **kw):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(qt, k, v, is_causal=causal, **kw)
    forms = [(kt, vt, {})] if group == 1 else [
        (kt, vt, {"enable_gqa": True}),
        (kt.repeat_interleave(group, dim=1), vt.repeat_interleave(group, dim=1), {})]
    for i, (k, v, kw) in enumerate(forms):
        try:
            call(k, v, **kw)
        except RuntimeError as e:
            error = e
            continue
        if i > 0:
            print("  %s: enable_gqa refused, K and V repeated per query head" % name, file=sys.stderr)
        return lambda: call(k, v, **kw)
    print("  %s unavailable: %s" % (name, str(error).splitlines()[0]), file=sys.stderr)
    return None


def source_commit():
    """The commit the results belong to: FLASHJIT_COMMIT, else the checkout's HEAD, else "unknown"."""
    commit = os.environ.get("FLASHJIT_COMMIT")
    if commit:
        return commit
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True,
                                       stderr=subprocess.DEVNULL).strip()
    except Exception:
        return "unknown"


def flops(b, h, s, d, dv, causal):
    f = 2.0 * b * h * s * s * (d + dv)  # Q.K^T over d, P.V over dv
    return f / 2 if causal else f


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", default="build/libflashjit.so")
    p.add_argument("--dims", default="64,128,256")
    p.add_argument("--seqs", default="1024,4096,16384")
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--dtype", default="float16", choices=["float16", "bfloat16"])
    p.add_argument("--group", type=int, default=1,
                   help="query heads per key/value head (GQA); SDPA gets enable_gqa, or K and V "
                        "repeated per query head where a backend refuses it (noted in the output)")
    p.add_argument("--dv", type=int, default=0,
                   help="head dim of V and O when it differs from Q and K's (MLA prefill: --dims 192 --dv 128); "
                        "heads = hidden / the Q/K head dim")
    p.add_argument("--rounds", type=int, default=3,
                   help="interleaved rounds per cell (flashjit, flash, cuDNN, then again); each keeps its "
                        "rounds' median")
    p.add_argument("--out", help="markdown table to write")
    p.add_argument("--json", help="raw results to write")
    a = p.parse_args()

    lib = fj.load(a.lib)
    dt = getattr(torch, a.dtype)
    dev = torch.cuda.get_device_name()
    rows = []
    torch.manual_seed(0)
    for d in [int(x) for x in a.dims.split(",")]:
        for s in [int(x) for x in a.seqs.split(",")]:
            b, h = a.tokens // s, a.hidden // d
            dv = a.dv or d
            q = torch.randn(b, s, h, d, device="cuda", dtype=dt)
            k = torch.randn(b, s, h // a.group, d, device="cuda", dtype=dt)
            v = torch.randn(b, s, h // a.group, dv, device="cuda", dtype=dt)
            o = torch.empty(b, s, h, dv, device="cuda", dtype=dt)
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # SDPA wants [B, H, S, D] views
            for causal in (False, True):
                args = fj.make_args(q, k, v, o, causal=causal)
                stream = torch.cuda.current_stream().cuda_stream
                r = {"D": d, "Dv": dv, "S": s, "B": b, "H": h, "causal": causal}
                fl = flops(b, h, s, d, dv, causal)
                fns = {"flashjit": lambda: fj.forward_args(lib, args, stream)}
                for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
                    fn = sdpa_call(backend, qt, kt, vt, causal, a.group, name)
                    if fn:
                        fns[name] = fn
                    else:
                        r[name] = None
                for name, ms in zip(fns, median_of_rounds(list(fns.values()), a.rounds)):
                    r[name] = fl / ms / 1e9
                r["sm_clock_mhz"] = sm_clock_mhz()
                # Correctness on one head of one batch against float64.
                fj.forward_args(lib, args, stream)
                torch.cuda.synchronize()
                ref = F.scaled_dot_product_attention(qt[:1, :1].double(), kt[:1, :1].double(), vt[:1, :1].double(),  # head 0 reads K/V head 0
                                                     is_causal=causal)
                got = o[:1, :, :1].transpose(1, 2).double()
                r["rel_l2"] = float((got - ref).norm() / ref.norm())
                r["ratio_flash"] = r["flashjit"] / r["sdpa_flash"] if r["sdpa_flash"] else None
                r["ratio_cudnn"] = r["flashjit"] / r["sdpa_cudnn"] if r["sdpa_cudnn"] else None
                rows.append(r)
                print("D=%3d Dv=%3d S=%5d causal=%d  flashjit %6.1f  flash %6s  cudnn %6s  ratio/flash %s  rel_l2 %.1e"
                      "  SM %s MHz" % (
                    d, dv, s, causal, r["flashjit"], "%.1f" % r["sdpa_flash"] if r["sdpa_flash"] else "-",
                    "%.1f" % r["sdpa_cudnn"] if r["sdpa_cudnn"] else "-",
                    "%.2f" % r["ratio_flash"] if r["ratio_flash"] else "-", r["rel_l2"], r["sm_clock_mhz"]), flush=True)
            del q, k, v, o
    commit = source_commit()
    meta = {"device": dev, "date": datetime.date.today().isoformat(), "commit": commit, "torch": torch.__version__,
            "dtype": a.dtype, "rounds": a.rounds, "flashjit": fj_version(lib)}
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write("# Prefill forward, %s, B*S = %d tokens, Hq*D = %d (TFLOP/s)\n\n" % (a.dtype, a.tokens, a.hidden))
            f.write("Device: %s; date: %s; commit: %s; PyTorch %s; %s.\n" % (dev, meta["date"], commit, torch.__version__, meta["flashjit"]))
            f.write("Same process, CUDA events, random normal inputs; per cell %d interleaved rounds of flashjit, "
                    "SDPA flash, SDPA cuDNN (each %d warm-up calls, median of %d), each keeping its rounds' "
                    "median.\n\n" % (a.rounds, WARMUP, REPS))
            f.write("| D | Dv | S | causal | flashjit | SDPA flash (FA2) | SDPA cuDNN | flashjit / FA2 | flashjit / cuDNN "
                    "| rel. L2 vs fp64 | SM MHz after |\n")
            f.write("|---|---|---|---|---|---|---|---|---|---|---|\n")
            fmt = lambda x: "%.0f" % x if x else "–"
            rat = lambda x: "%.2f" % x if x else "–"
            for r in rows:
                f.write("| %d | %d | %d | %s | %s | %s | %s | %s | %s | %.1e | %s |\n" % (
                    r["D"], r["Dv"], r["S"], "yes" if r["causal"] else "no", fmt(r["flashjit"]), fmt(r["sdpa_flash"]),
                    fmt(r["sdpa_cudnn"]), rat(r["ratio_flash"]), rat(r["ratio_cudnn"]), r["rel_l2"],
                    r["sm_clock_mhz"] or "–"))


def fj_version(lib):
    return lib.flashjit_version().decode()


if __name__ == "__main__":
    main()
