#!/usr/bin/env python3
"""Engine v2 benchmarks (issue 7), one process, PyTorch SDPA in the same run:

  grid    the 36-cell prefill grid (D 64/128/256 x S 1k/4k/16k x causal x fp16/bf16, B*S = 16384,
          Hq*D = 2048) for this library and, with --parent-lib, the parent commit's library
          loaded side by side (ABI 1 is enough), interleaved cell by cell: no regression means
          every cell within 2%.
  window  sliding window 1024 at S = 16384 (causal left 1024; and left = right = 1024), TFLOP/s
          counted over the key tiles the kernel visits, against full attention's TFLOP/s.
  varlen  16 random sequence lengths summing to 16384 against 16 x 1024, TFLOP/s over the
          sequences' own FLOPs.

CUDA events, warm-up, median of repetitions, random normal inputs (q, k, v of 64 MiB each at
the grid's shapes, larger than L2).

    python3 bench/engine_v2_bench.py --lib build/libflashjit.so --parent-lib parent/libflashjit.so \\
        --json out.json --md out.md
"""
import argparse
import ctypes
import math
import os
import re
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import flashjit_ctypes as fj  # noqa: E402
import results  # noqa: E402
import timing  # noqa: E402

WARMUP, REPS = 5, 25


def median_ms(fn):
    return timing.median_ms(fn, WARMUP, REPS)


def best_of_rounds(fns):
    return timing.best_of_rounds(fns, WARMUP, REPS)


def sdpa_ms(q, k, v, causal, backend):
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    try:
        with sdpa_kernel(backend):
            return median_ms(lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal))
    except RuntimeError:
        return None


def variant_tiles(lib, q, k, v, o, **opts):
    """BLOCK_M, BLOCK_N and name of the variant the library runs (flashjit_precompile_v2 names it)."""
    a = fj.make_args_v2(q, k, v, o, **opts)
    lib.flashjit_precompile_v2.argtypes = [ctypes.c_void_p, ctypes.POINTER(fj.ArgsV2), ctypes.c_char_p,
                                           ctypes.c_char_p, ctypes.c_uint64]
    major, minor = torch.cuda.get_device_capability()
    arch = "sm_%d%d%s" % (major, minor, "a" if major == 9 else "")  # the engine reads Hopper as sm_90a
    name = ctypes.create_string_buffer(512)
    if lib.flashjit_precompile_v2(lib.engine, ctypes.byref(a), arch.encode(), name, len(name)) != 0:
        raise fj.FlashjitError(lib.flashjit_last_error().decode())
    m = re.search(r"-m(\d+)n(\d+)w", name.value.decode())
    return int(m.group(1)), int(m.group(2)), name.value.decode()


def grid(lib, parent, dims, seqs, dtypes, tokens, hidden):
    rows = []
    torch.manual_seed(0)
    stream = torch.cuda.current_stream().cuda_stream
    for dt_name in dtypes:
        dt = getattr(torch, dt_name)
        for d in dims:
            for s in seqs:
                b, h = tokens // s, hidden // d
                q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=dt) for _ in range(3))
                o = torch.empty_like(q)
                for causal in (False, True):
                    fl = 4.0 * b * h * s * s * d / (2 if causal else 1)
                    new_args = fj.make_args_v2(q, k, v, o, causal=causal)
                    fns = [lambda: fj.forward_args(lib, new_args, stream)]
                    if parent is not None:
                        old_args = fj.make_args(q, k, v, o, causal=causal)
                        fns.append(lambda: fj.forward_args(parent, old_args, stream))
                    ms = best_of_rounds(fns)
                    r = {"dtype": dt_name, "D": d, "S": s, "B": b, "H": h, "causal": causal,
                         "flashjit": fl / ms[0] / 1e9}
                    if parent is not None:
                        r["parent"] = fl / ms[1] / 1e9
                        r["vs_parent"] = r["flashjit"] / r["parent"]
                    for name, be in (("sdpa_flash", SDPBackend.FLASH_ATTENTION), ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
                        t = sdpa_ms(q, k, v, causal, be)
                        r[name] = fl / t / 1e9 if t else None
                    rows.append(r)
                    print("grid %-8s D=%3d S=%5d causal=%d  flashjit %6.1f  parent %6s (x%s)  flash %6s  cudnn %6s" % (
                        dt_name, d, s, causal, r["flashjit"], "%.1f" % r["parent"] if parent else "-",
                        "%.3f" % r["vs_parent"] if parent else "-",
                        "%.1f" % r["sdpa_flash"] if r["sdpa_flash"] else "-",
                        "%.1f" % r["sdpa_cudnn"] if r["sdpa_cudnn"] else "-"), flush=True)
                del q, k, v, o
    return rows


def visited_flops(s, d, bm, bn, h, b, left, right, causal):
    """FLOPs of the key tiles the kernel visits: per CTA of bm query rows, the tiles its key
    range touches (sequence.cuh key_range), each bm x bn x 2 products of 2 d-long dots."""
    total_tiles = 0
    for m0 in range(0, s, bm):
        hi = s
        if causal or right >= 0:
            hi = min(hi, m0 + bm + (right if right >= 0 else 0))
        lo = max(0, m0 - left) if left >= 0 else 0
        if hi > lo:
            total_tiles += (hi + bn - 1) // bn - lo // bn
    return 4.0 * b * h * total_tiles * bm * bn * d


def window(lib, dtypes, s=16384, d=128, hidden=2048, w=1024):
    rows = []
    stream = torch.cuda.current_stream().cuda_stream
    h = hidden // d
    for dt_name in dtypes:
        dt = getattr(torch, dt_name)
        q, k, v = (torch.randn(1, s, h, d, device="cuda", dtype=dt) for _ in range(3))
        o = torch.empty_like(q)
        for causal, left, right in ((True, w, 0), (False, w, w)):
            full = fj.make_args_v2(q, k, v, o, causal=causal)
            win = fj.make_args_v2(q, k, v, o, causal=causal, window=(left, right))
            bm, bn, name = variant_tiles(lib, q, k, v, o, causal=causal, window=(left, right))
            fbm, fbn, _ = variant_tiles(lib, q, k, v, o, causal=causal)
            t_full, t_win = best_of_rounds([lambda: fj.forward_args(lib, full, stream),
                                            lambda: fj.forward_args(lib, win, stream)])
            full_tf = visited_flops(s, d, fbm, fbn, h, 1, -1, 0 if causal else -1, causal) / t_full / 1e9
            win_tf = visited_flops(s, d, bm, bn, h, 1, left, right, causal) / t_win / 1e9
            band = sum(min(i + right if right >= 0 else s - 1, s - 1) - max(0, i - left) + 1 for i in range(s))
            r = {"dtype": dt_name, "S": s, "D": d, "H": h, "causal": causal, "left": left, "right": right,
                 "variant": name, "full_ms": t_full, "window_ms": t_win, "full_tflops_visited": full_tf,
                 "window_tflops_visited": win_tf, "ratio": win_tf / full_tf,
                 "window_tflops_band": 4.0 * h * band * d / t_win / 1e9, "speedup": t_full / t_win}
            rows.append(r)
            print("window %-8s causal=%d (%d,%d): %.3f ms vs full %.3f ms (x%.1f); visited-tile TFLOP/s %.1f vs %.1f: %.3f" % (
                dt_name, causal, left, right, t_win, t_full, r["speedup"], win_tf, full_tf, r["ratio"]), flush=True)
        del q, k, v, o
    return rows


def varlen(lib, dtypes, total=16384, n=16, d=128, hidden=2048, seed=7):
    rows = []
    stream = torch.cuda.current_stream().cuda_stream
    h = hidden // d
    g = torch.Generator().manual_seed(seed)
    cuts = sorted(torch.randperm(total - 1, generator=g)[: n - 1].add(1).tolist())
    lens = [b - a for a, b in zip([0] + cuts, cuts + [total])]
    for dt_name in dtypes:
        dt = getattr(torch, dt_name)
        q, k, v = (torch.randn(1, total, h, d, device="cuda", dtype=dt) for _ in range(3))
        o = torch.empty_like(q)
        qe, ke, ve, oe = (x.view(n, total // n, h, d) for x in (q, k, v, o))
        cu = torch.tensor([0] + cuts + [total], device="cuda", dtype=torch.int32)
        for causal in (False, True):
            ragged = fj.make_args_v2(q, k, v, o, causal=causal, varlen=(cu, cu, max(lens), max(lens)))
            equal = fj.make_args_v2(qe, ke, ve, oe, causal=causal)
            t_rag, t_eq = best_of_rounds([lambda: fj.forward_args(lib, ragged, stream),
                                          lambda: fj.forward_args(lib, equal, stream)])
            share = 0.5 if causal else 1.0
            f_rag = sum(4.0 * h * L * L * d * share for L in lens)
            f_eq = 4.0 * h * n * (total // n) ** 2 * d * share
            r = {"dtype": dt_name, "causal": causal, "lengths": lens, "ragged_ms": t_rag, "equal_ms": t_eq,
                 "ragged_tflops": f_rag / t_rag / 1e9, "equal_tflops": f_eq / t_eq / 1e9}
            r["ratio"] = r["ragged_tflops"] / r["equal_tflops"]
            rows.append(r)
            print("varlen %-8s causal=%d: ragged %.1f TFLOP/s vs equal %.1f: %.3f (max len %d)" % (
                dt_name, causal, r["ragged_tflops"], r["equal_tflops"], r["ratio"], max(lens)), flush=True)
        del q, k, v, o
    return rows


def write_md(path, meta, res):
    with open(path, "w") as f:
        f.write("# Engine v2 benchmarks\n\n%s; %s; commit %s (parent %s); PyTorch %s; %s.\n" % (
            meta["device"], meta["date"], meta["commit"], meta["parent_commit"], meta["torch"], meta["flashjit"]))
        f.write("One process, CUDA events around %d back-to-back calls, %d warm-up + median of %d samples, best of 3 interleaved rounds; random normal inputs.\n\n" % (timing.CALLS_PER_SAMPLE, WARMUP, REPS))
        if res.get("grid"):
            f.write("## Prefill grid (TFLOP/s): this commit against its parent, same process\n\n")
            f.write("| dtype | D | S | causal | flashjit | parent | ratio | SDPA flash | SDPA cuDNN | / cuDNN |\n|---|---|---|---|---|---|---|---|---|---|\n")
            for r in res["grid"]:
                f.write("| %s | %d | %d | %s | %.0f | %s | %s | %s | %s | %s |\n" % (
                    r["dtype"], r["D"], r["S"], "yes" if r["causal"] else "no", r["flashjit"],
                    "%.0f" % r["parent"] if "parent" in r else "-", "%.3f" % r["vs_parent"] if "vs_parent" in r else "-",
                    "%.0f" % r["sdpa_flash"] if r["sdpa_flash"] else "-", "%.0f" % r["sdpa_cudnn"] if r["sdpa_cudnn"] else "-",
                    "%.2f" % (r["flashjit"] / r["sdpa_cudnn"]) if r["sdpa_cudnn"] else "-"))
            if any("vs_parent" in r for r in res["grid"]):
                ratios = [r["vs_parent"] for r in res["grid"]]
                f.write("\nAgainst the parent: min %.3f, max %.3f, geomean %.3f over %d cells.\n\n" % (
                    min(ratios), max(ratios), math.exp(sum(map(math.log, ratios)) / len(ratios)), len(ratios)))
        if res.get("window"):
            f.write("## Sliding window at S = 16384, D = 128, Hq = 16 (TFLOP/s over visited key tiles)\n\n")
            f.write("| dtype | causal | window | variant | ms | full ms | window TFLOP/s | full TFLOP/s | ratio |\n|---|---|---|---|---|---|---|---|---|\n")
            for r in res["window"]:
                f.write("| %s | %s | (%d, %d) | %s | %.3f | %.3f | %.0f | %.0f | %.3f |\n" % (
                    r["dtype"], "yes" if r["causal"] else "no", r["left"], r["right"], r["variant"], r["window_ms"],
                    r["full_ms"], r["window_tflops_visited"], r["full_tflops_visited"], r["ratio"]))
        if res.get("varlen"):
            f.write("\n## Varlen: 16 random lengths summing to 16384 against 16 x 1024, D = 128, Hq = 16\n\n")
            f.write("Lengths: %s\n\n| dtype | causal | ragged TFLOP/s | equal TFLOP/s | ratio |\n|---|---|---|---|---|\n" % res["varlen"][0]["lengths"])
            for r in res["varlen"]:
                f.write("| %s | %s | %.0f | %.0f | %.3f |\n" % (r["dtype"], "yes" if r["causal"] else "no",
                                                            r["ragged_tflops"], r["equal_tflops"], r["ratio"]))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", default="build/libflashjit.so")
    p.add_argument("--parent-lib", help="the parent commit's libflashjit.so, loaded in the same process")
    p.add_argument("--parent-commit", default="unknown")
    p.add_argument("--parts", default="grid,window,varlen")
    p.add_argument("--dims", default="64,128,256")
    p.add_argument("--seqs", default="1024,4096,16384")
    p.add_argument("--dtypes", default="float16,bfloat16")
    results.add_file_arguments(p)
    a = p.parse_args()
    lib = fj.load(a.lib)
    parent = fj.load(a.parent_lib) if a.parent_lib else None
    if parent is not None and parent.flashjit_version() == lib.flashjit_version() and parent.abi == lib.abi:
        print("warning: the parent library reports the same version and ABI", file=sys.stderr)
    dtypes = a.dtypes.split(",")
    dims, seqs = [int(x) for x in a.dims.split(",")], [int(x) for x in a.seqs.split(",")]
    res = results.run_parts(a.parts, {"grid": lambda: grid(lib, parent, dims, seqs, dtypes, 16384, 2048),
                                      "window": lambda: window(lib, dtypes), "varlen": lambda: varlen(lib, dtypes)})
    meta = results.run_meta(lib, parent_commit=a.parent_commit, parent_abi=parent.abi if parent else None)
    results.write_results(a.json, a.md, meta, res, write_md)


if __name__ == "__main__":
    main()
