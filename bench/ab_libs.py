#!/usr/bin/env python3
"""Two flashjit builds (and cuDNN) in one process on the same inputs: the A/B a kernel change needs.

The timing, references and cell runner are ../shared/tools/vs_peers.py's (GPU time only: calls
queued behind a spin kernel; rounds in A B B A order; median of round medians), imported from
--peers-script, so the numbers compare with the issues' tables. Peers:
  flashjit       --lib (the change)
  flashjit-base  --base-lib (its parent), a separate copy of the library with its own engine
  flashjit-opt   --lib again, a second engine compiling with --opt-options as
                 FLASHJIT_NVRTC_OPTIONS (a developer switch, e.g. -DFJ_LAZY_RESCALE=1); optional
  sdpa-cudnn     PyTorch SDPA's cuDNN backend
Sections: prefill (the 36-cell grid of anchors.md), decode (vs_peers' decode cells, contiguous
with kv_lens and pages of 16). Prints per cell each peer's TFLOP/s (TB/s for decode) and the
change's speed over the base's, then the geomean and the lowest ratio; writes $OUT/ab_libs.json.

usage, on the device from the checkout's root (vs_peers.py copied into a carried folder):
  python3 bench/ab_libs.py --lib build/libflashjit.so --base-lib base/libflashjit.so \
      --peers-script .carry/vs_peers.py [--what prefill,decode] [--opt-options -DFJ_LAZY_RESCALE=1]
"""
import argparse
import importlib.util
import json
import math
import os
import shutil
import sys
import tempfile


def load_vs_peers(path):
    spec = importlib.util.spec_from_file_location("vs_peers", path)
    vp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vp)
    return vp


def with_options(build, options):
    """A peer builder whose first call (the compile) sees FLASHJIT_NVRTC_OPTIONS = options."""
    def wrapped():
        old = os.environ.get("FLASHJIT_NVRTC_OPTIONS")
        os.environ["FLASHJIT_NVRTC_OPTIONS"] = options
        try:
            call, to_bhsd = build()
            call()  # compiles here, under the options
            return call, to_bhsd
        finally:
            if old is None:
                del os.environ["FLASHJIT_NVRTC_OPTIONS"]
            else:
                os.environ["FLASHJIT_NVRTC_OPTIONS"] = old
    return wrapped


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lib", required=True)
    ap.add_argument("--base-lib", required=True)
    ap.add_argument("--peers-script", default=".carry/vs_peers.py")
    ap.add_argument("--what", default="prefill,decode")
    ap.add_argument("--dtypes", default="bf16,fp16")
    ap.add_argument("--D", default="64,128,256", help="prefill head dims")
    ap.add_argument("--S", default="1024,4096,16384", help="prefill sequence lengths")
    ap.add_argument("--opt-options", default="", help="FLASHJIT_NVRTC_OPTIONS of the flashjit-opt peer")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ms", type=float, default=100.0)
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    a = ap.parse_args()
    vp = load_vs_peers(a.peers_script)
    vp.load_torch()
    T = vp.T
    # A second file: the loader keeps one copy per path, and each copy has its own engine.
    base_dir = tempfile.mkdtemp(prefix="ab_base_")
    base_path = os.path.join(base_dir, "libflashjit_base.so")
    shutil.copy(a.base_lib, base_path)
    fj, base = vp.Flashjit(a.lib), vp.Flashjit(base_path)
    opt = vp.Flashjit(a.lib) if a.opt_options else None
    vargs = argparse.Namespace(fj_layout="bhsd", verbose=False)
    ctx = dict(args=vargs, timer=vp.Timer(a.ms, a.rounds), clock=vp.Clock())
    ctx_of = {"flashjit": dict(ctx, fj=fj), "flashjit-base": dict(ctx, fj=base), "flashjit-opt": dict(ctx, fj=opt)}
    os.makedirs(a.out, exist_ok=True)
    vp.OUT_PATH = os.path.join(a.out, "ab_libs.json")
    vp.META.update(lib=a.lib, base_lib=a.base_lib, opt_options=a.opt_options, version=fj.version,
                   base_version=base.version)
    names = ["flashjit", "flashjit-base"] + (["flashjit-opt"] if opt else [])

    def fj_maker(name, q, k, v, causal):
        build = vp.make_fj_v1(ctx_of[name], q, k, v, causal, "bhsd", None)
        return with_options(build, a.opt_options) if name == "flashjit-opt" else build

    def prefill():
        for dt in a.dtypes.split(","):
            dtype = {"bf16": T.bfloat16, "fp16": T.float16}[dt]
            for D in (int(x) for x in a.D.split(",")):
                for S in (int(x) for x in a.S.split(",")):
                    for causal in (False, True):
                        B, H = max(1, 16384 // S), 2048 // D
                        g = T.Generator(device="cuda").manual_seed(1234 + S + D + H)
                        q, k, v = (T.randn(B, H, S, D, device="cuda", dtype=dtype, generator=g) for _ in range(3))
                        flops = 4.0 * B * H * S * S * D / (2 if causal else 1)
                        cell = dict(kind="prefill", dtype=str(dtype).replace("torch.", ""), B=B, Hq=H, Hkv=H, Sq=S, Sk=S,
                                    Dqk=D, Dv=D, causal=causal, flops=flops)
                        variants = [(n, fj_maker(n, q, k, v, causal)) for n in names]
                        variants.append(("sdpa-cudnn", vp.make_sdpa("sdpa-cudnn", q, k, v, causal)))
                        batches, rows = sorted({0, B - 1}), vp.sample_rows(S)
                        vp.run_cell(ctx, cell, variants,
                                    ref_fn=lambda: (vp.ref_rows(q, k, v, causal, batches, rows), batches, rows))
                        q = k = v = None
                        T.cuda.empty_cache()

    def decode():
        D, dtype = 128, T.bfloat16
        for B, Hq, Hkv, L in vp.DECODE_CELLS:
            g = T.Generator(device="cuda").manual_seed(99 + B + L)
            q = T.randn(B, Hq, 1, D, device="cuda", dtype=dtype, generator=g)
            k, v = (T.randn(B, Hkv, L, D, device="cuda", dtype=dtype, generator=g) for _ in range(2))
            kb, vb = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
            lens = T.full((B,), L, device="cuda", dtype=T.int32)
            bt = T.randperm(B * (L // 16), device="cuda", generator=g).to(T.int32).reshape(B, L // 16).contiguous()
            kp, vp16 = vp._pool(kb, bt, 16), vp._pool(vb, bt, 16)
            cell = dict(kind="decode", dtype="bfloat16", B=B, Hq=Hq, Hkv=Hkv, Sq=1, Sk=L, Dqk=D, Dv=D, causal=False,
                        bytes=2.0 * B * Hkv * L * D * k.element_size())

            def maker(name, paged):
                def build():
                    o = T.full((B, 1, Hq, D), float("nan"), device="cuda", dtype=dtype)
                    st = T.cuda.current_stream().cuda_stream
                    lib = ctx_of[name]["fj"]
                    if paged:
                        call = lib.prepare_v2(q.transpose(1, 2), kp, vp16, o, False, st, kv_lens=lens, block_table=bt)
                    else:
                        call = lib.prepare_v2(q.transpose(1, 2), kb, vb, o, False, st, kv_lens=lens)
                    return call, lambda out: out.transpose(1, 2)
                return with_options(build, a.opt_options) if name == "flashjit-opt" else build
            variants = [(n, maker(n, False)) for n in names] + [(n + "-p16", maker(n, True)) for n in names[:2]]
            variants.append(("sdpa-cudnn", vp.make_sdpa("sdpa-cudnn", q, k, v, False)))
            batches = sorted({0, B - 1})
            vp.run_cell(ctx, cell, variants, ref_fn=lambda: (vp.ref_rows(q, k, v, False, batches, [0]), batches, [0]))
            q = k = v = kb = vb = kp = vp16 = None
            T.cuda.empty_cache()

    sections = {"prefill": prefill, "decode": decode}
    with T.no_grad():
        for w in a.what.split(","):
            sections[w]()
    # The change over its parent (and the switch over the change), per cell and overall.
    summary = {}
    for pair in (("flashjit", "flashjit-base"), ("flashjit-p16", "flashjit-base-p16"), ("flashjit-opt", "flashjit"),
                 ("flashjit", "sdpa-cudnn"), ("flashjit-base", "sdpa-cudnn")):
        ratios = []
        for r in vp.ROWS:
            x, y = r["peers"].get(pair[0], {}), r["peers"].get(pair[1], {})
            if "ms" in x and "ms" in y:
                ratios.append((y["ms"] / x["ms"], r))
        if ratios:
            geo = math.exp(sum(math.log(x) for x, _ in ratios) / len(ratios))
            lo = min(ratios, key=lambda xr: xr[0])
            summary["%s/%s" % pair] = dict(geomean=geo, min=lo[0], cells=len(ratios),
                                           min_cell=vp._label(lo[1]).strip())
            print("%-32s geomean %.4f  min %.3f (%s)  over %d cells" % ("%s over %s:" % pair, geo, lo[0],
                                                                        vp._label(lo[1]).strip(), len(ratios)))
    vp.META["summary"] = summary
    vp.save()
    vp.print_tables(vp.ROWS)
    return 0


if __name__ == "__main__":
    sys.exit(main())
