"""flashjit's attention as a PyTorch operator: torch.ops.flashjit.attention.

Registered with torch.library (a schema, a CUDA implementation through the C ABI, and a fake
implementation), so torch.compile(fullgraph=True) traces through it, CUDA graphs capture it once
its variant is warm, and torch.export keeps it. libflashjit.so is not linked against libtorch: one
wheel serves every PyTorch version that has torch.library.custom_op (2.4 and newer).

The CUDA implementation is C++ where it can be (kernel_impl() says which runs): the wheel's
libflashjit_torch_op.so (torch_op/, on PyTorch's stable ABI, torch 2.10 and newer), loaded with
torch.ops.load_library and bound to this package's engine, skips the dispatcher's boxed call into
Python. Without it (not built, torch older than 2.10, FLASHJIT_TORCH_OP=0) the Python kernel
`attention` below runs, with the same checks, messages and results.

Eager dense calls (dense(): flash_attn_func and call() without side arrays or LSE) on plain CUDA
tensors skip the operator altogether where the wheel's eager extension loads (_flashjit_eager.abi3.so,
eager/; FLASHJIT_EAGER=0 turns it off): same checks, messages, output and stream, no dispatcher.
Compilers, torch.jit.trace, torch-function and dispatch modes, the profiler and autograd keep the
operator (see "The eager fast path" below).

The operator has no autograd formula, so that no Python autograd kernel runs on every call (even
under no_grad). Where grad is enabled and an input requires grad, the public functions (call, and
flashjit's FlashAttention-style API on it) run torch.ops.flashjit.attention_train instead: the
same operator computing its LSE too, whose autograd formula calls torch.ops.flashjit.attention_backward
(the engine's backward: dq, dk, dv; the LSE output is not differentiated, as FlashAttention's).
What the backward does not support (so far it takes fp16/bf16/fp32, head dims 1 to 256, q/k's
apart from v's, causal or not, GQA/MQA, windows, softcap, ALiBi, varlen, kv_lens and sinks; not
paged) raises the engine's message when backward runs. Called directly, torch.ops.flashjit.attention under autograd gets PyTorch's "autograd kernel was not
registered" warning on backward instead.

Layouts follow FlashAttention: q, k, v and the output are [batch, seq, heads, head_dim] (any
strides), or [total_tokens, heads, head_dim] with cu_seqlens (varlen); with block_table, k and v
are page pools [pages, page_size, heads_kv, head_dim]. The LSE (fp32, natural log) is [batch,
heads_q, seq_q], or [heads_q, total_q] with varlen; an empty tensor unless asked for.
"""
import ctypes
import importlib.util
import os
import re
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _abi, _library
from ._abi import FlashjitError

_INT32_ARRAYS = ("cu_seqlens_q", "cu_seqlens_k", "kv_lens", "block_table", "kv_starts")


def _check_side(name, t, device, dtype, shape):
    """A side array: on the inputs' device, of its dtype, with innermost stride 1 and this shape
    (a None entry of `shape` matches any size)."""
    if t is None:
        return
    if t.device != device:
        raise FlashjitError("%s is on %s but q is on %s: side arrays live on the inputs' GPU" % (name, t.device, device))
    if t.dtype != dtype:
        raise FlashjitError("%s must be %s, got %s" % (name, str(dtype).replace("torch.", ""), str(t.dtype).replace("torch.", "")))
    if t.dim() != len(shape) or any(want is not None and got != want for got, want in zip(t.shape, shape)):
        want = "[" + ", ".join("*" if w is None else str(w) for w in shape) + "]"
        raise FlashjitError("%s must have shape %s, got %s" % (name, want, list(t.shape)))
    if t.numel() and t.stride(-1) != 1:
        raise FlashjitError("%s must have a unit stride in its last dim, got strides %s" % (name, list(t.stride())))


def _check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, kv_lens, block_table, alibi_slopes, sinks, kv_starts=None):
    varlen = cu_seqlens_q is not None
    want_dim = 3 if varlen else 4
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not t.is_cuda:
            raise FlashjitError("%s is on %s: flashjit runs on CUDA tensors" % (name, t.device))
        if t.dtype not in (torch.float16, torch.bfloat16, torch.float32):
            raise FlashjitError("%s must be float16, bfloat16 or float32, got %s" % (name, t.dtype))
    if q.dim() != want_dim:
        raise FlashjitError("q must be %s, got %d dims" % (
            "[total_q, heads, head_dim] with cu_seqlens_q" if varlen else "[batch, seq, heads, head_dim]", q.dim()))
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise FlashjitError("%s is on %s but q is on %s" % (name, t.device, q.device))
        if t.dtype != q.dtype:
            raise FlashjitError("q, k and v must share one dtype: q is %s, %s is %s" % (q.dtype, name, t.dtype))
        kv_dim = 4 if block_table is not None or not varlen else 3
        if t.dim() != kv_dim:
            raise FlashjitError("%s must have %d dims here, got %d" % (name, kv_dim, t.dim()))
    if varlen and cu_seqlens_k is None and block_table is None:
        raise FlashjitError("cu_seqlens_k is needed with cu_seqlens_q (or a block_table with kv_lens)")
    batch = cu_seqlens_q.shape[0] - 1 if varlen else q.shape[0]
    if varlen and cu_seqlens_q.dim() != 1:
        raise FlashjitError("cu_seqlens_q must be 1-d [batch + 1], got shape %s" % list(cu_seqlens_q.shape))
    _check_side("cu_seqlens_q", cu_seqlens_q, q.device, torch.int32, (batch + 1,))
    _check_side("cu_seqlens_k", cu_seqlens_k, q.device, torch.int32, (batch + 1,))
    _check_side("kv_lens", kv_lens, q.device, torch.int32, (batch,))
    _check_side("kv_starts", kv_starts, q.device, torch.int32, (batch,))
    _check_side("block_table", block_table, q.device, torch.int32, (batch, None))
    if block_table is not None and kv_lens is None:
        raise FlashjitError("block_table needs kv_lens (cache_seqlens / seqused_k): the keys each sequence uses")
    hq = q.shape[-2]
    if alibi_slopes is not None:
        shape = (hq,) if alibi_slopes.dim() == 1 else (batch, hq)
        _check_side("alibi_slopes", alibi_slopes, q.device, torch.float32, shape)
    _check_side("sinks", sinks, q.device, torch.float32, (hq,))


def _out_shapes(q, v, varlen, return_lse):
    out = tuple(q.shape[:-1]) + (v.shape[-1],)
    if not return_lse:
        return out, (0,)
    return out, ((q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[2], q.shape[1]))


def c_args(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lens, block_table,
           alibi_slopes, sinks, softmax_scale, causal, window_left, window_right, softcap, return_lse, check,
           kv_starts=None):
    """The C ABI's flashjit_attention_args_v2 for the operator's arguments (FlashAttention's layouts
    seen as the ABI's [batch, seq, heads, head_dim] views)."""
    varlen = cu_seqlens_q is not None
    as4 = (lambda t: t.unsqueeze(0)) if varlen else (lambda t: t)
    kk, vv = (k, v) if block_table is not None else (as4(k), as4(v))
    lse_view = None
    if return_lse:  # the C ABI's [batch, heads_q, seq_q]
        lse_view = lse.unsqueeze(0) if varlen else lse
    window = None if window_left < 0 and window_right < 0 else (window_left, window_right)
    # With block_table the keys come through the table: no cu_seqlens_k.
    varlen_args = (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k) if varlen else None
    return _abi.make_args_v2(as4(q), kk, vv, as4(out), causal=causal, lse=lse_view, scale=softmax_scale, varlen=varlen_args,
                             window=window, softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks, kv_lens=kv_lens,
                             block_table=block_table, check=check, kv_starts=kv_starts)


def launch(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Optional[Tensor], cu_seqlens_q=None, cu_seqlens_k=None,
           max_seqlen_q=0, max_seqlen_k=0, kv_lens=None, block_table=None, alibi_slopes=None, sinks=None,
           softmax_scale=0.0, causal=False, window_left=-1, window_right=-1, softcap=0.0, check=False,
           kv_starts=None):
    """Runs attention into tensors the caller allocated (any strides): out as the operator's output,
    lse (fp32, the operator's LSE shape) or None. For callers that own their outputs' layout, such
    as the SDPA backend (flashjit.sdpa), which must return aten's layouts; not traced by
    torch.compile (use the operator for that)."""
    _check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, kv_lens, block_table, alibi_slopes, sinks, kv_starts)
    _launch_checked(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lens, block_table,
                    alibi_slopes, sinks, softmax_scale, causal, window_left, window_right, softcap, check, kv_starts)


def _launch_checked(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lens, block_table,
                    alibi_slopes, sinks, softmax_scale, causal, window_left, window_right, softcap, check,
                    kv_starts=None):
    lib = _library.get()
    args = c_args(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lens, block_table,
                  alibi_slopes, sinks, softmax_scale, causal, window_left, window_right, softcap, lse is not None, check,
                  kv_starts)
    device = q.device
    if device.index is not None and device.index != torch.cuda.current_device():
        with torch.cuda.device(device):  # the engine runs on the calling thread's current context
            _run(lib, args, torch.cuda.current_stream(device).cuda_stream, device)
    else:
        _run(lib, args, torch.cuda.current_stream(device).cuda_stream, device)


def _run(lib, args, stream, device, workspace_size=_abi.workspace_size, launch=_abi.forward_args):
    """One call on `stream` (the forward's by default; the backward passes its own two functions).
    While the stream is captured into a CUDA graph the workspace comes from PyTorch's allocator (so
    from the graph's memory pool), not the engine's per-stream pool: torch.cuda.graph,
    make_graphed_callables and torch.compile's CUDA graphs capture on streams of their own, which
    eager calls never warmed up."""
    if torch.cuda.is_current_stream_capturing():
        size = workspace_size(lib, args, stream)
        if size:
            workspace = torch.empty(size, dtype=torch.uint8, device=device)
            args.workspace, args.workspace_bytes = workspace.data_ptr(), size
    launch(lib, args, stream)


# The arguments attention and attention_train share.
_ARGUMENTS = ("Tensor q, Tensor k, Tensor v, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, int max_seqlen_q, "
              "int max_seqlen_k, Tensor? kv_lens, Tensor? block_table, Tensor? alibi_slopes, Tensor? sinks, "
              "float softmax_scale, bool causal, int window_left, int window_right, float softcap, bool return_lse, "
              "bool check")
# attention_train takes no kv_starts (the backward takes no key starts) and carries the backward's
# deterministic flag; each comes last, with a default: callers that have none pass 18 arguments.
_TRAIN_SCHEMA = "attention_train(%s, bool deterministic=False) -> (Tensor, Tensor)" % _ARGUMENTS
_SCHEMA = "attention(%s, Tensor? kv_starts=None) -> (Tensor, Tensor)" % _ARGUMENTS

# Defined with torch.library.Library rather than torch.library.custom_op: the same operator to
# torch.compile, export and CUDA graphs, with less dispatch per call (on an H200 host the call
# went from 66 to 53 us, bench/NOTES.md entry 23; still far above the C ABI's 5).
_LIBRARY = torch.library.Library("flashjit", "DEF")
_LIBRARY.define(_SCHEMA)


def attention(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
              max_seqlen_q: int, max_seqlen_k: int, kv_lens: Optional[Tensor], block_table: Optional[Tensor],
              alibi_slopes: Optional[Tensor], sinks: Optional[Tensor], softmax_scale: float, causal: bool,
              window_left: int, window_right: int, softcap: float, return_lse: bool,
              check: bool, kv_starts: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """torch.ops.flashjit.attention's CUDA kernel: attention forward; see the module's docstring for
    layouts. softmax_scale 0: 1/sqrt(head_dim); window -1: unbounded; softcap 0: none; check: read
    back and check the device metadata; kv_starts: each sequence's first key (cache_leftpad)."""
    _check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, kv_lens, block_table, alibi_slopes, sinks, kv_starts)
    out_shape, lse_shape = _out_shapes(q, v, cu_seqlens_q is not None, return_lse)
    out = q.new_empty(out_shape)
    lse = q.new_empty(lse_shape, dtype=torch.float32)
    _launch_checked(q, k, v, out, lse if return_lse else None, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                    kv_lens, block_table, alibi_slopes, sinks, softmax_scale, causal, window_left, window_right, softcap,
                    check, kv_starts)
    return out, lse


@torch.library.register_fake("flashjit::attention", lib=_LIBRARY)
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lens, block_table, alibi_slopes, sinks,
      softmax_scale, causal, window_left, window_right, softcap, return_lse, check, kv_starts=None):
    _check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, kv_lens, block_table, alibi_slopes, sinks, kv_starts)
    out_shape, lse_shape = _out_shapes(q, v, cu_seqlens_q is not None, return_lse)
    return q.new_empty(out_shape), q.new_empty(lse_shape, dtype=torch.float32)


# The common call as an operator of its own: dense q, k, v, no side arrays, no LSE, no checked
# mode. 8 arguments and one output where the general operator takes 19 and returns two: the
# dispatcher's conversions and an allocation fewer per call (bench/NOTES.md entry 28).
_DENSE_SCHEMA = ("attention_dense(Tensor q, Tensor k, Tensor v, float softmax_scale, bool causal, int window_left, "
                 "int window_right, float softcap) -> Tensor")
_LIBRARY.define(_DENSE_SCHEMA)


def attention_dense(q: Tensor, k: Tensor, v: Tensor, softmax_scale: float, causal: bool, window_left: int,
                    window_right: int, softcap: float) -> Tensor:
    """torch.ops.flashjit.attention_dense's CUDA kernel: the general one's output, on dense q, k, v."""
    return attention(q, k, v, None, None, 0, 0, None, None, None, None, softmax_scale, causal, window_left, window_right,
                     softcap, False, False)[0]


@torch.library.register_fake("flashjit::attention_dense", lib=_LIBRARY)
def _(q, k, v, softmax_scale, causal, window_left, window_right, softcap):
    _check_inputs(q, k, v, None, None, None, None, None, None)
    return q.new_empty(_out_shapes(q, v, False, False)[0])


def direct_call_is_safe(tensors):
    """True where calling `attention` directly gives what the operator would: CUDA tensors (the
    first is the query), no compiler, tracer, dispatch or function mode, functorch transform, or
    gradient to record. Skips the dispatcher's boxed Python call in eager code (53 -> 34 us per
    call on an H200 host, bench/NOTES.md entry 23)."""
    if torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() or \
            torch._C._is_torch_function_mode_enabled() or torch._C._are_functorch_transforms_active():
        return False
    if not tensors[0].is_cuda:
        return False
    grad = torch.is_grad_enabled()
    for t in tensors:
        if t is not None and (type(t) is not torch.Tensor or (grad and t.requires_grad)):
            return False
    return True


# ---- The CUDA kernel: C++ (libflashjit_torch_op.so) when it loads, else the Python one. ----

TORCH_OP_LIBRARY = "libflashjit_torch_op.so"
_TORCH_OP_VERSION = 3  # flashjit_torch_op_version() this module speaks to
_TORCH_OP_MIN_TORCH = (2, 10)  # its TORCH_TARGET_VERSION


def torch_op_path():
    """The C++ kernel's library: FLASHJIT_TORCH_OP, else libflashjit_torch_op.so beside the
    libflashjit.so the package loads; None where FLASHJIT_TORCH_OP is 0 (the Python kernel)."""
    path = os.environ.get("FLASHJIT_TORCH_OP")
    if path is not None and path.strip().lower() in ("0", "off", "none", "python"):
        return None
    return path or os.path.join(os.path.dirname(_library.library_path()), TORCH_OP_LIBRARY)


def _load_cpp_kernel():
    """Loads the C++ kernel, binds it to the package's engine and registers it for the CUDA key.
    Returns (the loaded library or None, why the Python kernel runs instead)."""
    path = torch_op_path()
    if path is None:
        return None, "FLASHJIT_TORCH_OP=%s" % os.environ["FLASHJIT_TORCH_OP"]
    if not os.path.exists(path):
        return None, "%s not found" % path
    version = re.match(r"(\d+)\.(\d+)", torch.__version__)
    if version is None or tuple(int(x) for x in version.groups()) < _TORCH_OP_MIN_TORCH:
        return None, "torch %s is older than %d.%d" % ((torch.__version__,) + _TORCH_OP_MIN_TORCH)
    try:
        lib = _library.get()  # the engine both kernels share
    except (OSError, FlashjitError) as e:
        return None, "libflashjit.so did not load (%s)" % e
    try:
        torch.ops.load_library(path)
        op = ctypes.CDLL(path)
    except OSError as e:
        return None, "%s did not load (%s)" % (path, e)
    op.flashjit_torch_op_bind.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int32, ctypes.c_uint64]
    if op.flashjit_torch_op_version() != _TORCH_OP_VERSION:
        return None, "%s speaks version %d, this package %d" % (path, op.flashjit_torch_op_version(), _TORCH_OP_VERSION)
    address = (lambda fn: ctypes.cast(fn, ctypes.c_void_p).value)
    if lib.abi < 4 or op.flashjit_torch_op_bind(lib.engine, address(lib.flashjit_forward_v2),
                                                address(lib.flashjit_workspace_size_v2),
                                                address(lib.flashjit_last_error), lib.abi,
                                                lib.flashjit_args_v2_size()) != 0:
        return None, "libflashjit.so (ABI %d) is older than %s" % (lib.abi, path)
    if op.flashjit_torch_op_register(0, 1) != 0:
        return None, "%s could not register its kernel" % path
    return op, None


_TORCH_OP, _PYTHON_KERNEL_WHY = _load_cpp_kernel()
if _TORCH_OP is None:
    _LIBRARY.impl("attention", attention, "CUDA")
    _LIBRARY.impl("attention_dense", attention_dense, "CUDA")


def kernel_impl():
    """Which CUDA kernel torch.ops.flashjit.attention runs: "cpp" (libflashjit_torch_op.so) or
    "python" (see python_kernel_reason())."""
    return "python" if _TORCH_OP is None else "cpp"


def python_kernel_reason():
    """Why the Python kernel runs (None where the C++ one does)."""
    return _PYTHON_KERNEL_WHY


# ---- Autograd: off the operator, on an operator of its own that the public functions call. ----
#
# torch.ops.flashjit.attention keeps no autograd kernel, so that none runs on its hot path (even
# under no_grad). Where grad is enabled and an input requires grad, call() runs
# flashjit::attention_train instead: the same schema (less kv_starts) and results (it always
# computes the LSE, which the backward needs), with an Autograd kernel (AttentionTrainFunction, below)
# whose backward is flashjit::attention_backward. Eager code and torch.compile take the same route: dynamo traces
# the operator and AOTAutograd its formula.

_BACKWARD_SCHEMA = ("attention_backward(Tensor dout, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, "
                    "Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, int max_seqlen_q, int max_seqlen_k, Tensor? kv_lens, "
                    "Tensor? block_table, Tensor? alibi_slopes, Tensor? sinks, float softmax_scale, bool causal, "
                    "int window_left, int window_right, float softcap, bool deterministic) -> (Tensor, Tensor, Tensor, Tensor)")
_LIBRARY.define(_BACKWARD_SCHEMA)
_LIBRARY.define(_TRAIN_SCHEMA)


def _grad_like(t):
    return t.new_empty(t.shape)  # contiguous: the engine takes any strides, a fresh buffer overlaps nothing


def attention_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
                       cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor], max_seqlen_q: int,
                       max_seqlen_k: int, kv_lens: Optional[Tensor], block_table: Optional[Tensor],
                       alibi_slopes: Optional[Tensor], sinks: Optional[Tensor], softmax_scale: float, causal: bool,
                       window_left: int, window_right: int, softcap: float,
                       deterministic: bool) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """torch.ops.flashjit.attention_backward's CUDA kernel: (dq, dk, dv, dsinks) of one forward
    call, given its arguments, its output and its LSE (fp32, natural log, the operator's LSE
    layout); dsinks is fp32 [heads_q] with sinks, else empty. What the engine's backward does not
    support raises FlashjitError with its message."""
    dq, dk, dv, dsinks = _grad_like(q), _grad_like(k), _grad_like(v), _dsinks_like(sinks)
    launch_backward(dout, q, k, v, out, lse, dq, dk, dv, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                    max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, kv_lens=kv_lens, block_table=block_table,
                    alibi_slopes=alibi_slopes, sinks=sinks, softmax_scale=softmax_scale, causal=causal,
                    window_left=window_left, window_right=window_right, softcap=softcap, deterministic=deterministic,
                    dsinks=dsinks if sinks is not None else None)
    return dq, dk, dv, dsinks


def _dsinks_like(sinks):
    """The sinks' gradient: fp32 like them, or an empty tensor where the call has none."""
    return sinks.new_empty(sinks.shape) if sinks is not None else torch.empty(0, dtype=torch.float32)


def launch_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, dq: Tensor, dk: Tensor,
                    dv: Tensor, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0, kv_lens=None,
                    block_table=None, alibi_slopes=None, sinks=None, softmax_scale=0.0, causal=False, window_left=-1,
                    window_right=-1, softcap=0.0, deterministic=False, dsinks=None):
    """The backward into gradients the caller allocated (any strides, shaped as q, k, v; they must
    not overlap the inputs). launch's twin, for callers that owe their gradients a layout: the
    SDPA backend returns aten's (those of torch.empty_like(query), which torch.compile checks).
    dsinks (fp32 [heads_q], with sinks) receives the sinks' gradient where given."""
    _check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, kv_lens, block_table, alibi_slopes, sinks)
    if dout.shape != out.shape:
        raise FlashjitError("dout must have out's shape %s, got %s" % (list(out.shape), list(dout.shape)))
    if dout.dtype != out.dtype:
        dout = dout.to(out.dtype)
    if dout.numel() and (dout.stride(-1) != 1 or 0 in dout.stride()):
        dout = dout.contiguous()  # e.g. the expanded gradient of a sum()
    lib = _library.get()
    forward = c_args(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lens, block_table,
                     alibi_slopes, sinks, softmax_scale, causal, window_left, window_right, softcap, True, False)
    varlen = cu_seqlens_q is not None
    as4 = (lambda t: t.unsqueeze(0)) if varlen else (lambda t: t)
    kv4 = (lambda t: t) if block_table is not None else as4
    if dsinks is not None:
        _check_side("dsinks", dsinks, q.device, torch.float32, (q.shape[-2],))
    args = _abi.make_backward_args_v1(forward, as4(dout), as4(dq), kv4(dk), kv4(dv), deterministic, dsinks)
    device = q.device
    if device.index is not None and device.index != torch.cuda.current_device():
        with torch.cuda.device(device):
            _run_backward(lib, args, torch.cuda.current_stream(device).cuda_stream, device)
    else:
        _run_backward(lib, args, torch.cuda.current_stream(device).cuda_stream, device)


def _run_backward(lib, args, stream, device):
    _run(lib, args, stream, device, _abi.backward_workspace_size, _abi.backward_args)


_LIBRARY.impl("attention_backward", attention_backward, "CUDA")


@torch.library.register_fake("flashjit::attention_backward", lib=_LIBRARY)
def _(dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lens, block_table,
      alibi_slopes, sinks, softmax_scale, causal, window_left, window_right, softcap, deterministic):
    empty = q.new_empty(0, dtype=torch.float32)
    return _grad_like(q), _grad_like(k), _grad_like(v), (sinks.new_empty(sinks.shape) if sinks is not None else empty)


def _train(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lens, block_table, alibi_slopes, sinks,
           softmax_scale, causal, window_left, window_right, softcap, return_lse, check, deterministic=False):
    """attention_train's kernel (any device): the operator, always with the LSE."""
    return torch.ops.flashjit.attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lens,
                                        block_table, alibi_slopes, sinks, softmax_scale, causal, window_left,
                                        window_right, softcap, True, check)


_LIBRARY.impl("attention_train", _train, "CompositeExplicitAutograd")


@torch.library.register_fake("flashjit::attention_train", lib=_LIBRARY)
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lens, block_table, alibi_slopes, sinks,
      softmax_scale, causal, window_left, window_right, softcap, return_lse, check, deterministic=False):
    _check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, kv_lens, block_table, alibi_slopes, sinks)
    out_shape, lse_shape = _out_shapes(q, v, cu_seqlens_q is not None, True)
    return q.new_empty(out_shape), q.new_empty(lse_shape, dtype=torch.float32)


def _setup_train(ctx, inputs, output):
    (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lens, block_table, alibi_slopes, sinks,
     softmax_scale, causal, window_left, window_right, softcap, return_lse, check) = inputs[:18]
    deterministic = len(inputs) > 18 and bool(inputs[18])
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, kv_lens, block_table, alibi_slopes, sinks)
    ctx.options = (max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left, window_right, softcap, deterministic)
    ctx.inputs = len(inputs)
    # The LSE is an output to read, not to differentiate (as FlashAttention's): its gradient is dropped.
    ctx.mark_non_differentiable(lse)


def _backward_train(ctx, grad_out, grad_lse):
    q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, kv_lens, block_table, alibi_slopes, sinks = ctx.saved_tensors
    max_seqlen_q, max_seqlen_k, softmax_scale, causal, window_left, window_right, softcap, deterministic = ctx.options
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    if alibi_slopes is not None and alibi_slopes.requires_grad:
        raise NotImplementedError("flashjit's backward computes dq, dk, dv and the sinks' gradient: alibi_slopes "
                                  "requires grad, and its gradient is not computed (detach it)")
    dq, dk, dv, dsinks = torch.ops.flashjit.attention_backward(
        grad_out, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lens, block_table,
        alibi_slopes, sinks, softmax_scale, causal, window_left, window_right, softcap,
        deterministic or deterministic_requested())
    # Inputs in the schema's order: q, k, v, then sinks at 10 among the 18 (or 19, with deterministic).
    return ((dq, dk, dv) + (None,) * 7 + (dsinks if sinks is not None and ctx.needs_input_grad[10] else None,) +
            (None,) * (ctx.inputs - 11))


def deterministic_requested():
    """Under torch.use_deterministic_algorithms(True) (not with warn_only) every backward sums dq in
    a fixed order, as aten's flash backward does; FlashAttention's deterministic=True asks for it
    per call."""
    return torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled()


_BACKWARD_SUPPORT = {}  # the call's semantics -> the engine's message where its backward refuses them, else None


def _warn_if_backward_unsupported(args, deterministic):
    """Where autograd records a call whose backward the engine refuses, warns at the forward (once
    per kind of call), with the engine's message: the training step learns before its backward,
    while code that records without ever calling backward (evaluation outside no_grad) still runs
    as before. The backward itself raises the same message. The engine plans the backward for the
    device's arch (compiling its kernel into the cache: the first backward then loads it)."""
    (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lens, block_table, alibi_slopes, sinks,
     softmax_scale, causal, window_left, window_right, softcap, return_lse, check) = args
    major, minor = torch.cuda.get_device_capability(q.device)
    arch = "sm_%d%d%s" % (major, minor, "a" if major >= 9 else "")
    key = (arch, q.dtype, q.shape[-2:], k.shape[-2:], v.shape[-1], cu_seqlens_q is not None, kv_lens is not None,
           block_table is not None, alibi_slopes is not None, sinks is not None, causal, window_left, window_right,
           softcap != 0.0, deterministic)
    if key not in _BACKWARD_SUPPORT:
        from . import warmup
        try:
            warmup.precompile(q, k, v, arch=arch, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                              max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, kv_lens=kv_lens,
                              block_table=block_table, alibi_slopes=alibi_slopes, sinks=sinks,
                              softmax_scale=softmax_scale or None, causal=causal,
                              window_size=(window_left, window_right), softcap=softcap, backward=True,
                              deterministic=deterministic)
            _BACKWARD_SUPPORT[key] = None
        except FlashjitError as e:
            _BACKWARD_SUPPORT[key] = str(e)
            import warnings
            warnings.warn("flashjit: autograd records this attention call, but its backward will raise: %s "
                          "(run it under torch.no_grad() if no gradient is needed)" % e, stacklevel=4)


class AttentionTrainFunction(torch.autograd.Function):
    """attention_train's autograd formula, as torch.library.register_autograd would build it, less
    its per-call filling of schema defaults (every argument is passed here): that walk re-reads
    the schema's 18 arguments from C++ for each one and cost 100-160 us a call."""

    @staticmethod
    def forward(ctx, *inputs):
        keyset, args = inputs[-1], inputs[:-1]
        with torch._C._AutoDispatchBelowAutograd():
            output = _TRAIN_OVERLOAD.redispatch(keyset & torch._C._after_autograd_keyset, *args)
        _setup_train(ctx, args, output)
        return output

    @staticmethod
    def backward(ctx, *grads):
        return _backward_train(ctx, *grads) + (None,)  # none for the keyset


def _train_autograd(keyset, *args):
    """attention_train's Autograd kernel: the formula where a gradient is recorded, else the kernel below."""
    if torch.is_grad_enabled() and torch._C._any_requires_grad(*args):
        return AttentionTrainFunction.apply(*args, keyset)
    with torch._C._AutoDispatchBelowAutograd():
        return _TRAIN_OVERLOAD.redispatch(keyset & torch._C._after_autograd_keyset, *args)


_TRAIN_OVERLOAD = torch.ops.flashjit.attention_train.default
_LIBRARY.impl("attention_train", _train_autograd, "Autograd", with_keyset=True)

_OP = torch.ops.flashjit.attention
_DENSE_OP = torch.ops.flashjit.attention_dense
# The overloads' own callables (what OpOverload.__call__ calls): eager calls skip that Python
# frame. Traced code calls the operators themselves, which dynamo sees.
_OP_CALL = getattr(_OP.default, "_op", _OP)
_DENSE_CALL = getattr(_DENSE_OP.default, "_op", _DENSE_OP)


# ---- The eager fast path: dense() without PyTorch's dispatcher (eager/, _flashjit_eager.abi3.so). ----
#
# A CPython extension that does attention_dense's work (its checks, messages, output layout, stream
# and graph-capture workspace) on plain CUDA tensors in eager code, reaching PyTorch through the
# DLPack exchange API (torch.Tensor.__dlpack_c_exchange_api__, torch >= 2.10) rather than the
# dispatcher's boxed call. dense() takes it outside compilers and torch.jit.trace (which record
# the operator), with no torch-function or dispatch mode active, no profiler running (its records
# name the operator) and no gradient to record; it
# returns NotImplemented for what only the operator can run (subclasses, CPU tensors, another
# current device), which then takes the operator, as every call does with FLASHJIT_EAGER=0.

EAGER_LIBRARY = "_flashjit_eager.abi3.so"
_EAGER_VERSION = 2  # the extension's version() this module speaks to
_EAGER_OFF = ("0", "off", "none", "false", "no")
_EAGER_ON = ("", "1", "on", "true", "yes")


def eager_path():
    """The fast path's extension: FLASHJIT_EAGER when it names a file, else _flashjit_eager.abi3.so
    beside the libflashjit.so the package loads; None where FLASHJIT_EAGER is 0 (the operator runs
    every call)."""
    value = os.environ.get("FLASHJIT_EAGER", "").strip()
    if value.lower() in _EAGER_OFF:
        return None
    if value.lower() not in _EAGER_ON:
        return value
    return os.path.join(os.path.dirname(_library.library_path()), EAGER_LIBRARY)


def _load_eager():
    """Imports the extension and binds it to PyTorch's exchange API and the package's engine.
    Returns (the module or None, why every call takes the operator instead)."""
    path = eager_path()
    if path is None:
        return None, "FLASHJIT_EAGER=%s" % os.environ["FLASHJIT_EAGER"]
    if not os.path.exists(path):
        return None, "%s not found" % path
    # torch 2.11 on: a capsule; 2.10: an address under the older name (bind() checks the version).
    api = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    if api is None:
        api = getattr(torch.Tensor, "__c_dlpack_exchange_api__", None)
    if api is None:
        return None, "torch %s has no DLPack exchange API (torch >= 2.10 has)" % torch.__version__
    try:
        lib = _library.get()
    except (OSError, FlashjitError) as e:
        return None, "libflashjit.so did not load (%s)" % e
    if lib.abi < 4:
        return None, "libflashjit.so (ABI %d) is older than %s" % (lib.abi, path)
    try:
        spec = importlib.util.spec_from_file_location("flashjit._flashjit_eager", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (ImportError, OSError) as e:
        return None, "%s did not load (%s)" % (path, e)
    if module.version() != _EAGER_VERSION:
        return None, "%s speaks version %d, this package %d" % (path, module.version(), _EAGER_VERSION)
    address = (lambda fn: ctypes.cast(fn, ctypes.c_void_p).value)
    try:
        module.bind(api, torch.Tensor, FlashjitError, lib.engine.value, address(lib.flashjit_forward_v2),
                    address(lib.flashjit_workspace_size_v2), address(lib.flashjit_last_error), lib.abi,
                    lib.flashjit_args_v2_size())
    except ValueError as e:
        return None, "%s refused the binding: %s" % (path, e)
    set_eager_output_allocator(os.environ.get("FLASHJIT_EAGER_ALLOC", "torch"), module)
    module.set_guards(torch.is_grad_enabled, EAGER_GUARDS)
    return module, None


def set_eager_output_allocator(which, module=None):
    """Where the eager path's outputs come from: "torch" (torch.empty_like(q) where the output has
    q's shape and q is contiguous, else Tensor.new_empty: storage the caching
    allocator owns, so record_stream and resizes work as on the operator's output) or "dlpack"
    (the exchange API's allocator: cheaper, but PyTorch wraps it in storage the caching allocator
    does not own, where record_stream does nothing). FLASHJIT_EAGER_ALLOC sets it at import."""
    module = module or _EAGER
    if which not in ("torch", "dlpack"):
        raise ValueError("FLASHJIT_EAGER_ALLOC must be torch or dlpack, got %r" % (which,))
    if module is not None:
        module.set_output_allocator(*((torch.Tensor.new_empty, torch.empty_like) if which == "torch" else (None, None)))


# The fast path's guards, each a call into torch's C state, checked by the extension itself before
# each call (cheaper there than as bytecode here): with any of these true only the operator may
# run, as with autograd recording (grad mode on and an input that requires grad).
EAGER_GUARDS = (torch._C._is_torch_function_mode_enabled, torch._C._len_torch_dispatch_stack,
                torch._C._autograd._profiler_enabled,
                torch._C._is_tracing)  # torch.jit.trace: the fast path would leave a constant in the trace
_EAGER, _EAGER_WHY = _load_eager()
_EAGER_DENSE = None if _EAGER is None else _EAGER.dense
_EAGER_FLASH_ATTN = None if _EAGER is None else _EAGER.flash_attn  # interface.flash_attn_func's


def eager_reason():
    """Why dense() never takes the eager fast path (None where it can)."""
    return _EAGER_WHY


def eager_calls():
    """Calls the eager fast path ran so far in this process (0 without it)."""
    return 0 if _EAGER is None else _EAGER.calls()


def _forward(op, python_kernel, args, tensors):
    """`op` (an overload's callable) on a call autograd does not record, outside a compiler
    (`python_kernel`: its Python CUDA kernel, called directly where that changes nothing;
    `tensors`: the call's tensors, q first)."""
    if _TORCH_OP is None:
        return (python_kernel if direct_call_is_safe(tensors) else op)(*args)
    try:
        return op(*args)
    except RuntimeError as e:  # the C++ kernel's std::runtime_error: as the Python kernel raises it
        if type(e) is not RuntimeError:
            raise
        raise FlashjitError(str(e)).with_traceback(e.__traceback__) from None


def dense(q: Tensor, k: Tensor, v: Tensor, softmax_scale: float, causal: bool, window_left: int, window_right: int,
          softcap: float, deterministic: bool = False) -> Tensor:
    """The output of attention on dense q, k, v with no side arrays and no LSE (call()'s most common
    case, taken directly): flashjit::attention_dense, or its eager fast path (the extension above)
    where nothing but the tensors' own data is involved, or where autograd records the call,
    call()'s training route. The fast path checks its own guards (EAGER_GUARDS, autograd) and
    declines with NotImplemented; a compiler must see the operator, so it is asked here first.
    deterministic: the backward's (where autograd records), as call()'s."""
    if _EAGER_DENSE is not None and not torch.compiler.is_compiling():
        try:
            out = _EAGER_DENSE(q, k, v, softmax_scale, causal, window_left, window_right, softcap)
        except TypeError:  # an argument of a type the fast path does not take: the operator's rules decide
            out = NotImplemented
        if out is not NotImplemented:
            return out
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return call(q, k, v, None, None, 0, 0, None, None, None, None, softmax_scale, causal, window_left,
                    window_right, softcap, False, False, deterministic=deterministic)[0]
    if torch.compiler.is_compiling():
        return _DENSE_OP(q, k, v, softmax_scale, causal, window_left, window_right, softcap)
    if _TORCH_OP is None:
        return _forward(_DENSE_CALL, attention_dense, (q, k, v, softmax_scale, causal, window_left, window_right,
                                                       softcap), (q, k, v))
    try:  # _forward's C++ branch, inline: this is the path whose host time matters most
        return _DENSE_CALL(q, k, v, softmax_scale, causal, window_left, window_right, softcap)
    except RuntimeError as e:
        if type(e) is not RuntimeError:
            raise
        raise FlashjitError(str(e)).with_traceback(e.__traceback__) from None


def call(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
         max_seqlen_q: int, max_seqlen_k: int, kv_lens: Optional[Tensor], block_table: Optional[Tensor],
         alibi_slopes: Optional[Tensor], sinks: Optional[Tensor], softmax_scale: float, causal: bool,
         window_left: int, window_right: int, softcap: float, return_lse: bool,
         check: bool, kv_starts: Optional[Tensor] = None, deterministic: bool = False) -> Tuple[Tensor, Optional[Tensor]]:
    """torch.ops.flashjit.attention (same arguments) for flashjit's public functions: the cheapest
    route to its CUDA kernel (flashjit::attention_dense where nothing but q, k, v and the scalars is
    given; the LSE is then None), and where autograd records a call, flashjit::attention_train (the
    operator with its LSE and a backward through flashjit::attention_backward; deterministic: that
    backward sums dq in a fixed order, as under torch.use_deterministic_algorithms(True))."""
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lens, block_table, alibi_slopes, sinks,
            softmax_scale, causal, window_left, window_right, softcap, return_lse, check)
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad or
                                    (alibi_slopes is not None and alibi_slopes.requires_grad) or
                                    (sinks is not None and sinks.requires_grad)):
        if kv_starts is not None:
            raise FlashjitError("kv_starts (cache_leftpad): the backward takes no per-sequence key starts; run this "
                                "call under torch.no_grad() or without inputs that require grad")
        if type(q) is torch.Tensor and q.is_cuda and not torch.compiler.is_compiling():
            _warn_if_backward_unsupported(args, bool(deterministic) or deterministic_requested())
        out, lse = torch.ops.flashjit.attention_train(*args, bool(deterministic))
        return out, (lse if return_lse else lse.new_empty(0))
    if (cu_seqlens_q is None and cu_seqlens_k is None and kv_lens is None and block_table is None and
            alibi_slopes is None and sinks is None and kv_starts is None and not return_lse and not check):
        return dense(q, k, v, softmax_scale, causal, window_left, window_right, softcap), None
    if kv_starts is not None:
        args += (kv_starts,)
    if torch.compiler.is_compiling():
        return _OP(*args)
    return _forward(_OP_CALL, attention, args, (q, k, v, alibi_slopes, sinks))
