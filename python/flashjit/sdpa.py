"""flashjit as the flash backend of torch.nn.functional.scaled_dot_product_attention.

    import torch, flashjit.sdpa                               # registers "FLASHJIT"; activates nothing
    torch.nn.attention.activate_flash_attention_impl("FLASHJIT")
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # runs flashjit
    torch.nn.attention.restore_flash_attention_impl()        # aten's own kernels again

Activation overrides aten's CUDA kernels of the flash forward ops (_scaled_dot_product_flash_attention,
_flash_attention_forward and, where torch has it, _flash_attention_forward_no_dropout_inplace) with
flashjit, through a torch.library.Library that restore drops. SDPA still chooses its backend as
before: flashjit runs the calls that SDPA (or nested tensors, or torch.nn.attention.varlen) sends to
the flash backend. The override keeps aten's semantics: layouts, output strides (those of aten's meta
functions, which torch.compile checks), causal and windows aligned bottom-right as FlashAttention
does, varlen prefix sums, seqused_k, ALiBi. What flashjit cannot do raises NotImplementedError naming
the argument (dropout_p > 0, return_debug_mask); bad arguments raise flashjit.FlashjitError.

Backward: while active, aten's flash backward ops (_scaled_dot_product_flash_attention_backward,
_flash_attention_backward) are overridden too and run flashjit's backward (flashjit.sdpa_backward):
aten's kernels would read flashjit's LSE, output and rng state as if FlashAttention-2 had written
them, which nothing proves (rows that see no key, for one, get LSE -inf from flashjit and +inf from
FlashAttention-2), while flashjit's backward reads exactly what flashjit's forward wrote. It covers
the engine's backward: dense, causal or not, windows, grouped-query heads (enable_gqa), fp16/bf16,
head dims 1 to 256, no dropout; anything else raises naming the argument and the rule (the forward still runs,
and warns with the engine's message where autograd records it, as flashjit's own functions do).
If a forward ran with autograd recording, the route outlives restore_flash_attention_impl() for the
rest of the process (a graph recorded through flashjit may still be backpropagated later); aten's
flash forwards run after restore then get flashjit's backward too, or its refusal where it has
none. Run flashjit forwards under torch.no_grad() or torch.inference_mode() to get aten's own
backward back after restore, or call release_backward_route() once those graphs are done with; a
later activation takes the route over.
"""
import threading
import warnings

import torch
from torch.library import Library

from . import interface, ops, sdpa_backward
from ._abi import FlashjitError

IMPL_NAME = "FLASHJIT"

_FORWARD_OPS = ("_scaled_dot_product_flash_attention", "_flash_attention_forward",
                "_flash_attention_forward_no_dropout_inplace")  # the last one: not in 2.11, in 2.15
_BACKWARD_OPS = sdpa_backward.BACKWARD_OPS

_routed = dict.fromkeys(_FORWARD_OPS + _BACKWARD_OPS, 0)
_routed_lock = threading.Lock()
_lingering_backward_routes = []  # backward routes kept past restore (see the module's docstring)


def routed_calls(op=None, backward=False):
    """Calls flashjit completed for aten's flash ops in this process: for one op (its aten name,
    forward or backward) or, without `op`, all the forward ops' (backward=True: all the backward
    ops'). A refused call is not counted. Forwards and backwards are kept apart so that "one SDPA
    call ran one flashjit forward" stays checkable while training."""
    with _routed_lock:
        if op is not None:
            return _routed[op]
        return sum(_routed[name] for name in (_BACKWARD_OPS if backward else _FORWARD_OPS))


def _count(op):
    with _routed_lock:
        _routed[op] += 1


def aten_ops(names):
    """The names among `names` that this PyTorch's aten has (2.11 lacks some of 2.15's)."""
    return [name for name in names if hasattr(torch.ops.aten, name)]


# ---- argument checks: aten's names, flashjit's rules --------------------------------------------

def _refuse_unsupported(op, dropout_p, return_debug_mask, scale):
    if dropout_p:
        raise NotImplementedError("%s through flashjit: dropout_p=%r: flashjit has no attention dropout (pass 0.0, or "
                                  "restore_flash_attention_impl() for training with dropout)" % (op, dropout_p))
    if return_debug_mask:
        raise NotImplementedError("%s through flashjit: return_debug_mask=True: flashjit never forms the attention "
                                  "probabilities" % op)
    if scale is not None and scale == 0.0:
        # The C ABI reads a zero scale as "1/sqrt(head_dim)"; an explicit 0 would silently mean that.
        raise NotImplementedError("%s through flashjit: scale=0.0 (uniform attention) is not supported: flashjit "
                                  "reads 0 as its default scale 1/sqrt(head_dim)" % op)


def _check_devices(op, device_type, named_tensors):
    """Every tensor given is on one device of `device_type` (aten dispatches a call to CUDA when any
    input is there, so a CPU key, cu_seqlens or slope can still arrive)."""
    first_name, first = None, None
    for name, t in named_tensors:
        if t is None:
            continue
        if t.device.type != device_type:
            raise FlashjitError("%s through flashjit: %s is on %s; flashjit runs on %s tensors"
                                % (op, name, t.device, device_type.upper()))
        if first is None:
            first_name, first = name, t
        elif t.device != first.device:
            raise FlashjitError("%s through flashjit: %s is on %s but %s is on %s" % (op, name, t.device, first_name,
                                                                                       first.device))


def empty_with_layout_of(like, shape):
    """An empty tensor of `shape` whose dims are ordered in memory as `like`'s are (aten's meta
    functions allocate the flash output so, and torch.compile checks the strides it gets)."""
    if tuple(like.shape) == tuple(shape):
        return torch.empty_like(like)
    order = sorted(range(like.dim()), key=lambda d: like.stride(d) if like.stride(d) else float("inf"))
    strides, step = [0] * like.dim(), 1
    for d in order:  # innermost first
        strides[d] = step
        step *= shape[d]
    return torch.empty_strided(shape, strides, dtype=like.dtype, device=like.device)


def _rng_outputs(query):
    """aten's (rng_state, unused) pair: uint64 [2] and []. Only a dropout backward reads them, and
    flashjit refuses dropout, so zeros."""
    return (torch.zeros((2,), dtype=torch.uint64, device=query.device),
            torch.zeros((), dtype=torch.uint64, device=query.device))


def flash_lse(query, cum_seq_q):
    """The LSE _flash_attention_forward returns: fp32 [batch, heads, seq_q] for [batch, seq_q,
    heads, head_dim] queries, [heads, total_q] with cum_seq_q; contiguous, as aten's meta function."""
    if cum_seq_q is None:
        shape = (query.shape[0], query.shape[2], query.shape[1])
    else:
        shape = (query.shape[1], query.shape[0])
    return torch.empty(shape, dtype=torch.float32, device=query.device)


# ---- the kernels -------------------------------------------------------------------------------

def _kernels(device_type, launch, on_forward, launch_backward=ops.launch_backward,
             warn_backward=sdpa_backward.warn_if_refused):
    """The override's kernels by aten op name: (forward ones, backward ones). device_type, launch,
    launch_backward and warn_backward are parameters so the CPU tests can route a CPU reference
    through the same code; on_forward(query, key, value) is told of each forward and says whether
    autograd records it (the activation uses it to see recording), warn_backward is called with a
    recorded forward's flashjit arguments."""

    def run_flash(op, query, key, value, out, lse, cum_seq_q, cum_seq_k, max_q, max_k, is_causal, scale,
                  window_size_left, window_size_right, seqused_k, alibi_slopes, block_table, recording=False):
        _check_devices(op, device_type, (("query", query), ("key", key), ("value", value), ("out", out),
                                         ("cum_seq_q", cum_seq_q), ("cum_seq_k", cum_seq_k), ("seqused_k", seqused_k),
                                         ("alibi_slopes", alibi_slopes), ("block_table", block_table)))
        kv_lens, cu_k = seqused_k, cum_seq_k
        if block_table is not None:
            # Paged keys come through the table (flashjit needs each sequence's key count): seqused_k,
            # else the prefix sums' steps, else every slot of the sequence's pages (FlashAttention-2's).
            if kv_lens is None and cum_seq_k is not None:
                kv_lens = (cum_seq_k[1:] - cum_seq_k[:-1]).to(torch.int32)
            elif kv_lens is None:
                batch = block_table.shape[0]
                kv_lens = torch.full((batch,), block_table.shape[1] * key.shape[1], dtype=torch.int32,
                                     device=query.device)
            cu_k = None
        left, right = interface._window((window_size_left, window_size_right), is_causal)
        varlen = cum_seq_q is not None
        options = dict(cu_seqlens_q=cum_seq_q, cu_seqlens_k=cu_k, max_seqlen_q=int(max_q) if varlen else 0,
                       max_seqlen_k=int(max_k) if varlen else 0, kv_lens=kv_lens,
                       block_table=block_table, alibi_slopes=alibi_slopes,
                       softmax_scale=0.0 if scale is None else float(scale), causal=bool(is_causal), window_left=left,
                       window_right=right)
        if recording:
            warn_backward(query, key, value, **options)
        launch(query, key, value, out, lse, **options)
        _count(op)

    def flash_attention_forward(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
                                return_debug_mask, *, scale=None, window_size_left=None, window_size_right=None,
                                seqused_k=None, alibi_slopes=None, block_table=None, num_splits=None):
        # num_splits only changes speed: the engine chooses its own split.
        op = "_flash_attention_forward"
        _refuse_unsupported(op, dropout_p, return_debug_mask, scale)
        out = empty_with_layout_of(query, tuple(query.shape[:-1]) + (value.shape[-1],))
        lse = flash_lse(query, cum_seq_q)
        recording = on_forward(query, key, value)
        run_flash(op, query, key, value, out, lse, cum_seq_q, cum_seq_k, max_q, max_k, is_causal, scale,
                  window_size_left, window_size_right, seqused_k, alibi_slopes, block_table, recording)
        return (out, lse) + _rng_outputs(query) + (query.new_empty(0),)

    def flash_attention_forward_no_dropout_inplace(out, query, key, value, cum_seq_q, cum_seq_k, max_q, max_k,
                                                   dropout_p, is_causal, return_debug_mask, *, scale=None,
                                                   window_size_left=None, window_size_right=None, seqused_k=None,
                                                   alibi_slopes=None, block_table=None, num_splits=None):
        op = "_flash_attention_forward_no_dropout_inplace"
        _refuse_unsupported(op, dropout_p, return_debug_mask, scale)
        lse = flash_lse(query, cum_seq_q)
        recording = on_forward(query, key, value)
        run_flash(op, query, key, value, out, lse, cum_seq_q, cum_seq_k, max_q, max_k, is_causal, scale,
                  window_size_left, window_size_right, seqused_k, alibi_slopes, block_table, recording)
        return lse

    def scaled_dot_product_flash_attention(query, key, value, dropout_p=0.0, is_causal=False,
                                           return_debug_mask=False, *, scale=None):
        # SDPA's layout is [batch, heads, seq, head_dim]; flashjit reads [batch, seq, heads, head_dim]
        # views of the same memory, so nothing is copied.
        op = "_scaled_dot_product_flash_attention"
        _refuse_unsupported(op, dropout_p, return_debug_mask, scale)
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.dim() != 4:
                raise FlashjitError("%s through flashjit: %s must be [batch, heads, seq, head_dim], got %d dims"
                                    % (op, name, t.dim()))
        out = empty_with_layout_of(query, tuple(query.shape[:-1]) + (value.shape[-1],))
        lse = torch.empty(query.shape[:3], dtype=torch.float32, device=query.device)
        recording = on_forward(query, key, value)  # before the views: made below autograd, they never require grad
        run_flash(op, query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), out.transpose(1, 2), lse,
                  None, None, 0, 0, is_causal, scale, None, None, None, None, None, recording)
        return (out, lse, None, None, query.shape[2], key.shape[2]) + _rng_outputs(query) + (query.new_empty(0),)

    forward = {"_scaled_dot_product_flash_attention": scaled_dot_product_flash_attention,
               "_flash_attention_forward": flash_attention_forward,
               "_flash_attention_forward_no_dropout_inplace": flash_attention_forward_no_dropout_inplace}
    return forward, sdpa_backward.kernels(device_type, launch_backward, _check_devices, _count)


def release_backward_route(device_type=None):
    """Drops the backward routes earlier activations left past restore (the module's docstring says
    when one stays), for one device type or all: aten's flash backward is aten's again. Call it once
    no graph recorded through flashjit's forward will be backpropagated any more (such a graph would
    then run aten's backward kernel on flashjit's outputs). Returns how many routes were dropped."""
    kept = [r for r in _lingering_backward_routes
            if device_type is not None and getattr(r, "flashjit_device_type", None) != device_type]
    dropped = [r for r in _lingering_backward_routes if r not in kept]
    for route in dropped:
        route._destroy()
    _lingering_backward_routes[:] = kept
    return len(dropped)


class Activation:
    """One activation of the override: the forward library and the backward route (both dropped by
    remove(), the route kept if autograd recorded a flashjit forward). torch's registry holds it."""

    def __init__(self, device_type="cuda", launch=ops.launch, launch_backward=ops.launch_backward,
                 warn_backward=sdpa_backward.warn_if_refused):
        self.device_type = device_type
        self.forwards_under_autograd = 0
        key = device_type.upper()
        forward, backward = _kernels(device_type, launch, self._on_forward, launch_backward, warn_backward)
        # A route an earlier activation left past restore serves the same ops, and torch takes one
        # override per op and key: this activation's route replaces it (both run flashjit's backward).
        release_backward_route(device_type)
        self.forward_library = Library("aten", "IMPL", key)
        self.backward_route = Library("aten", "IMPL", key)
        self.backward_route.flashjit_device_type = device_type
        for name in aten_ops(forward):
            self.forward_library.impl(name, forward[name], key)
        for name in aten_ops(backward):
            self.backward_route.impl(name, backward[name], key)

    def _on_forward(self, query, key, value):
        # Inside a backend kernel grad mode is still the caller's and requires_grad is visible, so
        # this sees whether autograd recorded the call (a graph aten's backward could later walk).
        if torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad):
            self.forwards_under_autograd += 1
            return True
        return False

    def remove(self):
        if self.forward_library is not None:
            self.forward_library._destroy()
            self.forward_library = None
        if self.backward_route is None:
            return
        if self.forwards_under_autograd:
            warnings.warn("flashjit: %d SDPA flash forward(s) ran while autograd recorded; aten's flash backward "
                          "stays routed to flashjit's backward in this process so it never runs on flashjit's "
                          "outputs" % self.forwards_under_autograd, stacklevel=3)
            _lingering_backward_routes.append(self.backward_route)
        else:
            self.backward_route._destroy()
        self.backward_route = None


def _register_fn():
    return Activation()


if not hasattr(torch.nn.attention, "register_flash_attention_impl"):
    raise ImportError("flashjit.sdpa needs torch.nn.attention.register_flash_attention_impl, which PyTorch %s lacks "
                      "(2.11 has it); flashjit's operator and FlashAttention API work without it" % torch.__version__)
torch.nn.attention.register_flash_attention_impl(IMPL_NAME, register_fn=_register_fn)
