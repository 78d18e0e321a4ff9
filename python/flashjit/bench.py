"""flashjit against PyTorch's SDPA backends (and FlashAttention-4 where installed) on this GPU.

    python -m flashjit.bench                      # bf16, D 64/128/256, S 1k/4k/16k, causal or not
    python -m flashjit.bench --dtype fp16 --d 128 --out fp16.png --json fp16.json
    python -m flashjit.bench --pass backward --d 64,128   # dq, dk, dv from one recorded forward

Each cell holds a fixed number of tokens (batch x seq) and of features (heads x head_dim), so its
inputs are larger than any L2. Time is GPU time only: the calls of a round are queued behind a
spin kernel, so host overhead does not count, and the backends take turns in A B B A order. The
plot, one panel per head dim, shows TFLOP/s (4 * batch * heads * seq_q * seq_k * head_dim, half
of that when causal) as FlashAttention's README charts do; the backward (--pass backward) times
dq, dk, dv from one recorded forward (torch.autograd.grad with retain_graph) and counts 2.5 times
the forward's FLOPs. Every backend's output (or gradients) is compared with flashjit's; a cell
where they differ by more than the dtype allows is flagged.
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

# Milliseconds of GPU time a round aims for: long enough to time, short enough for many rounds.
ROUND_MS = 30.0
# How far apart two correct outputs may be (max abs, inputs of unit variance; for gradients, max
# abs relative to the largest gradient): a few 16-bit roundings, or for fp32 (flashjit's exact
# 3xTF32 math against SDPA's fp32 kernels) a margin far below tf32's 5e-4 rounding.
AGREEMENT = {"bf16": 3e-2, "fp16": 3e-2, "fp32": 1e-4}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _spin_cycles_per_ms():
    """The spin kernel's cycles per millisecond on this GPU, after clocks ramp up."""
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    for _ in range(30):
        a @ a
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    end.synchronize()
    return 10_000_000 / max(start.elapsed_time(end), 1e-3)


def gpu_ms_per_call(fn, calls, cycles_per_ms, host_ms):
    """GPU time per call of `calls` calls queued behind a spin long enough to issue them all."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(int((1.0 + 2.0 * calls * host_ms) * cycles_per_ms))
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def backends(names):
    """name -> make(q, k, v, causal) returning a call; q, k, v are [batch, seq, heads, dim]."""
    import flashjit
    table = {"flashjit": lambda q, k, v, causal: lambda: flashjit.flash_attn_func(q, k, v, causal=causal),
             # The backward's fixed dQ order (the forward is the same kernel either way).
             "flashjit-det": lambda q, k, v, causal: lambda: flashjit.flash_attn_func(q, k, v, causal=causal,
                                                                                    deterministic=True)}

    def sdpa(kind):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backend = {"sdpa-flash": SDPBackend.FLASH_ATTENTION, "sdpa-cudnn": SDPBackend.CUDNN_ATTENTION,
                   "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION}[kind]

        def make(q, k, v, causal):
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

            def call():
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal).transpose(1, 2)
            return call
        return make
    for kind in ("sdpa-flash", "sdpa-cudnn", "sdpa-efficient"):
        table[kind] = sdpa(kind)
    try:
        from flash_attn.cute import flash_attn_func as fa4  # FlashAttention-4, where installed
        table["fa4"] = lambda q, k, v, causal: lambda: fa4(q, k, v, causal=causal)[0]
    except Exception as e:  # absent or broken: say so once and go on
        table["fa4"] = "not importable (%s)" % type(e).__name__
    return {n: table[n] for n in names}


def backward_of(make, dout):
    """A backend's backward: make(q, k, v, causal) -> call() returning (dq, dk, dv) of one forward,
    recorded once (the forward is not timed)."""
    def make_backward(q, k, v, causal):
        leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
        with torch.enable_grad():
            out = make(*leaves, causal)()

        def call():
            with torch.enable_grad():
                return torch.autograd.grad(out, leaves, dout, retain_graph=True)
        return call
    return make_backward


def run(args):
    dtype = DTYPES[args.dtype]
    makers = backends(args.backends)
    backward = args.pass_ == "backward"
    for name, make in list(makers.items()):
        if isinstance(make, str):
            print("%s: %s, left out" % (name, make), file=sys.stderr)
            del makers[name]
    cycles = _spin_cycles_per_ms()
    cells = [(d, s, c) for d in args.d for s in args.s for c in args.causal]
    results = []
    for i, (d, s, causal) in enumerate(cells):
        batch, heads = max(1, args.tokens // s), max(1, args.width // d)
        q, k, v = (torch.randn(batch, s, heads, d, device="cuda", dtype=dtype) for _ in range(3))
        dout = torch.randn(batch, s, heads, d, device="cuda", dtype=dtype) if backward else None
        flops = 4.0 * batch * heads * s * s * d * (0.5 if causal else 1.0) * (2.5 if backward else 1.0)
        cell = {"head_dim": d, "seq": s, "batch": batch, "heads": heads, "causal": causal, "dtype": args.dtype,
                "pass": args.pass_, "ms": {}, "tflops": {}, "max_abs_vs_flashjit": {}, "problems": {}}
        calls, host_ms, want = {}, {}, None
        for name, make in makers.items():
            try:
                call = (backward_of(make, dout) if backward else make)(q, k, v, causal)
                out = call()  # compiles or picks its kernel here, outside the timing
                if backward:
                    out = torch.cat([g.flatten() for g in out])
                torch.cuda.synchronize()
                if want is None:
                    want = out.float()
                else:
                    diff = (out.float() - want).abs().max().item()
                    if backward:  # gradients are not of unit size: relative to the largest
                        diff /= max(want.abs().max().item(), 1e-30)
                    cell["max_abs_vs_flashjit"][name] = diff
                    if not diff <= AGREEMENT[args.dtype]:
                        cell["problems"][name] = "differs from flashjit by %.3g" % cell["max_abs_vs_flashjit"][name]
                t0 = time.perf_counter()
                for _ in range(3):
                    call()
                host_ms[name] = (time.perf_counter() - t0) * 1e3 / 3
                torch.cuda.synchronize()
                calls[name] = call
            except Exception as e:
                cell["problems"][name] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:160] if str(e) else "")
        timed = {name: [] for name in calls}
        order = list(calls)
        for r in range(args.rounds):  # A B B A: each backend runs early and late in turn
            for name in (order if r % 2 == 0 else order[::-1]):
                first = gpu_ms_per_call(calls[name], 1, cycles, host_ms[name])
                n = max(1, min(200, int(ROUND_MS / max(first, 1e-3))))
                timed[name].append(gpu_ms_per_call(calls[name], n, cycles, host_ms[name]))
        for name, times in timed.items():
            cell["ms"][name] = statistics.median(times)
            cell["tflops"][name] = flops / (cell["ms"][name] * 1e-3) / 1e12
        results.append(cell)
        line = "  ".join("%s %.0f" % (n, t) for n, t in cell["tflops"].items())
        print("[%d/%d] D%d S%d %s (B%d H%d): %s TFLOP/s%s" % (i + 1, len(cells), d, s, "causal" if causal else "full",
                                                              batch, heads, line,
                                                              "  (" + "; ".join("%s: %s" % kv for kv in
                                                                                cell["problems"].items()) + ")"
                                                              if cell["problems"] else ""), flush=True)
        del q, k, v, dout, want, calls
        torch.cuda.empty_cache()
    return results


def plot(results, path, title):
    """One panel per head dim: TFLOP/s per sequence length and mask, a bar per backend."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    dims = sorted({c["head_dim"] for c in results})
    names = list(dict.fromkeys(n for c in results for n in c["tflops"]))
    fig, axes = plt.subplots(1, len(dims), figsize=(5.5 * len(dims), 4.2), squeeze=False)
    width = 0.8 / max(1, len(names))
    for ax, d in zip(axes[0], dims):
        cells = [c for c in results if c["head_dim"] == d]
        labels = ["%dk%s" % (c["seq"] // 1024, " causal" if c["causal"] else "") if c["seq"] >= 1024 else
                  "%d%s" % (c["seq"], " causal" if c["causal"] else "") for c in cells]
        for j, name in enumerate(names):
            values = [c["tflops"].get(name, 0.0) for c in cells]
            bars = ax.bar([i + j * width for i in range(len(cells))], values, width, label=name)
            ax.bar_label(bars, fmt="%.0f", fontsize=6, padding=1)
        ax.set_xticks([i + width * (len(names) - 1) / 2 for i in range(len(cells))], labels, rotation=30, fontsize=8)
        ax.set_title("head dim %d" % d)
        ax.set_ylabel("TFLOP/s")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _ints(text):
    return [int(x) for x in text.split(",") if x]


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m flashjit.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dtype", choices=tuple(DTYPES), default="bf16",
                   help="fp32: flashjit's exact fp32 (3xTF32); of SDPA's backends only sdpa-efficient takes it")
    p.add_argument("--pass", dest="pass_", choices=("forward", "backward"), default="forward",
                   help="time the forward, or the backward (dq, dk, dv) of one recorded forward")
    p.add_argument("--d", type=_ints, default=[64, 128, 256], help="head dims, comma separated")
    p.add_argument("--s", type=_ints, default=[1024, 4096, 16384], help="sequence lengths (seq_q = seq_k)")
    p.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    p.add_argument("--tokens", type=int, default=16384, help="batch x seq of every cell")
    p.add_argument("--width", type=int, default=2048, help="heads x head_dim of every cell")
    p.add_argument("--backends", default="flashjit,sdpa-flash,sdpa-cudnn,fa4",
                   help="any of flashjit, flashjit-det (the backward's deterministic mode), sdpa-flash, sdpa-cudnn, "
                        "sdpa-efficient, fa4 (FlashAttention-4)")
    p.add_argument("--rounds", type=int, default=4, help="timed rounds per backend and cell (A B B A)")
    p.add_argument("--out", default="flashjit_bench.png", help="the plot (PNG); needs matplotlib")
    p.add_argument("--json", help="also write every cell's numbers here")
    args = p.parse_args(argv)
    args.causal = {"both": [False, True], "yes": [True], "no": [False]}[args.causal]
    args.backends = [b for b in args.backends.split(",") if b]
    unknown = set(args.backends) - {"flashjit", "flashjit-det", "sdpa-flash", "sdpa-cudnn", "sdpa-efficient", "fa4"}
    if unknown:
        p.error("--backends: unknown %s" % ", ".join(sorted(unknown)))
    if "flashjit" not in args.backends:
        args.backends.insert(0, "flashjit")  # the outputs are checked against flashjit's
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    results = run(args)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "dtype": args.dtype, "pass": args.pass_}
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "cells": results}, f, indent=1)
    try:
        plot(results, args.out, "%s, %s, %s, %s" % (meta["gpu"], args.dtype, args.pass_, "GPU time, A B B A rounds"))
        print("plot: %s" % args.out)
    except ImportError:
        print("no plot: matplotlib is not installed (pip install matplotlib)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
