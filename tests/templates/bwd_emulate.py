#!/usr/bin/env python3
"""Runs the bwd_sm80 (or bwd_sm90) kernels on the CPU, fragments and all, against float64 gradients.

No GPU here: each variant's rendered source (compile_bwd_check.py's render, the engine's
render_source) is compiled as host C++ with tests/templates/emu/ standing in for CUDA (a fiber
per thread, __syncthreads and the warp-collective ldmatrix / mma / shuffles as barriers whose
last arriver computes every lane's result from the instruction's definition; for bwd_sm90 also
the warpgroup-collective wgmma from its matrix descriptors, run at its wait, mbarriers whose
waiters sleep until the phase completes, named barriers and stmatrix) and run on small odd
shapes by tests/templates/emu/bwd_emu_main.cpp, which fills the kernels' params as the engine
does and compares dq, dk, dv (and dsinks) with float64 gradients: the same 4x-rounding bound as
tests/gpu/test_backward.cpp. This checks the kernels' index arithmetic (warp tiles, ldmatrix
addresses, wgmma descriptors and swizzles, the dQ accumulator's register order and convert's
inverse, the masks, the stage buffers' reuse, the walk), not their speed or the real
instructions' rounding.

Usage: python3 tests/templates/bwd_emulate.py [--family bwd_sm80|bwd_sm90|all] [--quick]
           [--filter SUBSTRING] [-j N] [--templates DIR] [--with-deterministic]
Exit status 0 when every case passes.
"""
import argparse
import concurrent.futures
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import compile_bwd_check  # noqa: E402  (render(): the engine's source rendering, mirrored)

EMU = os.path.join(HERE, "emu")

# The emulated headers, each in place of the templates' file of the same path.
EMULATED_HEADERS = ("common/ptx.cuh", "common/sm90/async_copy.cuh", "common/sm90/wgmma.cuh", "common/sm90/wgmma_ops.cuh")
# What the emulated kernels include: no inline asm may be left there (g++ would hand it to the
# host assembler).
EMULATED_DIRS = ("bwd_sm80", "bwd_sm90", "common")
ASM = re.compile(r"\basm\s*(volatile\s*)?\(")


def prepare_templates(tmp, source):
    """`source` (a templates/ tree) with the emulation's headers, and `extern __shared__` (dynamic
    shared memory, one global buffer here) apart from `__shared__` (a CTA's static arrays:
    `static`)."""
    dst = os.path.join(tmp, "templates")
    shutil.copytree(source, dst)
    for dirpath, _, files in os.walk(dst):
        for f in files:
            if f.endswith((".cu", ".cuh")):
                path = os.path.join(dirpath, f)
                text = open(path).read()
                if "extern __shared__" in text:
                    open(path, "w").write(text.replace("extern __shared__", "extern"))
    for header in EMULATED_HEADERS:
        shutil.copy(os.path.join(EMU, header), os.path.join(dst, header))
    for d in EMULATED_DIRS:
        for dirpath, _, files in os.walk(os.path.join(dst, d)):
            for f in files:
                path = os.path.join(dirpath, f)
                if f.endswith((".cu", ".cuh")) and ASM.search(open(path).read()):
                    sys.exit("bwd_emulate: inline asm in %s has no emulation (emu/common/)"
                             % os.path.relpath(path, dst))
    return dst


def sem(dtype, d, mask, dv=None, **feats):  # head dims d (q, k) and dv (v; d unless given)
    dv = d if dv is None else dv
    s = {"dtype": dtype, "head_dim_qk": d, "head_dim_v": dv, "mask": mask, "vec": compile_bwd_check.vec_of(dtype, d, dv)}
    s.update(feats)
    return s


# (name, semantics, tiling (BLOCK_M, BLOCK_N, warps, stages), arch, run arguments)
def cases_sm80(quick, _deterministic):
    out = []
    # The defaults (FlashAttention-2's shapes), both dQ accumulator orders, both stage counts.
    for dtype, d, mask in (("f16", 64, "none"), ("bf16", 128, "causal"), ("f16", 128, "none"), ("bf16", 64, "causal")):
        t = (128, 128, 8, 2) if d <= 64 else (64, 128, 8, 2)
        out.append(("%s d%d %s %s" % (dtype, d, mask, t), sem(dtype, d, mask), t, 900, {}))
    out.append(("f16 d64 causal sq>sk sm80 order", sem("f16", 64, "causal"), (128, 128, 8, 1), 800,
                {"sq": 130, "sk": 77}))
    out.append(("bf16 d128 none 64x64w4 s1", sem("bf16", 128, "none"), (64, 64, 4, 1), 800, {}))
    # Wide head dims' defaults (sm_90a, sm_80) and MLA's Dqk = 192, Dv = 128.
    out.append(("bf16 d256 causal", sem("bf16", 256, "causal"), (64, 64, 8, 2), 900, {}))
    out.append(("f16 d192/128 none", sem("f16", 192, "none", dv=128), (64, 64, 8, 1), 800, {}))
    # fp32 (exact: 3xTF32; tf32: one product), on the host's fp32 default tilings: narrow at 64
    # (64 x 64 on 8 warps, two stages: sm_80), 128 (32 x 64, sm_80; 64 x 64, one stage: sm_90),
    # wide 256 (32 x 32 on 4 warps: sm_80; 32 x 64 on 8: sm_90).
    def fp32(math, d, mask, dv=None, **feats):
        return sem("f32", d, mask, dv, fp32_math=math, **feats)
    out.append(("f32 exact d64 causal", fp32("exact", 64, "causal"), (64, 64, 8, 2), 800, {}))
    out.append(("f32 tf32 d128 none", fp32("tf32", 128, "none"), (32, 64, 8, 2), 800, {}))
    out.append(("f32 exact d128 causal sm90", fp32("exact", 128, "causal"), (64, 64, 8, 1), 900, {"sq": 130, "sk": 77}))
    out.append(("f32 exact d256 none", fp32("exact", 256, "none"), (32, 32, 4, 1), 800, {}))
    if quick:
        return out
    out += [
        ("f16 d64 gqa 4:1", sem("f16", 64, "none", gqa=True), (64, 128, 8, 2), 900, {"hq": 4, "hkv": 1, "b": 1}),
        ("bf16 d128 causal window 20,0", sem("bf16", 128, "causal", window=True), (64, 128, 8, 2), 900,
         {"left": 20, "right": 0}),
        ("f16 d64 window 16,8", sem("f16", 64, "none", window=True), (64, 128, 8, 2), 900, {"left": 16, "right": 8}),
        ("f16 d64 softcap", sem("f16", 64, "none", softcap=True), (64, 128, 8, 2), 900, {"softcap": 5, "scale": 1}),
        ("f16 d64 causal alibi", sem("f16", 64, "causal", alibi=True), (64, 128, 8, 2), 900, {}),
        ("bf16 d96 all", sem("bf16", 96, "causal", gqa=True, window=True, softcap=True, alibi=True), (64, 64, 4, 2), 900,
         {"hq": 4, "hkv": 2, "b": 1, "left": 30, "softcap": 20, "scale": 1}),
        ("f16 d40 odd", sem("f16", 40, "causal"), (64, 64, 4, 2), 900, {}),
        ("bf16 d112", sem("bf16", 112, "none"), (64, 64, 4, 2), 900, {}),
        ("f16 d33 narrow copies", sem("f16", 33, "none"), (64, 64, 4, 1), 800, {}),
        # Swizzled tiles (layout.cuh's bwd_swizzled) off the defaults' path: 4-byte copies, a copy
        # whose row step (4 rows) moves the swizzle's phase, and pad columns zeroed inside a chunk.
        ("bf16 d64 swizzled narrow copies", sem("bf16", 64, "none", vec=2), (64, 64, 4, 2), 800, {}),
        ("bf16 d256 swizzled 32x32w4", sem("bf16", 256, "causal"), (32, 32, 4, 1), 800, {}),
        ("f16 d60 swizzled pad columns", sem("f16", 60, "causal"), (64, 64, 4, 2), 800, {}),
        ("bf16 d64 varlen", sem("bf16", 64, "causal", varlen=True), (64, 128, 8, 2), 900,
         {"varlen_q": "0,70,5,33", "varlen_k": "40,90,0,33"}),
        ("f16 d128 kv_lens", sem("f16", 128, "none", kv_lens=True), (64, 128, 8, 2), 900, {"kv_lens": "100,3"}),
        ("bf16 d64 sinks", sem("bf16", 64, "causal", sinks=True), (64, 128, 8, 2), 900, {"sq": 130, "sk": 77}),
        # Deterministic: CTAs run here in launch order, so a wait on a later CTA aborts (a deadlock).
        ("f16 d64 det", sem("f16", 64, "none", deterministic=True), (64, 64, 4, 2), 800, {"sq": 150, "sk": 200}),
        ("bf16 d128 causal det sq>sk", sem("bf16", 128, "causal", deterministic=True), (64, 128, 8, 2), 900,
         {"sq": 200, "sk": 140}),
        ("f16 d64 det varlen window gqa", sem("f16", 64, "causal", deterministic=True, varlen=True, window=True, gqa=True),
         (64, 64, 4, 1), 900, {"hq": 4, "hkv": 2, "left": 70, "varlen_q": "0,150,40,33", "varlen_k": "60,150,200,0"}),
        ("bf16 d64 det kv_lens window 30,20", sem("bf16", 64, "none", deterministic=True, kv_lens=True, window=True),
         (64, 64, 4, 2), 900, {"sq": 170, "sk": 260, "kv_lens": "250,90", "left": 30, "right": 20}),
        # Wide head dims and Dqk != Dv: sm_86/89's defaults (64 x 32, 32 x 32), an odd pair each
        # side of 128 (72/40: padded to 80/48; 200/136: to 224/160), a narrow Dqk beside a wide Dv.
        ("f16 d256 gqa window 32x32w4", sem("f16", 256, "causal", gqa=True, window=True), (32, 32, 4, 1), 800,
         {"hq": 4, "hkv": 2, "b": 1, "left": 40}),
        ("bf16 d160 64x32w4", sem("bf16", 160, "none"), (64, 32, 4, 1), 800, {}),
        ("f16 d192 all", sem("f16", 192, "causal", gqa=True, window=True, softcap=True, alibi=True), (64, 64, 8, 2), 900,
         {"hq": 4, "hkv": 1, "b": 1, "left": 50, "softcap": 20, "scale": 1}),
        ("bf16 d192/128 gqa 64x32w8", sem("bf16", 192, "causal", dv=128, gqa=True), (64, 32, 8, 1), 800,
         {"hq": 4, "hkv": 2, "b": 1}),
        ("f16 d72/40 causal", sem("f16", 72, "causal", dv=40), (64, 64, 4, 2), 900, {}),
        ("bf16 d200/136 window", sem("bf16", 200, "none", dv=136, window=True), (64, 64, 8, 1), 900,
         {"left": 24, "right": 9}),
        ("f16 d40/256", sem("f16", 40, "none", dv=256), (32, 64, 8, 2), 900, {}),
        ("bf16 d192/128 varlen sinks", sem("bf16", 192, "causal", dv=128, varlen=True, sinks=True), (64, 64, 8, 2), 900,
         {"varlen_q": "0,70,5,33", "varlen_k": "40,90,0,33"}),
        ("f16 d256 kv_lens", sem("f16", 256, "none", kv_lens=True), (64, 32, 8, 2), 900, {"kv_lens": "100,3"}),
        ("bf16 d192/128 det causal gqa", sem("bf16", 192, "causal", dv=128, deterministic=True, gqa=True),
         (64, 64, 8, 2), 900, {"hq": 4, "hkv": 2, "b": 1, "sq": 150, "sk": 200}),
        # fp32: the other tilings, odd and wide head dims, GQA, windows, softcap, ALiBi, varlen,
        # kv_lens, sinks, deterministic.
        ("f32 tf32 d256 causal gqa sm90", fp32("tf32", 256, "causal", gqa=True), (32, 64, 8, 1), 900,
         {"hq": 4, "hkv": 2, "b": 1}),
        ("f32 exact d40 odd", fp32("exact", 40, "none"), (64, 64, 4, 2), 800, {}),
        ("f32 tf32 d33 narrow copies", fp32("tf32", 33, "causal"), (64, 64, 4, 1), 800, {}),
        ("f32 exact d72/40 gqa", fp32("exact", 72, "causal", dv=40, gqa=True), (64, 64, 4, 2), 900,
         {"hq": 4, "hkv": 1, "b": 1}),
        ("f32 exact d96 all", fp32("exact", 96, "causal", gqa=True, window=True, softcap=True, alibi=True), (32, 64, 4, 2),
         800, {"hq": 4, "hkv": 2, "b": 1, "left": 30, "softcap": 20, "scale": 1}),
        ("f32 exact d192/128 varlen sinks", fp32("exact", 192, "causal", dv=128, varlen=True, sinks=True), (32, 32, 4, 1),
         800, {"varlen_q": "0,70,5,33", "varlen_k": "40,90,0,33"}),
        ("f32 tf32 d64 kv_lens window", fp32("tf32", 64, "none", kv_lens=True, window=True), (64, 64, 8, 1), 900,
         {"kv_lens": "100,3", "left": 16, "right": 8}),
        ("f32 exact d128 det sq>sk", fp32("exact", 128, "causal", deterministic=True), (32, 64, 4, 2), 800,
         {"sq": 200, "sk": 140}),
        ("f32 exact d64 sinks", fp32("exact", 64, "causal", sinks=True), (64, 64, 8, 2), 800, {"sq": 130, "sk": 77}),
    ]
    return out


# bwd_sm90 (16-bit, head dims 64 and 128, no mask or causal, GQA): its three tilings, (name,
# semantics, tiling (BLOCK_M, BLOCK_N, MMA warpgroups), arch, run arguments). Odd lengths leave
# partial Q and K/V blocks; sq > sk leaves causal rows that see no key; 6:2 GQA walks each K/V
# block over three q-heads; sk 300 gives several K/V blocks per Q block. `deterministic`: also
# deterministic mode, for templates whose bwd_sm90 serves it (the current one refuses it).
def cases_sm90(quick, deterministic):
    def s90(dtype, d, mask, **feats):
        return sem(dtype, d, mask, vec=8, **feats)
    gqa = {"hq": 6, "hkv": 2, "b": 1}
    out = [
        ("f16 d64 none 200x3", s90("f16", 64, "none"), (128, 128, 2), 900, {"sq": 200, "sk": 3}),
        ("bf16 d64 causal gqa 6:2", s90("bf16", 64, "causal", gqa=True), (128, 128, 2), 900, dict(gqa, sq=77, sk=130)),
        ("bf16 d64 causal sq>sk", s90("bf16", 64, "causal"), (64, 128, 2), 900, {"sq": 130, "sk": 77}),
        ("f16 d128 causal gqa 6:2", s90("f16", 128, "causal", gqa=True), (64, 128, 2), 900, dict(gqa, sq=77, sk=130)),
        ("bf16 d128 none 200x3", s90("bf16", 128, "none"), (64, 128, 2), 900, {"sq": 200, "sk": 3}),
        ("f16 d64 causal 130x77", s90("f16", 64, "causal"), (64, 64, 1), 900, {"sq": 130, "sk": 77}),
        ("bf16 d64 none gqa 6:2", s90("bf16", 64, "none", gqa=True), (64, 64, 1), 900, dict(gqa, sq=77, sk=130)),
    ]
    if not quick:
        out += [
            ("bf16 d64 causal 130x77", s90("bf16", 64, "causal"), (128, 128, 2), 900, {"sq": 130, "sk": 77}),
            ("f16 d64 none gqa 6:2", s90("f16", 64, "none", gqa=True), (128, 128, 2), 900, dict(gqa, sq=77, sk=130)),
            ("f16 d64 none 77x130", s90("f16", 64, "none"), (64, 128, 2), 900, {"sq": 77, "sk": 130}),
            ("bf16 d64 causal gqa 6:2", s90("bf16", 64, "causal", gqa=True), (64, 128, 2), 900, dict(gqa, sq=77, sk=130)),
            ("bf16 d128 causal 130x77", s90("bf16", 128, "causal"), (64, 128, 2), 900, {"sq": 130, "sk": 77}),
            ("f16 d128 none gqa 6:2", s90("f16", 128, "none", gqa=True), (64, 128, 2), 900, dict(gqa, sq=77, sk=130)),
            ("bf16 d64 causal 300x300", s90("bf16", 64, "causal"), (64, 64, 1), 900, {"sq": 300, "sk": 300, "b": 1}),
            ("f16 d64 none 200x3", s90("f16", 64, "none"), (64, 64, 1), 900, {"sq": 200, "sk": 3}),
        ]
    if deterministic:
        out += [
            ("f16 d64 det causal gqa 6:2 sk300", s90("f16", 64, "causal", gqa=True, deterministic=True), (128, 128, 2), 900,
             dict(gqa, sq=150, sk=300)),
            ("bf16 d64 det none sk300", s90("bf16", 64, "none", deterministic=True), (64, 128, 2), 900,
             {"sq": 130, "sk": 300}),
            ("bf16 d128 det causal 300x300", s90("bf16", 128, "causal", deterministic=True), (64, 128, 2), 900,
             {"sq": 300, "sk": 300, "b": 1}),
            ("f16 d64 det causal gqa 6:2 130x77", s90("f16", 64, "causal", gqa=True, deterministic=True), (64, 64, 1), 900,
             dict(gqa, sq=130, sk=77)),
            ("bf16 d64 det none gqa 6:2 sk300", s90("bf16", 64, "none", gqa=True, deterministic=True), (64, 64, 1), 900,
             dict(gqa, sq=77, sk=300)),
        ]
    return out


# Per family: its entry file, its cases, the tiling constants its tiling tuples give in order.
FAMILIES = {
    "bwd_sm80": ("bwd_sm80/family.cu", cases_sm80, ("kBlockM", "kBlockN", "kWarps", "kStages"), "m%dn%dw%ds%d"),
    "bwd_sm90": ("bwd_sm90/family.cu", cases_sm90, ("kBlockM", "kBlockN", "kMmaWarpgroups"), "m%dn%dg%d"),
}


def build_and_run(family, case, templates, tmp):
    name, semantics, tiling, arch, run_args = case
    entry, _, tiling_names, tiling_label = FAMILIES[family]
    tag = "".join(c if c.isalnum() else "_" for c in " ".join((family, name, tiling_label % tiling)))
    src = compile_bwd_check.render(semantics, list(zip(tiling_names, tiling)), tag, entry)
    variant = os.path.join(tmp, tag + ".cuh")
    open(variant, "w").write(src)
    binary = os.path.join(tmp, tag)
    cmd = ["g++", "-std=c++17", "-O1", "-w", "-D__CUDA_ARCH__=%d" % arch, "-DVARIANT_SOURCE=\"%s\"" % variant,
           "-I", templates, "-I", EMU, "-I", ROOT, "-I", os.path.join(ROOT, "engine", "include"),
           os.path.join(EMU, "bwd_emu_main.cpp"), "-o", binary]
    if family == "bwd_sm90":
        cmd.append("-DEMU_BWD_SM90")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        return False, "%-40s BUILD FAILED\n%s" % (name, r.stderr[-4000:])
    argv = [binary] + ["%s=%s" % kv for kv in run_args.items()]
    r = subprocess.run(argv, capture_output=True, text=True)
    ok = r.returncode == 0
    return ok, "%-4s %-40s %s sm%d:%s%s" % ("ok" if ok else "FAIL", name, tiling_label % tiling, arch, r.stdout.rstrip(),
                                          "" if ok else "\n" + r.stderr[-2000:])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", choices=list(FAMILIES) + ["all"], default="bwd_sm80", help="the kernels to run")
    ap.add_argument("--quick", action="store_true", help="the default tilings' cases only (bwd_sm90: one set)")
    ap.add_argument("--filter", default="", help="only cases whose name contains this")
    ap.add_argument("-j", type=int, default=2, help="cases built and run at once (2: CI's cores)")
    ap.add_argument("--keep", action="store_true", help="keep the build directory")
    ap.add_argument("--templates", default=os.path.join(ROOT, "templates"), help="the templates/ tree to run")
    ap.add_argument("--with-deterministic", action="store_true",
                    help="bwd_sm90: its deterministic cases too (for templates whose bwd_sm90 serves that mode)")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bwd_emu_")
    try:
        templates = prepare_templates(tmp, args.templates)
        families = list(FAMILIES) if args.family == "all" else [args.family]
        todo = [(f, c) for f in families for c in FAMILIES[f][1](args.quick, args.with_deterministic)
                if args.filter in c[0]]
        failures = 0
        with concurrent.futures.ThreadPoolExecutor(args.j) as pool:
            for ok, line in pool.map(lambda fc: build_and_run(fc[0], fc[1], templates, tmp), todo):
                print(line, flush=True)
                failures += not ok
        print("%d of %d cases failed" % (failures, len(todo)))
        return 1 if failures else 0
    finally:
        if args.keep:
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
