#!/usr/bin/env python3
"""Decode benchmarks (issue 8), one process, PyTorch SDPA's flash and cuDNN backends in the same
run: bf16, D = 128, one query token per sequence against a KV cache, TB/s of K + V read
(2 * B * Hkv * L * D * 2 bytes, as shared/notes/anchors.md counts them).

  cells    (B, Hq:Hkv, L) = (1, 32:8, 32k), (16, 32:8, 4k), (16, 32:8, 32k), (64, 32:32, 2k),
           (128, 64:8, 8k): flashjit (contiguous cache) against SDPA flash and cuDNN (GQA native)
  paged    the (16, 32:8, 32k) cell from page pools of 16 and 64 keys (shuffled block table)
           against the contiguous cache
  queries  Sq = 4 (speculative decoding) against Sq = 1 on the same cache

CUDA events, warm-up, median; every cache is larger than L2; random normal inputs.

    python3 bench/decode_bench.py --lib build/libflashjit.so --json out.json --md out.md
"""
import argparse
import os
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashjit_ctypes as fj  # noqa: E402
import results  # noqa: E402
import timing  # noqa: E402

WARMUP, REPS = 10, 50
CELLS = [(1, 32, 8, 32768), (16, 32, 8, 4096), (16, 32, 8, 32768), (64, 32, 32, 2048), (128, 64, 8, 8192)]
D = 128


def best_of(fn):
    return timing.best_of_rounds([fn], WARMUP, REPS)[0]


def kv_bytes(b, hkv, length):
    return 2.0 * b * hkv * length * D * 2


def sdpa_ms(q, k, v, backend):
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))  # [B, H, S, D] views
    try:
        with sdpa_kernel(backend):
            return best_of(lambda: F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True))
    except RuntimeError as e:
        print("  %s unavailable: %s" % (backend, str(e).splitlines()[0]), file=sys.stderr)
        return None


def check(o, q, k, v):
    """Relative L2 error of one batch entry against float64 SDPA math."""
    qt, kt, vt = (x[:1].transpose(1, 2).double() for x in (q, k, v))
    ref = F.scaled_dot_product_attention(qt, kt, vt, enable_gqa=True).transpose(1, 2)
    got = o[:1].double()
    return float((got - ref).norm() / ref.norm())


def cells(lib):
    rows = []
    stream = torch.cuda.current_stream().cuda_stream
    for b, hq, hkv, length in CELLS:
        torch.manual_seed(b * 1000 + length)
        q = torch.randn(b, 1, hq, D, device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(b, length, hkv, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        o = torch.empty_like(q)
        args = fj.make_args_v2(q, k, v, o)
        ms = best_of(lambda: fj.forward_args(lib, args, stream))
        r = {"B": b, "Hq": hq, "Hkv": hkv, "L": length, "flashjit_ms": ms,
             "flashjit_tbs": kv_bytes(b, hkv, length) / ms / 1e9, "rel_l2": check(o, q, k, v)}
        for name, be in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            t = sdpa_ms(q, k, v, be)
            r[name + "_ms"] = t
            r[name + "_tbs"] = kv_bytes(b, hkv, length) / t / 1e9 if t else None
        rows.append(r)
        print("decode B=%3d %2d:%-2d L=%5d  flashjit %.3f ms %.2f TB/s  flash %s  cudnn %s  rel_l2 %.1e" % (
            b, hq, hkv, length, ms, r["flashjit_tbs"], "%.2f TB/s" % r["flash_tbs"] if r["flash_tbs"] else "-",
            "%.2f TB/s" % r["cudnn_tbs"] if r["cudnn_tbs"] else "-", r["rel_l2"]), flush=True)
        del q, k, v, o
    return rows


def paged(lib, b=16, hq=32, hkv=8, length=32768):
    rows = []
    stream = torch.cuda.current_stream().cuda_stream
    torch.manual_seed(5)
    q = torch.randn(b, 1, hq, D, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, length, hkv, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    o = torch.empty_like(q)
    lens = torch.full((b,), length, device="cuda", dtype=torch.int32)
    contiguous = best_of(lambda: fj.forward_args(lib, fj.make_args_v2(q, k, v, o, kv_lens=lens), stream))
    ref = o.clone()
    for page in (16, 64):
        pages = b * length // page
        perm = torch.randperm(pages, device="cuda")
        table = perm.view(b, length // page).to(torch.int32).contiguous()
        kp, vp = (torch.empty(pages, page, hkv, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        kp[perm] = k.reshape(pages, page, hkv, D)  # the same keys, scattered over the pool
        vp[perm] = v.reshape(pages, page, hkv, D)
        args = fj.make_args_v2(q, kp, vp, o, kv_lens=lens, block_table=table)
        ms = best_of(lambda: fj.forward_args(lib, args, stream))
        same = float((o.float() - ref.float()).abs().max())
        rows.append({"page_size": page, "paged_ms": ms, "contiguous_ms": contiguous, "ratio": ms / contiguous,
                     "max_abs_vs_contiguous": same, "paged_tbs": kv_bytes(b, hkv, length) / ms / 1e9})
        print("paged   page %3d: %.3f ms vs contiguous %.3f ms: x%.3f (max |diff| %.1e)" % (
            page, ms, contiguous, ms / contiguous, same), flush=True)
        del kp, vp
    return rows


def queries(lib, b=16, hq=32, hkv=8, length=32768):
    stream = torch.cuda.current_stream().cuda_stream
    torch.manual_seed(6)
    k, v = (torch.randn(b, length, hkv, D, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out = {}
    for sq in (1, 4, 16):
        q = torch.randn(b, sq, hq, D, device="cuda", dtype=torch.bfloat16)
        o = torch.empty_like(q)
        args = fj.make_args_v2(q, k, v, o, causal=True)
        out[sq] = best_of(lambda: fj.forward_args(lib, args, stream))
    r = {"sq1_ms": out[1], "sq4_ms": out[4], "sq16_ms": out[16], "ratio4": out[4] / out[1], "ratio16": out[16] / out[1]}
    print("queries Sq=4: %.3f ms, Sq=16: %.3f ms against Sq=1: %.3f ms (x%.3f, x%.3f)" % (
        out[4], out[16], out[1], r["ratio4"], r["ratio16"]), flush=True)
    return r


def write_md(path, meta, res):
    with open(path, "w") as f:
        f.write("# Decode benchmarks\n\n%s; %s; commit %s; PyTorch %s; %s.\n" % (
            meta["device"], meta["date"], meta["commit"], meta["torch"], meta["flashjit"]))
        f.write("One process, CUDA events around %d back-to-back calls, %d warm-up + median of %d samples, best of 3; "
                "bf16, D = 128, one query token; TB/s of K + V read.\n\n" % (timing.CALLS_PER_SAMPLE, WARMUP, REPS))
        f.write("| B | Hq:Hkv | L | flashjit TB/s | SDPA flash TB/s | SDPA cuDNN TB/s | / flash | / cuDNN | rel. L2 |\n")
        f.write("|---|---|---|---|---|---|---|---|---|\n")
        for r in res["cells"]:
            fl, cu = r["flash_tbs"], r["cudnn_tbs"]
            f.write("| %d | %d:%d | %d | %.2f | %s | %s | %s | %s | %.1e |\n" % (
                r["B"], r["Hq"], r["Hkv"], r["L"], r["flashjit_tbs"], "%.2f" % fl if fl else "-",
                "%.2f" % cu if cu else "-", "%.2f" % (r["flashjit_tbs"] / fl) if fl else "-",
                "%.2f" % (r["flashjit_tbs"] / cu) if cu else "-", r["rel_l2"]))
        if res.get("paged"):
            f.write("\n## Paged KV, (16, 32:8, 32k)\n\n| page size | paged ms | contiguous ms | ratio | TB/s |\n|---|---|---|---|---|\n")
            for r in res["paged"]:
                f.write("| %d | %.3f | %.3f | %.3f | %.2f |\n" % (r["page_size"], r["paged_ms"], r["contiguous_ms"], r["ratio"],
                                                               r["paged_tbs"]))
        if res.get("queries"):
            q = res["queries"]
            f.write("\n## Queries per sequence, (16, 32:8, 32k), causal\n\nSq = 1: %.3f ms; Sq = 4: %.3f ms (x%.3f); "
                    "Sq = 16: %.3f ms (x%.3f).\n" % (q["sq1_ms"], q["sq4_ms"], q["ratio4"], q["sq16_ms"], q["ratio16"]))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", default="build/libflashjit.so")
    p.add_argument("--parts", default="cells,paged,queries")
    results.add_file_arguments(p)
    a = p.parse_args()
    lib = fj.load(a.lib)
    res = results.run_parts(a.parts, {"cells": lambda: cells(lib), "paged": lambda: paged(lib),
                                      "queries": lambda: queries(lib)})
    results.write_results(a.json, a.md, results.run_meta(lib), res, write_md)


if __name__ == "__main__":
    main()
