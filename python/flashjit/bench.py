"""flashjit against PyTorch's SDPA backends (and FlashAttention-4 where installed) on this GPU.

    python -m flashjit.bench                      # bf16, D 64/128/256, S 1k/4k/16k, causal or not
    python -m flashjit.bench --dtype fp16 --d 128 --out fp16.png --json fp16.json
    python -m flashjit.bench --pass backward --d 64,128   # dq, dk, dv from one recorded forward
    python -m flashjit.bench --pass train --d 128 --s 4096,8192 --causal yes --width 4096 --group 4
                                                  # a Llama-like layer's forward + backward, GQA 32:8

Each cell holds a fixed number of tokens (batch x seq) and of features (heads x head_dim), so its
inputs are larger than any L2. Time is GPU time only: the calls of a round are queued behind a
spin kernel, so host overhead does not count, and the backends take turns in A B B A order. The
plot, one panel per head dim, shows TFLOP/s (4 * batch * heads * seq_q * seq_k * head_dim, half
of that when causal) as FlashAttention's README charts do; the backward (--pass backward) times
dq, dk, dv from one recorded forward (torch.autograd.grad with retain_graph) and counts 2.5 times
the forward's FLOPs; --pass train times a training step's forward and backward together (3.5
times). --group G gives K and V heads / G heads (GQA; SDPA through enable_gqa, or K and V
repeated inside the timed call where a backend has no GQA, noted in the cell). Every backend's
output (or gradients) is compared with flashjit's; a cell where they differ by more than the
dtype allows is flagged.
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
# A pass's FLOPs in forwards: the backward's five products against the forward's two (its S = QK^T
# recomputed, dP, dV, dK, dQ), and a training step both.
PASS_FLOPS = {"forward": 1.0, "backward": 2.5, "train": 3.5}


def heads_of(width, head_dim):
    """A cell's query heads: --width is heads x head_dim."""
    return max(1, width // head_dim)


def flops_of(batch, heads, seq, head_dim, causal, pass_):
    """FLOPs of one call: 4 b h s^2 d for the forward (half when causal), times the pass's factor."""
    return 4.0 * batch * heads * seq * seq * head_dim * (0.5 if causal else 1.0) * PASS_FLOPS[pass_]


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
            group = q.shape[2] // k.shape[2]

            def call():
                with sdpa_kernel(backend):
                    return F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal,
                                                          enable_gqa=group > 1).transpose(1, 2)
            if group == 1:
                return call
            try:
                call()
                return call
            except RuntimeError as e:  # no GQA in this backend: what its users do, repeat K and V
                def repeated():
                    with sdpa_kernel(backend):
                        kk, vv = kt.repeat_interleave(group, 1), vt.repeat_interleave(group, 1)
                        return F.scaled_dot_product_attention(qt, kk, vv, is_causal=causal).transpose(1, 2)
                repeated.note = "no GQA (%s): K and V repeated %dx inside the timed call" % (
                    str(e).splitlines()[0][:80] if str(e) else type(e).__name__, group)
                return repeated
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
            forward = make(*leaves, causal)
            out = forward()

        def call():
            with torch.enable_grad():
                return torch.autograd.grad(out, leaves, dout, retain_graph=True)
        call.note = getattr(forward, "note", None)
        return call
    return make_backward


def train_of(make, dout):
    """A backend's training step: make(q, k, v, causal) -> call() running the forward and its
    backward, returning (out, dq, dk, dv)."""
    def make_train(q, k, v, causal):
        leaves = [x.detach().clone().requires_grad_() for x in (q, k, v)]
        forward = make(*leaves, causal)

        def call():
            with torch.enable_grad():
                out = forward()
                return (out,) + tuple(torch.autograd.grad(out, leaves, dout))
        call.note = getattr(forward, "note", None)
        return call
    return make_train


def run(args):
    dtype = DTYPES[args.dtype]
    makers = backends(args.backends)
    grads = args.pass_ != "forward"
    for name, make in list(makers.items()):
        if isinstance(make, str):
            print("%s: %s, left out" % (name, make), file=sys.stderr)
            del makers[name]
    cycles = _spin_cycles_per_ms()
    cells = [(d, s, c) for d in args.d for s in args.s for c in args.causal]
    results = []
    for i, (d, s, causal) in enumerate(cells):
        batch, heads = max(1, args.tokens // s), heads_of(args.width, d)
        kv_heads = heads // args.group
        q = torch.randn(batch, s, heads, d, device="cuda", dtype=dtype)
        k, v = (torch.randn(batch, s, kv_heads, d, device="cuda", dtype=dtype) for _ in range(2))
        dout = torch.randn(batch, s, heads, d, device="cuda", dtype=dtype) if grads else None
        flops = flops_of(batch, heads, s, d, causal, args.pass_)
        cell = {"head_dim": d, "seq": s, "batch": batch, "heads": heads, "kv_heads": kv_heads, "causal": causal,
                "dtype": args.dtype, "pass": args.pass_, "ms": {}, "tflops": {}, "max_abs_vs_flashjit": {},
                "problems": {}, "notes": {}}
        wrap = {"forward": lambda m: m, "backward": lambda m: backward_of(m, dout),
                "train": lambda m: train_of(m, dout)}[args.pass_]
        calls, host_ms, want = {}, {}, None
        for name, make in makers.items():
            try:
                call = wrap(make)(q, k, v, causal)
                if getattr(call, "note", None):
                    cell["notes"][name] = call.note
                out = call()  # compiles or picks its kernel here, outside the timing
                if grads:
                    out = torch.cat([g.flatten() for g in out])
                torch.cuda.synchronize()
                if want is None:
                    want = out.float()
                else:
                    diff = (out.float() - want).abs().max().item()
                    if grads:  # gradients are not of unit size: relative to the largest
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
        shape = "B%d H%d" % (batch, heads) + (":%d" % kv_heads if kv_heads != heads else "")
        remarks = ["%s: %s" % kv for kv in list(cell["notes"].items()) + list(cell["problems"].items())]
        print("[%d/%d] D%d S%d %s (%s): %s TFLOP/s%s" % (i + 1, len(cells), d, s, "causal" if causal else "full", shape,
                                                         line, "  (" + "; ".join(remarks) + ")" if remarks else ""),
              flush=True)
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
    p.add_argument("--pass", dest="pass_", choices=tuple(PASS_FLOPS), default="forward",
                   help="time the forward, the backward (dq, dk, dv) of one recorded forward, or both together "
                        "(train)")
    p.add_argument("--d", type=_ints, default=[64, 128, 256], help="head dims, comma separated")
    p.add_argument("--s", type=_ints, default=[1024, 4096, 16384], help="sequence lengths (seq_q = seq_k)")
    p.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    p.add_argument("--tokens", type=int, default=16384, help="batch x seq of every cell")
    p.add_argument("--width", type=int, default=2048, help="heads x head_dim of every cell")
    p.add_argument("--group", type=int, default=1, help="query heads per K/V head (GQA; 1: MHA)")
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
    for d in args.d:
        heads = heads_of(args.width, d)
        if args.group < 1 or heads % args.group:
            p.error("--group %d must divide the %d query heads of head dim %d (--width %d)" % (args.group, heads, d,
                                                                                             args.width))
    if "flashjit" not in args.backends:
        args.backends.insert(0, "flashjit")  # the outputs are checked against flashjit's
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    results = run(args)
    meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "dtype": args.dtype, "pass": args.pass_,
            "group": args.group}
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
