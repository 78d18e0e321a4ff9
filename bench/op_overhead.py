#!/usr/bin/env python3
"""Host time per call through flashjit's operator (issue 23: at most 10 us), on a tiny problem
(B1 S64 H1 D64 fp16) where the host dominates, under grad mode (inputs that don't require grad),
no_grad and inference_mode:

  ctypes (prepared)     flashjit_forward_v2 on arguments packed once: the floor (and
                        flashjit_workspace_size_v2 on them: the same planning, no launch)
  op                    torch.ops.flashjit.attention, with the kernel this process loaded
  flash_attn_func       flashjit's FlashAttention-style API (ops.dense: the eager fast path where
                        the extension is in use, else the dense op)
  eager                 the eager fast path (eager/, _flashjit_eager.abi3.so): the extension
                        called alone, ops.dense() with it, and ops.dense() and flash_attn_func with
                        it off (FLASHJIT_EAGER=0's route, toggled in this process); its guards
                        (modes, profiler, tracer, autograd, checked in the extension) called
                        from Python alone, and the extension with them off; flash_attn_func's
                        own entry (flash_attn); ops.dense and flash_attn_func as they were with
                        the guards in Python (the "before" rows); its output allocation (DLPack
                        exchange API) alone beside torch.empty from Python
  SDPA flash / cuDNN    PyTorch's own, for scale

Each row is the median over --rounds rounds of --calls back-to-back calls, timed on the host
(perf_counter around the loop, torch.cuda.synchronize before each round and after it); `total`
adds the final synchronize, so total well above host means the GPU, not the host, set the pace.
Within a mode every case runs once a round, rounds alternating A B .. B A, so that the host's
drift falls on every row alike. "dense op" is flashjit::attention_dense, what flash_attn_func
takes for q, k, v with no side arrays and no LSE.
The op and flash_attn_func run twice: with the C++ kernel in this process, and with the Python
kernel in a child process (FLASHJIT_TORCH_OP=0). "flash_attn_func, q requires grad" is the
autograd.Function route a training-mode forward takes. With --stub-engine (bench/stub_engine.c
built as a shared library) the C++ kernel and the eager extension are then bound to entry points
that do nothing, and the op and the extension are timed again: the dispatcher's (or the
extension's) and the kernel's own share, without the engine and the launch.
Writes JSON to --json."""
import argparse
import contextlib
import ctypes
import json
import os
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import flashjit  # noqa: E402
from flashjit import _abi, _library, ops  # noqa: E402

MODES = {"grad": torch.enable_grad, "no_grad": torch.no_grad, "inference_mode": torch.inference_mode}


def time_calls(fn, calls):
    """(host, total) microseconds per call of one chunk of back-to-back calls."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return (t1 - t0) / calls * 1e6, (t2 - t0) / calls * 1e6


def measure(rows, a):
    q, k, v = (torch.randn(1, 64, 1, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    kernel = ops.kernel_impl()
    op = torch.ops.flashjit.attention
    op_args = (q, k, v, None, None, 0, 0, None, None, None, None, 0.0, False, -1, -1, 0.0, False, False)
    dense = torch.ops.flashjit.attention_dense
    qg = q.clone().requires_grad_()
    none = contextlib.nullcontext
    stub = ctypes.CDLL(a.stub_engine) if a.stub_engine and kernel == "cpp" else None
    bind_stub = (lambda: _bind(stub, "stub_forward_v2", "stub_workspace_size_v2", "stub_last_error")) if stub else None
    bind_real = (lambda: _bind(_library.get(), "flashjit_forward_v2", "flashjit_workspace_size_v2",
                               "flashjit_last_error")) if stub else None
    # (name, fn, context entered around each chunk, modes, before and after each chunk)
    cases = [("op (%s kernel)" % kernel, lambda: op(*op_args), none, MODES, None, None),
             ("dense op (%s kernel)" % kernel, lambda: dense(q, k, v, 0.0, False, -1, -1, 0.0), none, MODES, None,
              None),
             ("flash_attn_func (%s kernel)" % kernel, lambda: flashjit.flash_attn_func(q, k, v), none, MODES, None,
              None),
             ("flash_attn_func, q requires grad (%s kernel)" % kernel, lambda: flashjit.flash_attn_func(qg, k, v), none,
              ["grad"], None, None)]
    if not a.op_only:
        lib = _library.get()
        prepared = _abi.make_args_v2(q, k, v, torch.empty_like(q))
        stream = torch.cuda.current_stream().cuda_stream
        qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
        cases.insert(0, ("ctypes (prepared)", lambda: _abi.forward_args(lib, prepared, stream), none, MODES, None,
                         None))
        # The same call planned as forward plans it, nothing launched: the engine's share without the launch.
        cases.insert(1, ("ctypes (prepared), workspace_size: no launch", lambda: _abi.workspace_size(lib, prepared, stream),
                         none, MODES, None, None))
        for name, backend in (("SDPA flash", SDPBackend.FLASH_ATTENTION), ("SDPA cuDNN", SDPBackend.CUDNN_ATTENTION)):
            cases.append((name, lambda: F.scaled_dot_product_attention(qt, kt, vt),
                          lambda backend=backend: sdpa_kernel(backend), MODES, None, None))
    if stub:
        cases.append(("op (cpp kernel, engine stubbed)", lambda: op(*op_args), none, MODES, bind_stub, bind_real))
        cases.append(("dense op (cpp kernel, engine stubbed)", lambda: dense(q, k, v, 0.0, False, -1, -1, 0.0), none,
                      MODES, bind_stub, bind_real))
    eager = ops._EAGER
    if eager is not None:
        scalars = (0.0, False, -1, -1, 0.0)
        eager_off = (lambda: (setattr(ops, "_EAGER_DENSE", None), setattr(ops, "_EAGER_FLASH_ATTN", None)))
        eager_on = (lambda: (setattr(ops, "_EAGER_DENSE", eager.dense),
                             setattr(ops, "_EAGER_FLASH_ATTN", eager.flash_attn)))
        dlpack_on = (lambda: ops.set_eager_output_allocator("dlpack"))
        dlpack_off = (lambda: ops.set_eager_output_allocator("torch"))
        # Named by kernel: the child process (--op-only, the Python kernel) times these too.
        cases += [("ops.dense, FLASHJIT_EAGER=0 (%s kernel)" % kernel, lambda: ops.dense(q, k, v, *scalars), none,
                   MODES, eager_off, eager_on),
                  ("flash_attn_func, FLASHJIT_EAGER=0 (%s kernel)" % kernel, lambda: flashjit.flash_attn_func(q, k, v),
                   none, MODES, eager_off, eager_on)]
        if not a.op_only:
            shape = tuple(q.shape)
            cases += [("ops.dense, eager path", lambda: ops.dense(q, k, v, *scalars), none, MODES, None, None),
                      ("eager extension alone", lambda: eager.dense(q, k, v, *scalars), none, MODES, None, None),
                      ("eager path guards from Python (modes, profiler, tracer)",
                       lambda: any(guard() for guard in ops.EAGER_GUARDS), none, MODES, None, None),
                      ("eager extension alone, guards off", lambda: eager.dense(q, k, v, *scalars), none, MODES,
                       lambda: eager.set_guards(None, ()),
                       lambda: eager.set_guards(torch.is_grad_enabled, ops.EAGER_GUARDS)),
                      ("eager flash_attn alone", lambda: eager.flash_attn(q, k, v, None, False, (-1, -1), 0.0), none,
                       MODES, None, None),
                      # The routes as they were before the guards moved into the extension (bench/NOTES.md
                      # entry 30): the same Python, timed in this process beside today's.
                      ("ops.dense, eager path, guards in Python (before)", lambda: _dense_before(q, k, v, *scalars),
                       none, MODES, lambda: eager.set_guards(None, ()),
                       lambda: eager.set_guards(torch.is_grad_enabled, ops.EAGER_GUARDS)),
                      ("flash_attn_func, eager path, guards in Python (before)", lambda: _flash_attn_before(q, k, v),
                       none, MODES, lambda: eager.set_guards(None, ()),
                       lambda: eager.set_guards(torch.is_grad_enabled, ops.EAGER_GUARDS)),
                      ("ops.dense, eager path (dlpack allocator)", lambda: ops.dense(q, k, v, *scalars), none, MODES,
                       dlpack_on, dlpack_off),
                      ("output allocation: eager, Tensor.new_empty (default)", lambda: eager._output_like(q, v), none,
                       MODES, None, None),
                      ("output allocation: eager, exchange API (dlpack)", lambda: eager._output_like(q, v), none, MODES,
                       dlpack_on, dlpack_off),
                      ("output allocation: torch.empty from Python",
                       lambda: torch.empty(shape, dtype=q.dtype, device=q.device), none, MODES, None, None)]
        if stub:
            eager_stub = ctypes.CDLL(a.stub_engine)
            cases.append(("eager extension alone (engine stubbed)", lambda: eager.dense(q, k, v, *scalars), none,
                          MODES, lambda: _bind_eager(eager, eager_stub, "stub_forward_v2", "stub_workspace_size_v2",
                                                     "stub_last_error"),
                          lambda: _bind_eager(eager, _library.get(), "flashjit_forward_v2",
                                              "flashjit_workspace_size_v2", "flashjit_last_error")))
    for mode in MODES:
        here = [c for c in cases if mode in c[3]]
        samples = {c[0]: ([], []) for c in here}
        failed = {}
        # Rounds in A B .. B A order, every case once a round: a drift of the host's clocks or load
        # falls on all of them alike.
        for r in range(a.rounds + 1):
            for name, fn, outer, _, before, after in (here if r % 2 == 0 else here[::-1]):
                if name in failed:
                    continue
                try:
                    with outer(), MODES[mode]():
                        if before:
                            before()
                        try:
                            host, total = time_calls(fn, 50 if r == 0 else a.calls)  # round 0 warms up
                        finally:
                            if after:
                                after()
                except RuntimeError as e:  # e.g. a backend this GPU or problem lacks
                    failed[name] = str(e).splitlines()[0]
                    continue
                if r > 0:
                    samples[name][0].append(host)
                    samples[name][1].append(total)
        for name, fn, *_ in here:
            rows.setdefault(name, {})
            if name in failed:
                rows[name][mode] = {"error": failed[name]}
                print("%-46s %-15s failed: %s" % (name, mode, failed[name]), flush=True)
                continue
            host, total = (sorted(x) for x in samples[name])
            rows[name][mode] = r = {"host_us": round(host[len(host) // 2], 3), "total_us": round(total[len(total) // 2], 3),
                                    "host_min_us": round(host[0], 3)}
            print("%-46s %-15s %8.2f us host  %8.2f us total  (min %.2f)" % (name, mode, r["host_us"], r["total_us"],
                                                                          r["host_min_us"]), flush=True)


def _dense_before(q, k, v, softmax_scale, causal, window_left, window_right, softcap):
    """ops.dense() as it was at c903ffc (its guards in Python), for the before/after rows."""
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        raise AssertionError("the timed calls need no grad")
    if torch.compiler.is_compiling():
        raise AssertionError("not timed under a compiler")
    if not any(guard() for guard in ops.EAGER_GUARDS):
        try:
            out = ops._EAGER.dense(q, k, v, softmax_scale, causal, window_left, window_right, softcap)
        except TypeError:
            out = NotImplemented
        if out is not NotImplemented:
            return out
    raise AssertionError("the fast path declined")


def _flash_attn_before(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                       alibi_slopes=None, deterministic=False, return_attn_probs=False, sinks=None):
    """flash_attn_func()'s dense branch as it was at c903ffc, over _dense_before()."""
    from flashjit import interface
    interface._no_dropout(dropout_p)
    if alibi_slopes is None and sinks is None and not return_attn_probs:
        left, right = interface._window(window_size, causal)
        return _dense_before(q, k, v, interface._scale(softmax_scale), bool(causal), left, right,
                             float(softcap or 0.0))
    raise AssertionError("only the dense branch is timed")


def _bind(lib, forward, workspace_size, last_error):
    """Binds the C++ kernel to these entry points of `lib` (the engine's, or the stand-ins')."""
    address = (lambda name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)
    real = _library.get()
    if ops._TORCH_OP.flashjit_torch_op_bind(real.engine, address(forward), address(workspace_size),
                                            address(last_error), real.abi, real.flashjit_args_v2_size()) != 0:
        raise RuntimeError("flashjit_torch_op_bind refused the %s entry points" % forward)


def _bind_eager(eager, lib, forward, workspace_size, last_error):
    """Binds the eager extension to these entry points of `lib` (the engine's, or the stand-ins')."""
    address = (lambda name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)
    real = _library.get()
    eager.bind(torch.Tensor.__dlpack_c_exchange_api__, torch.Tensor, flashjit.FlashjitError, real.engine.value,
               address(forward), address(workspace_size), address(last_error), real.abi, real.flashjit_args_v2_size())


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=2000, help="calls per round")
    p.add_argument("--rounds", type=int, default=31)
    p.add_argument("--json", help="write the results here")
    p.add_argument("--op-only", action="store_true", help="only the op and flash_attn_func (the child's part)")
    p.add_argument("--no-python-kernel", action="store_true", help="skip the child process with the Python kernel")
    p.add_argument("--stub-engine", help="bench/stub_engine.c built as a shared library: also time the op without "
                                         "the engine (see above)")
    a = p.parse_args()
    info = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "flashjit": _library.version(),
            "kernel_impl": ops.kernel_impl(), "python_kernel_reason": ops.python_kernel_reason(),
            "eager_reason": ops.eager_reason(),
            "problem": "B1 S64 H1 D64 fp16, no mask", "calls": a.calls, "rounds": a.rounds}
    print(json.dumps(info), flush=True)
    rows = {}
    measure(rows, a)
    if not a.op_only and not a.no_python_kernel and ops.kernel_impl() == "cpp":
        env = dict(os.environ, FLASHJIT_TORCH_OP="0")
        child = os.path.join(os.environ.get("TMPDIR", "/tmp"), "op_overhead_python_kernel.json")
        cmd = [sys.executable, os.path.abspath(__file__), "--op-only", "--calls", str(a.calls), "--rounds",
               str(a.rounds), "--json", child]
        subprocess.run(cmd, env=env, check=True)
        with open(child) as f:
            rows.update(json.load(f)["rows"])
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(info, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
