"""Compiling ahead of time from Python: flashjit.precompile builds the kernel a call would run, for
a named GPU architecture, into the disk cache (no GPU needed), so the first call of a serving
process or a training step loads it instead of compiling.

    q = torch.empty(8, 4096, 32, 128, dtype=torch.bfloat16, device="meta")
    kv = torch.empty(8, 4096, 8, 128, dtype=torch.bfloat16, device="meta")
    flashjit.precompile(q, kv, kv, causal=True, arch="sm_90a")  # 'fa3_sm90-bf16-dqk128-...'

Only the tensors' dtypes, shapes and strides matter: they may be meta or fake tensors (on any
device); their memory is never read.
"""
import ctypes

import torch

from . import _abi, _library, interface, ops
from ._abi import FlashjitError

# Stand-in addresses for tensors without memory: aligned for any access and 2^44 bytes apart, so
# the library's overlap checks see separate buffers.
_ADDRESS_SPACING = 1 << 44


def _stand_in_pointers(args, given):
    """Gives each C pointer of a tensor the call has (`given`: names of the options that are on)
    a distinct stand-in address where the tensor has no memory."""
    slots = [(args.q, "data"), (args.k, "data"), (args.v, "data"), (args.o, "data")]
    optional = {"lse": lambda: (args.lse.contents, "data"), "cu_seqlens_q": lambda: (args.varlen.contents, "cu_seqlens_q"),
                "cu_seqlens_k": lambda: (args.varlen.contents, "cu_seqlens_k"),
                "alibi_slopes": lambda: (args.alibi.contents, "slopes"),
                "block_table": lambda: (args.paged.contents, "block_table"), "sinks": lambda: (args, "sinks"),
                "kv_lens": lambda: (args, "kv_lens")}
    slots += [optional[name]() for name in optional if name in given]
    for i, (struct, field) in enumerate(slots):
        if not getattr(struct, field):
            setattr(struct, field, (i + 1) * _ADDRESS_SPACING)


def precompile(q, k, v, *, arch, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0, kv_lens=None,
               block_table=None, alibi_slopes=None, sinks=None, softmax_scale=None, causal=False,
               window_size=(-1, -1), softcap=0.0, return_lse=False, backward=False, deterministic=False):
    """Compiles the kernel flashjit.ops.attention would run with these arguments on `arch` ("sm_80",
    "sm_86", "sm_90a", ...) into the disk cache; returns the variant's name. Layouts as the
    operator's (FlashAttention's); tensors may be meta tensors. backward=True: the kernel of the
    backward pass (flashjit.ops.attention_backward) of such a call instead; what the backward does
    not support raises FlashjitError with the engine's message, naming the argument; deterministic:
    the backward's fixed-order variant (ignored without backward: every forward is deterministic)."""
    if not isinstance(arch, str) or not arch:
        raise FlashjitError("arch must name a GPU architecture such as 'sm_90a', got %r" % (arch,))
    left, right = interface._window(window_size, causal)
    return_lse = return_lse or backward  # the backward reads the forward's LSE
    out_shape, lse_shape = ops._out_shapes(q, v, cu_seqlens_q is not None, return_lse)
    out = torch.empty(out_shape, dtype=q.dtype, device="meta")
    lse = torch.empty(lse_shape, dtype=torch.float32, device="meta")
    args = ops.c_args(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k), kv_lens,
                      block_table, alibi_slopes, sinks, interface._scale(softmax_scale),
                      bool(causal), left, right, float(softcap or 0.0), bool(return_lse), False)
    given = {name for name, t in (("lse", lse if return_lse else None), ("cu_seqlens_q", cu_seqlens_q),
                                  ("cu_seqlens_k", cu_seqlens_k), ("alibi_slopes", alibi_slopes),
                                  ("block_table", block_table), ("sinks", sinks), ("kv_lens", kv_lens)) if t is not None}
    _stand_in_pointers(args, given)
    lib = _library.get()
    if backward:
        as4 = (lambda t: t.unsqueeze(0)) if cu_seqlens_q is not None else (lambda t: t)
        kv4 = (lambda t: t) if block_table is not None else as4
        grads = [torch.empty(t.shape, dtype=t.dtype, device="meta") for t in (out, q, k, v)]
        bargs = _abi.make_backward_args_v1(args, as4(grads[0]), as4(grads[1]), kv4(grads[2]), kv4(grads[3]),
                                            deterministic)
        for i, field in enumerate(("dout", "dq", "dk", "dv")):
            getattr(bargs, field).data = (16 + i) * _ADDRESS_SPACING
        return _abi.precompile_backward(lib, bargs, arch)
    name = ctypes.create_string_buffer(512)
    if lib.flashjit_precompile_v2(lib.engine, ctypes.byref(args), arch.encode(), name, len(name)) != 0:
        raise FlashjitError(lib.flashjit_last_error().decode())
    return name.value.decode()
