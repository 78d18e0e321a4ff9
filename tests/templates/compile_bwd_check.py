#!/usr/bin/env python3
"""Compiles the bwd_sm80 kernels (templates/bwd_sm80/family.cu: preprocess, main, convert) with
NVRTC for sm_80 and sm_90a, the way the engine would, and reports each kernel's registers and
spills from ptxas's -v log. CPU only: no GPU, no build of the project.

Mirrors the engine:
  - the source is what engine/src/kernel_source.cpp's render_source writes: every semantics
    constant (parsed from FLASHJIT_SEMANTICS_FIELDS in engine/include/flashjit/variant.hpp, in its
    order, with its defaults), then the tiling constants, then #include of the entry template;
  - every file under templates/ (*.cu, *.cuh) is handed to nvrtcCreateProgram as a header named by
    its path relative to templates/, as cmake/EmbedTemplates.cmake embeds them and
    engine/src/compiler.cpp passes them;
  - the options are engine/src/compiler.cpp's compile_options (--gpu-architecture, --std=c++17,
    -DNDEBUG, --no-source-include, -minimal), plus --ptxas-options=-v for the resource report only.

Usage: python3 tests/templates/compile_bwd_check.py [--quick] [--arch sm_80] [--dims 256 --dims 192/128]
                                                   [--filter SUBSTRING] [--nvrtc PATH]
Exit status 0 when every variant compiles without spills, 1 otherwise.
"""
import argparse
import ctypes
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEMPLATES = os.path.join(ROOT, "templates")
VARIANT_HPP = os.path.join(ROOT, "engine", "include", "flashjit", "variant.hpp")
DEVICE_ARRAYS_H = os.path.join(ROOT, "engine", "include", "flashjit", "device_arrays.h")
SCALARS_H = os.path.join(ROOT, "engine", "include", "flashjit", "scalars.h")
ENTRY = "bwd_sm80/family.cu"
KERNELS = ("flashjit_bwd_preprocess", "flashjit_bwd_main", "flashjit_bwd_convert")
ENUMS = {"DType": {"f16": 0, "bf16": 1, "f32": 2}, "Mask": {"none": 0, "causal": 1},
         "Fp32Math": {"exact": 0, "tf32": 1}}


def semantics_fields():
    """(type, field, default, constant) rows of FLASHJIT_SEMANTICS_FIELDS, in declaration order."""
    text = open(VARIANT_HPP).read()
    block = text[text.index("#define FLASHJIT_SEMANTICS_FIELDS"):]
    block = block[:block.index("\n\n")]
    # The per-call device arrays' flags stand where the list splices flashjit/device_arrays.h in.
    arrays = re.findall(r'ROW\(X,\s*\w+,\s*(\w+),\s*\w+,\s*"(\w+)"', open(DEVICE_ARRAYS_H).read())
    splice = "FLASHJIT_DEVICE_ARRAYS(FJ_SEMANTICS_FROM_DEVICE_ARRAY, X)"
    block = block.replace(splice, " ".join('X(bool, %s, false, "%s"' % a for a in arrays))
    # So do the per-call scalars' flags, where it splices flashjit/scalars.h in.
    scalars = re.findall(r'ROW\(X,\s*\w+,\s*(\w+),\s*\w+,\s*"(\w+)"', open(SCALARS_H).read())
    splice = "FLASHJIT_SCALARS(FJ_SEMANTICS_FROM_SCALAR, X)"
    block = block.replace(splice, " ".join('X(bool, %s, false, "%s"' % a for a in scalars))
    rows = re.findall(r'X\((\w+),\s*(\w+),\s*([\w:]+),\s*"(\w+)"', block)
    if not rows or not arrays or not scalars:
        sys.exit("could not parse FLASHJIT_SEMANTICS_FIELDS in " + VARIANT_HPP)
    return rows


def render(semantics, tiling, name, entry=None):
    """engine/src/kernel_source.cpp's render_source, for one variant (of ENTRY's family unless
    `entry` names another family's entry file)."""
    out = ["// flashjit kernel " + name, "namespace fj { namespace cfg {", "// Semantics: change results."]
    for typ, field, default, constant in semantics_fields():
        value = semantics.get(field, default.split("::")[-1] if "::" in default else default)
        if typ == "bool":
            out.append("constexpr bool %s = %s;" % (constant, "true" if value in (True, "true") else "false"))
        elif typ == "int":
            out.append("constexpr int %s = %d;" % (constant, int(value)))
        else:
            out.append("constexpr int %s = %d;  // %s" % (constant, ENUMS[typ][value], value))
    out.append("// Tiling: changes speed only.")
    for constant, value in tiling:
        out.append("constexpr int %s = %d;" % (constant, value))
    out += ["} }  // namespace fj::cfg", '#include "%s"' % (entry or ENTRY), ""]
    return "\n".join(out)


def template_headers():
    names, texts = [], []
    for dirpath, _, files in os.walk(TEMPLATES):
        for f in files:
            if f.endswith(".cu") or f.endswith(".cuh"):
                path = os.path.join(dirpath, f)
                names.append(os.path.relpath(path, TEMPLATES).replace(os.sep, "/"))
                texts.append(open(path, "rb").read())
    for path in (DEVICE_ARRAYS_H, SCALARS_H):  # the public headers the kernels share with the host
        names.append("flashjit/" + os.path.basename(path))
        texts.append(open(path, "rb").read())
    order = sorted(range(len(names)), key=lambda i: names[i])
    return [names[i] for i in order], [texts[i] for i in order]


class Nvrtc:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        self.version = "%d.%d" % (major.value, minor.value)
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    def compile(self, source, name, headers, options):
        names, texts = headers
        prog = ctypes.c_void_p()
        n = len(names)
        c_texts = (ctypes.c_char_p * n)(*texts)
        c_names = (ctypes.c_char_p * n)(*[x.encode() for x in names])
        r = self.lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), (name + ".cu").encode(), n, c_texts, c_names)
        if r:
            return False, "nvrtcCreateProgram: " + self.lib.nvrtcGetErrorString(r).decode(), 0.0
        c_opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
        t0 = time.perf_counter()
        r = self.lib.nvrtcCompileProgram(prog, len(options), c_opts)
        seconds = time.perf_counter() - t0
        size = ctypes.c_size_t()
        self.lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        self.lib.nvrtcGetProgramLog(prog, log)
        ok = r == 0
        if ok:
            cubin_size = ctypes.c_size_t()
            ok = self.lib.nvrtcGetCUBINSize(prog, ctypes.byref(cubin_size)) == 0 and cubin_size.value > 0
        self.lib.nvrtcDestroyProgram(ctypes.byref(prog))
        return ok, log.value.decode(errors="replace"), seconds


def compile_options(arch):
    """engine/src/compiler.cpp's compile_options, plus the resource report."""
    opts = ["--gpu-architecture=" + arch, "--std=c++17", "-DNDEBUG", "--no-source-include", "-minimal"]
    opts += os.environ.get("FLASHJIT_NVRTC_OPTIONS", "").split()
    return opts + ["--ptxas-options=-v"]


def resources(log):
    """{kernel: (registers, spill store bytes, spill load bytes, shared bytes)} from ptxas -v."""
    out = {}
    for k in KERNELS:
        m = re.search(r"Function properties for %s\s*\n[^\n]*?(\d+) bytes stack frame, (\d+) bytes spill stores, "
                      r"(\d+) bytes spill loads" % k, log)
        u = re.search(r"Compiling entry function '%s'.*?Used (\d+) registers" % k, log, re.S)
        if m and u:
            out[k] = (int(u.group(1)), int(m.group(2)), int(m.group(3)))
        elif "Compiling entry function '%s'" % k in log:
            out[k] = None  # compiled, but the report did not parse
    return out


# engine/src/families/bwd_sm80.cpp's candidate rule: BLOCK_M, BLOCK_N in {64, 128} ({32, 64} for
# wide head dims: layout.cuh's bwd_wide; for fp32 always), 4 or 8 warps, 1 or 2 stages, every product's warp split
# (templates/bwd_sm80/layout.cuh's bwd_warps_along_rows) whole 16 x 16 steps, at most
# MAX_ACCUMULATORS fp32 accumulators a thread (dK, dV, and S + dP or dQ, the larger) and, with a
# window, softcap, ALiBi, varlen or kv_lens, at most MAX_SCORE_REGISTERS_WITH_EDITS of S and dP;
# shared memory within sm_90a's 227 KB (SMEM_LIMIT).
MAX_ACCUMULATORS = 192
MAX_SCORE_REGISTERS_WITH_EDITS = 64  # kMaxScoreRegistersWithEdits: window, softcap, ALiBi, varlen or kv_lens
MAX_PHASE_REGISTERS_FP32 = 64  # kMaxPhaseRegistersFp32: fp32's S + dP or dQ tile a thread
SMEM_LIMIT = 227 * 1024  # sm_90a's opt-in shared memory a block
SMEM_LIMIT_SM80 = 163 * 1024  # sm_80's: where fp32's defaults differ from sm_90a's
WIDE_HEAD_DIM = 128  # kBwdWideHeadDim: past it both head dims pad to 32 (kBwdWideHeadDimAlign)


def vec_of(dtype, dqk, dv):
    """The host's widest_vec for dense views: the widest access of at most 16 bytes (kWidestAccessBytes)
    dividing both head dims."""
    size = 4 if dtype == "f32" else 2
    return next(v for v in (8, 4, 2, 1) if v * size <= 16 and dqk % v == 0 and dv % v == 0)


def padded(d, other):
    """layout.cuh's bwd_padded_head_dim."""
    wide = (max(d, other) + 15) // 16 * 16 > WIDE_HEAD_DIM
    align = 32 if wide else 16
    return (d + align - 1) // align * align


def warps_along_rows(warps, rows, cols, cols2=0):
    """layout.cuh's bwd_warps_along_rows: the split with the smallest warp tile rows + cols."""
    best, best_cost = 0, 0
    for wm in range(1, warps + 1):
        if warps % wm:
            continue
        wn = warps // wm
        if rows % (16 * wm) or cols % (16 * wn) or cols2 % (16 * wn):
            continue
        cost = rows // wm + max(cols, cols2) // wn
        if best == 0 or cost < best_cost:
            best, best_cost = wm, cost
    return best


def elem_bytes(dtype):
    return 4 if dtype == "f32" else 2


def row_stride(width, elem):
    """layout.cuh's Q/K and V/dO row stride: 16-bit widths of whole 128-byte groups are swizzled
    (bwd_swizzled), the rest pad by 8 elements."""
    return width if elem == 2 and width * elem % 128 == 0 else width + 8


def smem_bytes(dqk, dv, bm, bn, st, elem=2):
    """layout.cuh's bwd_layout(elem, ...).smem_bytes (P and dS rows pad by 8 elements at either size)."""
    sqk, sv, sps = row_stride(padded(dqk, dv), elem), row_stride(padded(dv, dqk), elem), bn + 8
    return elem * (bn * (sqk + sv) + st * bm * (sqk + sv) + 2 * bm * sps) + 2 * st * bm * 4


def candidate_tilings(dqk, dv, feats, dtype="f16", smem_limit=SMEM_LIMIT):
    out = []
    a, b = padded(dqk, dv), padded(dv, dqk)
    wide = max(a, b) > WIDE_HEAD_DIM
    edits = any(feats.get(k) for k in ("window", "softcap", "alibi", "varlen", "kv_lens"))
    blocks = (32, 64) if wide or dtype == "f32" else (64, 128)  # kWideBlocks or kFp32Blocks, kBlocks
    for bm in blocks:
        for bn in blocks:
            for w in (4, 8):
                for st in (1, 2):
                    if not (warps_along_rows(w, bm, bn) and warps_along_rows(w, bn, a, b) and warps_along_rows(w, bm, a)):
                        continue
                    threads = 32 * w
                    scores = 2 * bm * bn // threads
                    if edits and scores > MAX_SCORE_REGISTERS_WITH_EDITS:
                        continue
                    if smem_bytes(dqk, dv, bm, bn, st, elem_bytes(dtype)) > smem_limit:
                        continue
                    phase = max(2 * bm * bn, bm * a) // threads
                    if dtype == "f32" and phase > MAX_PHASE_REGISTERS_FP32:
                        continue
                    if bn * (a + b) // threads + phase <= MAX_ACCUMULATORS:
                        out.append((bm, bn, w, st))
    return out


def default_tiling(dqk, dv, feats, dtype="f16", smem_limit=SMEM_LIMIT):
    """bwd_sm80.cpp's default_tiling on sm_90a (or the arch of smem_limit)."""
    cands = candidate_tilings(dqk, dv, feats, dtype, smem_limit)
    a, b = padded(dqk, dv), padded(dv, dqk)
    if dtype == "f32":  # kFp32Preferred
        preferred = [(bm, bn, w, st) for bm, bn, w in ((64, 64, 8), (64, 64, 4), (32, 64, 8), (32, 32, 4))
                     for st in (2, 1)]
    elif max(a, b) > WIDE_HEAD_DIM:
        preferred = [(64, 64, 8, 2), (64, 64, 8, 1), (64, 32, 8, 2), (64, 32, 8, 1), (64, 32, 4, 2), (64, 32, 4, 1),
                     (32, 32, 4, 2), (32, 32, 4, 1)]
    else:
        preferred = ([(128, 128, 8, 2)] if max(a, b) <= 64 else []) + [(64, 128, 8, 2), (64, 64, 4, 2)]
    for t in preferred:
        if t in cands:
            return t
    return cands[0]


# Feature sets: each alone at the default tiling (head dims 64, 128, 256 and 192/128), and all of
# them (the most registers) on every candidate tiling of every head dim pair in HEAD_DIMS.
FEATURES = {"": {}, "gqa": {"gqa": True}, "window": {"window": True}, "softcap": {"softcap": True},
            "alibi": {"alibi": True}, "varlen": {"varlen": True}, "kvlens": {"kv_lens": True},
            "det": {"deterministic": True}}
ALL = {"gqa": True, "window": True, "softcap": True, "alibi": True, "varlen": True, "kv_lens": True}
FEATURES["all_det"] = dict(ALL, deterministic=True)  # deterministic mode's registers on top of all, at the defaults
DEFAULT_DIMS = ((64, 64), (128, 128), (256, 256), (192, 128))
# Every padded width up to 128 but 32 (the smallest, narrow copies, chunk counts not dividing the
# threads, the old two), the wide ones FlashAttention-2 serves (160, 192, 256), MLA's 192/128, and
# odd pairs (72/40: both narrow; 200/136: wide, padded to 224/160).
HEAD_DIMS = ((1, 1), (33, 33), (40, 40), (64, 64), (72, 72), (96, 96), (112, 112), (128, 128), (160, 160), (192, 192),
             (256, 256), (192, 128), (72, 40), (200, 136))


# The element types by name: f32 is exact fp32 (3xTF32 products), tf32 fp32 with one product.
DTYPES = {"f16": {"dtype": "f16"}, "bf16": {"dtype": "bf16"}, "f32": {"dtype": "f32", "fp32_math": "exact"},
          "tf32": {"dtype": "f32", "fp32_math": "tf32"}}


def variants(quick, dims=None):
    def one(name, dqk, dv, mask, feats, tag, tiling):
        bm, bn, w, st = tiling
        dtype = DTYPES[name]["dtype"]
        sem = {"head_dim_qk": dqk, "head_dim_v": dv, "mask": mask, "vec": vec_of(dtype, dqk, dv)}
        sem.update(DTYPES[name])
        sem.update(feats)
        d = "d%d" % dqk if dqk == dv else "d%dv%d" % (dqk, dv)
        return (sem, [("kBlockM", bm), ("kBlockN", bn), ("kWarps", w), ("kStages", st)],
                "bwd_sm80_%s_%s_%s%s_m%dn%dw%ds%d" % (name, d, mask, tag, bm, bn, w, st))

    for name in DTYPES:
        dtype = DTYPES[name]["dtype"]
        # fp32's defaults differ between sm_80 and sm_90a (shared memory): both are checked.
        limits = (SMEM_LIMIT, SMEM_LIMIT_SM80) if dtype == "f32" else (SMEM_LIMIT,)
        for mask in ("none", "causal"):
            for dqk, dv in DEFAULT_DIMS:
                if dims and (dqk, dv) not in dims:
                    continue
                for tag, feats in FEATURES.items():
                    if tag and quick:
                        continue
                    defaults = []
                    for limit in limits:
                        t = default_tiling(dqk, dv, feats, dtype, limit)
                        if t not in defaults:
                            defaults.append(t)
                            yield one(name, dqk, dv, mask, feats, "_" + tag if tag else "", t)
            if not quick:  # registers grow with the features: all of them bound each alone
                for dqk, dv in HEAD_DIMS:
                    if dims and (dqk, dv) not in dims:
                        continue
                    for t in candidate_tilings(dqk, dv, ALL, dtype):
                        yield one(name, dqk, dv, mask, ALL, "_all", t)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nvrtc", default="/usr/local/cuda/lib64/libnvrtc.so")
    ap.add_argument("--quick", action="store_true", help="default tilings only")
    ap.add_argument("--arch", action="append", help="sm_80 and sm_90a unless given")
    ap.add_argument("--show-source", action="store_true")
    ap.add_argument("--dims", action="append", help="only these head dims, DQK or DQK/DV (repeatable)")
    ap.add_argument("--filter", default="", help="only variants whose name contains this")
    args = ap.parse_args()
    nv = Nvrtc(args.nvrtc)
    headers = template_headers()
    print("NVRTC %s, %d template files" % (nv.version, len(headers[0])))
    failures = 0
    for arch in args.arch or ["sm_80", "sm_90a"]:
        dims = [tuple(int(x) for x in (d + "/" + d if "/" not in d else d).split("/")) for d in args.dims or []]
        for semantics, tiling, name in variants(args.quick, dims):
            if args.filter not in name:
                continue
            source = render(semantics, tiling, name)
            if args.show_source:
                print(source)
            ok, log, seconds = nv.compile(source, name, headers, compile_options(arch))
            res = resources(log) if ok else {}
            line = ", ".join("%s %s" % (k.replace("flashjit_bwd_", ""),
                                        "%d regs %d/%d B spilled" % res[k] if res[k] else "?") for k in res)
            spills = any(v and (v[1] or v[2]) for v in res.values())
            missing = ok and len(res) != len(KERNELS)  # an entry point the engine would look up is absent
            status = "FAIL" if not ok or missing else ("SPILL" if spills else "ok")
            print("%-6s %-7s %-40s %6.1f s  %s" % (status, arch, name, seconds, line), flush=True)
            if not ok:
                print(log)
            failures += status != "ok"
    print("%d failed or spilled" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
