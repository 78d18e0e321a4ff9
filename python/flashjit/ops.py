"""flashjit's attention as a PyTorch operator: torch.ops.flashjit.attention.

Registered with torch.library (a schema, a CUDA implementation through the C ABI, and a fake
implementation), so torch.compile(fullgraph=True) traces through it, CUDA graphs capture it once
its variant is warm, and torch.export keeps it. The library is not linked against libtorch: one
wheel serves every PyTorch version that has torch.library.custom_op (2.4 and newer).

Layouts follow FlashAttention: q, k, v and the output are [batch, seq, heads, head_dim] (any
strides), or [total_tokens, heads, head_dim] with cu_seqlens (varlen); with block_table, k and v
are page pools [pages, page_size, heads_kv, head_dim]. The LSE (fp32, natural log) is [batch,
heads_q, seq_q], or [heads_q, total_q] with varlen; an empty tensor unless asked for.
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

from . import _abi, _library
from ._abi import FlashjitError

_INT32_ARRAYS = ("cu_seqlens_q", "cu_seqlens_k", "kv_lens", "block_table")


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


def _check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, kv_lens, block_table, alibi_slopes, sinks):
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
           alibi_slopes, sinks, softmax_scale, causal, window_left, window_right, softcap, return_lse, check):
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
                             block_table=block_table, check=check)


def launch(q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Optional[Tensor], cu_seqlens_q=None, cu_seqlens_k=None,
           max_seqlen_q=0, max_seqlen_k=0, kv_lens=None, block_table=None, alibi_slopes=None, sinks=None,
           softmax_scale=0.0, causal=False, window_left=-1, window_right=-1, softcap=0.0, check=False):
    """Runs attention into tensors the caller allocated (any strides): out as the operator's output,
    lse (fp32, the operator's LSE shape) or None. For callers that own their outputs' layout, such
    as the SDPA backend (flashjit.sdpa), which must return aten's layouts; not traced by
    torch.compile (use the operator for that)."""
    _check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, kv_lens, block_table, alibi_slopes, sinks)
    _launch_checked(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lens, block_table,
                    alibi_slopes, sinks, softmax_scale, causal, window_left, window_right, softcap, check)


def _launch_checked(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lens, block_table,
                    alibi_slopes, sinks, softmax_scale, causal, window_left, window_right, softcap, check):
    lib = _library.get()
    args = c_args(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lens, block_table,
                  alibi_slopes, sinks, softmax_scale, causal, window_left, window_right, softcap, lse is not None, check)
    device = q.device
    if device.index is not None and device.index != torch.cuda.current_device():
        with torch.cuda.device(device):  # the engine runs on the calling thread's current context
            _run(lib, args, torch.cuda.current_stream(device).cuda_stream, device)
    else:
        _run(lib, args, torch.cuda.current_stream(device).cuda_stream, device)


def _run(lib, args, stream, device):
    """One call on `stream`. While the stream is captured into a CUDA graph the workspace comes
    from PyTorch's allocator (so from the graph's memory pool), not the engine's per-stream pool:
    torch.cuda.graph, make_graphed_callables and torch.compile's CUDA graphs capture on streams
    of their own, which eager calls never warmed up."""
    if torch.cuda.is_current_stream_capturing():
        size = _abi.workspace_size(lib, args, stream)
        if size:
            workspace = torch.empty(size, dtype=torch.uint8, device=device)
            args.workspace, args.workspace_bytes = workspace.data_ptr(), size
    _abi.forward_args(lib, args, stream)


_SCHEMA = ("attention(Tensor q, Tensor k, Tensor v, Tensor? cu_seqlens_q, Tensor? cu_seqlens_k, int max_seqlen_q, "
           "int max_seqlen_k, Tensor? kv_lens, Tensor? block_table, Tensor? alibi_slopes, Tensor? sinks, "
           "float softmax_scale, bool causal, int window_left, int window_right, float softcap, bool return_lse, "
           "bool check) -> (Tensor, Tensor)")

# Defined with torch.library.Library rather than torch.library.custom_op: the same operator to
# torch.compile, export and CUDA graphs, with less dispatch per call (on an H200 host the call
# went from 66 to 53 us, bench/NOTES.md entry 23; still far above the C ABI's 5).
_LIBRARY = torch.library.Library("flashjit", "DEF")
_LIBRARY.define(_SCHEMA)


def attention(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Optional[Tensor], cu_seqlens_k: Optional[Tensor],
              max_seqlen_q: int, max_seqlen_k: int, kv_lens: Optional[Tensor], block_table: Optional[Tensor],
              alibi_slopes: Optional[Tensor], sinks: Optional[Tensor], softmax_scale: float, causal: bool,
              window_left: int, window_right: int, softcap: float, return_lse: bool,
              check: bool) -> Tuple[Tensor, Tensor]:
    """torch.ops.flashjit.attention's CUDA kernel: attention forward; see the module's docstring for
    layouts. softmax_scale 0: 1/sqrt(head_dim); window -1: unbounded; softcap 0: none; check: read
    back and check the device metadata."""
    _check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, kv_lens, block_table, alibi_slopes, sinks)
    out_shape, lse_shape = _out_shapes(q, v, cu_seqlens_q is not None, return_lse)
    out = q.new_empty(out_shape)
    lse = q.new_empty(lse_shape, dtype=torch.float32)
    _launch_checked(q, k, v, out, lse if return_lse else None, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                    kv_lens, block_table, alibi_slopes, sinks, softmax_scale, causal, window_left, window_right, softcap,
                    check)
    return out, lse


_LIBRARY.impl("attention", attention, "CUDA")


@torch.library.register_fake("flashjit::attention", lib=_LIBRARY)
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lens, block_table, alibi_slopes, sinks,
      softmax_scale, causal, window_left, window_right, softcap, return_lse, check):
    _check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, kv_lens, block_table, alibi_slopes, sinks)
    out_shape, lse_shape = _out_shapes(q, v, cu_seqlens_q is not None, return_lse)
    return q.new_empty(out_shape), q.new_empty(lse_shape, dtype=torch.float32)


def direct_call_is_safe(tensors):
    """True where calling `attention` directly gives what the operator would: CUDA tensors (the
    first is the query), no
    compiler, tracer, dispatch or function mode, functorch transform, or gradient to record.
    Saves the dispatcher's few microseconds per call in eager code."""
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


def _no_backward(ctx, grad_out, grad_lse):
    raise NotImplementedError(
        "flashjit has no backward pass yet: gradients through flashjit.attention (and the FlashAttention-style "
        "API) are not computed. Run the training step with another attention (e.g. "
        "torch.nn.functional.scaled_dot_product_attention) until flashjit's backward lands.")


def _setup_context(ctx, inputs, output):
    pass


torch.library.register_autograd("flashjit::attention", _no_backward, setup_context=_setup_context, lib=_LIBRARY)
