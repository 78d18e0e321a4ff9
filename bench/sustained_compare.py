#!/usr/bin/env python3
"""Times flashjit against PyTorch SDPA's cuDNN backend under sustained load: blocks of several
seconds of back-to-back calls, alternating A B B A, so the power-capped clock settles within each
block instead of carrying over from whichever kernel ran just before (sdpa_compare's short rounds
in a fixed order let cuDNN start its rounds after FA2's lighter load, with the clock's headroom).
Per block: CUDA events around the whole block, the SM clock sampled half way, and NVML's energy
counter before and after (joules per call: what the power cap rations). Each side keeps its
median block. Inputs as sdpa_compare: random normal, [B, S, H, D] (SDPA gets [B, H, S, D] views),
B*S = --tokens, Hq*D = --hidden.

    python3 bench/sustained_compare.py --lib build/libflashjit.so --dims 128 --seqs 4096,8192 \\
        --group 4 --dtype bfloat16 --out bench/results/x.md --json bench/results/x.json
"""
import argparse
import ctypes
import datetime
import json
import os
import sys

import torch
from torch.nn.attention import SDPBackend

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import flashjit_ctypes as fj  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdpa_compare import flops, sdpa_call, source_commit  # noqa: E402

WARMUP = 10  # calls before each block: the first call of a block may compile or load


class Nvml:
    """NVML's total-energy counter (millijoules since the driver loaded) and the SM clock;
    None-valued where the library is missing."""

    def __init__(self):
        try:
            self.lib = ctypes.CDLL("libnvidia-ml.so.1")
            self.lib.nvmlInit_v2()
            self.handle = ctypes.c_void_p()
            self.lib.nvmlDeviceGetHandleByIndex_v2(torch.cuda.current_device(), ctypes.byref(self.handle))
        except OSError:
            self.lib = None

    def energy_mj(self):
        e = ctypes.c_ulonglong()
        if not self.lib or self.lib.nvmlDeviceGetTotalEnergyConsumption(self.handle, ctypes.byref(e)) != 0:
            return None
        return e.value

    def sm_clock_mhz(self):
        kSmClock = 1  # NVML_CLOCK_SM
        c = ctypes.c_uint()
        if not self.lib or self.lib.nvmlDeviceGetClockInfo(self.handle, kSmClock, ctypes.byref(c)) != 0:
            return None
        return c.value


def block(fn, calls, nvml):
    """One block of `calls` back-to-back calls: ms per call, mJ per call, SM MHz half way."""
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    e0 = nvml.energy_mj()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    clock = None
    for i in range(calls):
        fn()
        if i == calls // 2:
            clock = nvml.sm_clock_mhz()
    end.record()
    end.synchronize()
    e1 = nvml.energy_mj()
    return start.elapsed_time(end) / calls, (e1 - e0) / calls if e0 is not None and e1 is not None else None, clock


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", default="build/libflashjit.so")
    p.add_argument("--dims", default="128")
    p.add_argument("--dv", type=int, default=0, help="value head dim (default: the same as --dims)")
    p.add_argument("--seqs", default="8192")
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--group", type=int, default=1, help="query heads per key/value head (GQA)")
    p.add_argument("--dtype", default="bfloat16", choices=["float16", "bfloat16"])
    p.add_argument("--causal", default="both", choices=["no", "yes", "both"])
    p.add_argument("--seconds", type=float, default=2.5, help="length of one block")
    p.add_argument("--blocks", type=int, default=4, help="blocks per side, alternating A B B A")
    p.add_argument("--out", help="markdown table")
    p.add_argument("--json", help="JSON results")
    a = p.parse_args()

    lib = fj.load(a.lib)
    nvml = Nvml()
    dt = getattr(torch, a.dtype)
    stream = torch.cuda.current_stream().cuda_stream
    causals = {"no": [False], "yes": [True], "both": [False, True]}[a.causal]
    rows = []
    torch.manual_seed(0)
    for d in [int(x) for x in a.dims.split(",")]:
        for s in [int(x) for x in a.seqs.split(",")]:
            b, h, dv = a.tokens // s, a.hidden // d, a.dv or d
            q = torch.randn(b, s, h, d, device="cuda", dtype=dt)
            k = torch.randn(b, s, h // a.group, d, device="cuda", dtype=dt)
            v = torch.randn(b, s, h // a.group, dv, device="cuda", dtype=dt)
            o = torch.empty(b, s, h, dv, device="cuda", dtype=dt)
            qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
            for causal in causals:
                args = fj.make_args(q, k, v, o, causal=causal)
                fns = {"flashjit": lambda: fj.forward_args(lib, args, stream),
                       "cudnn": sdpa_call(SDPBackend.CUDNN_ATTENTION, qt, kt, vt, causal, a.group, "sdpa_cudnn")}
                if fns["cudnn"] is None:
                    continue
                fl = flops(b, h, s, d, dv, causal)
                probe, _, _ = block(fns["flashjit"], 5, nvml)
                calls = max(10, int(a.seconds / (probe / 1e3)))
                per = {name: [] for name in fns}
                for i in range(a.blocks):
                    for name in (list(fns) if i % 2 == 0 else list(fns)[::-1]):
                        per[name].append(block(fns[name], calls, nvml))
                r = {"D": d, "Dv": dv, "S": s, "B": b, "H": h, "group": a.group, "causal": causal, "calls": calls}
                for name, blocks in per.items():
                    ms, mj, clock = sorted(blocks)[len(blocks) // 2]
                    r[name] = {"tflops": fl / ms / 1e9, "mj_per_call": mj, "sm_mhz": clock,
                               "blocks_tflops": [fl / x[0] / 1e9 for x in blocks]}
                r["ratio_cudnn"] = r["flashjit"]["tflops"] / r["cudnn"]["tflops"]
                rows.append(r)
                f, c = r["flashjit"], r["cudnn"]
                print("D=%3d Dv=%3d S=%5d g%d causal=%d  flashjit %6.1f (%s MHz, %s mJ)  cudnn %6.1f (%s MHz, %s mJ)  "
                      "ratio %.3f  blocks %s | %s" % (
                          d, dv, s, a.group, causal, f["tflops"], f["sm_mhz"], "%.0f" % f["mj_per_call"] if f["mj_per_call"] else "-",
                          c["tflops"], c["sm_mhz"], "%.0f" % c["mj_per_call"] if c["mj_per_call"] else "-", r["ratio_cudnn"],
                          " ".join("%.0f" % x for x in f["blocks_tflops"]), " ".join("%.0f" % x for x in c["blocks_tflops"])),
                      flush=True)
            del q, k, v, o
    meta = {"device": torch.cuda.get_device_name(), "date": datetime.date.today().isoformat(),
            "commit": source_commit(), "torch": torch.__version__, "dtype": a.dtype,
            "seconds": a.seconds, "blocks": a.blocks, "flashjit": lib.flashjit_version().decode()}
    if a.json:
        with open(a.json, "w") as out:
            json.dump({"meta": meta, "rows": rows}, out, indent=1)
    if a.out:
        with open(a.out, "w") as out:
            out.write("# Sustained load, %s, B*S = %d tokens, Hq*D = %d, group %d (TFLOP/s)\n\n" % (
                a.dtype, a.tokens, a.hidden, a.group))
            out.write("Device: %s; date: %s; commit: %s; PyTorch %s; %s. Same process; per cell %d blocks a side "
                      "of ~%.1f s back-to-back calls, A B B A; each side's median block; SM clock half way through "
                      "it, energy from NVML.\n\n" % (meta["device"], meta["date"], meta["commit"], meta["torch"],
                                                     meta["flashjit"], a.blocks, a.seconds))
            out.write("| D | Dv | S | causal | flashjit | cuDNN | flashjit / cuDNN | MHz (fj / cuDNN) "
                      "| mJ a call (fj / cuDNN) |\n|---|---|---|---|---|---|---|---|---|\n")
            for r in rows:
                f, c = r["flashjit"], r["cudnn"]
                out.write("| %d | %d | %d | %s | %.0f | %.0f | %.3f | %s / %s | %s / %s |\n" % (
                    r["D"], r["Dv"], r["S"], "yes" if r["causal"] else "no", f["tflops"], c["tflops"], r["ratio_cudnn"],
                    f["sm_mhz"], c["sm_mhz"], "%.0f" % f["mj_per_call"] if f["mj_per_call"] else "–",
                    "%.0f" % c["mj_per_call"] if c["mj_per_call"] else "–"))


if __name__ == "__main__":
    main()
