"""aten's flash backward ops run by flashjit's backward, for the SDPA backend (flashjit.sdpa).

While "FLASHJIT" is the flash backend, aten's autograd formulas of its flash forwards call
aten::_scaled_dot_product_flash_attention_backward (SDPA: [batch, heads, seq, head_dim]) and
aten::_flash_attention_backward ([batch, seq, heads, head_dim]) with what the forward returned:
its output and its logsumexp. flashjit's forward wrote both, in the convention the engine's backward
reads: fp32, natural log, [batch, heads, seq_q], -inf for a row that sees no key (the backward reads
that as +inf, FlashAttention-2's value, so such rows get zero gradients). So the kernels here hand
them to flashjit's backward unchanged, as [batch, seq, heads, head_dim] views of the same memory.

What the backward supports runs: dense batches without dropout, causal or not, sliding windows
(_flash_attention_backward's window_size_*) and grouped-query attention (enable_gqa: fewer key/value
heads, dk and dv per key/value head) go to the engine, which rules on the rest (dtype, head dim,
deterministic mode). Everything else raises: NotImplementedError naming aten's argument and the
rule, or flashjit.FlashjitError with the engine's message prefixed by the aten op. Gradients are
allocated as aten's meta functions do (torch.empty_like of query, key, value), whose strides
torch.compile's generated code checks.
"""
import torch

from . import interface, ops
from ._abi import FlashjitError

BACKWARD_OPS = ("_scaled_dot_product_flash_attention_backward", "_flash_attention_backward")


# aten's flash backward runs its deterministic mode under torch.use_deterministic_algorithms(True)
# (not with warn_only): so does this one, as every flashjit backward does.
deterministic_requested = ops.deterministic_requested


def warn_if_refused(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0, kv_lens=None,
                    block_table=None, alibi_slopes=None, softmax_scale=0.0, causal=False, window_left=-1,
                    window_right=-1):
    """At a forward that autograd records, on flashjit's [batch, seq, heads, head_dim] arguments:
    warns with the engine's message where its backward will refuse the call, as flashjit's own
    functions do (flashjit.ops; once per kind of call; it plans, and compiles, the backward for the
    device). A warning, not an error: evaluation outside no_grad records without a backward."""
    if q.is_cuda and not torch.compiler.is_compiling():
        ops._warn_if_backward_unsupported((q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, kv_lens,
                                           block_table, alibi_slopes, None, softmax_scale, causal, window_left,
                                           window_right, 0.0, True, False), deterministic_requested())


def refuse_unsupported(op, query, logsumexp, cum_seq_q, dropout_p, scale):
    """The rules of flashjit's backward that aten's arguments show and the engine cannot name,
    checked before the engine so the message names aten's argument: dropout, varlen (cum_seq_q),
    scale=0 and the forward's LSE. Windows and GQA pass to the engine, whose own messages cover what
    it refuses. `query` is a [batch, seq, heads, head_dim] view."""
    if dropout_p:
        raise NotImplementedError("%s through flashjit: dropout_p=%r: flashjit has no attention dropout (the forward "
                                  "refuses it too; this gradient came from a forward that aten ran)" % (op, dropout_p))
    if cum_seq_q is not None and cum_seq_q.numel():
        raise NotImplementedError("%s through flashjit: cum_seq_q is given (varlen or nested tensors): flashjit's "
                                  "backward takes dense batches only so far" % op)
    if scale is not None and scale == 0.0:
        raise NotImplementedError("%s through flashjit: scale=0.0 is not supported: flashjit reads 0 as its default "
                                  "scale 1/sqrt(head_dim)" % op)
    want = (query.shape[0], query.shape[2], query.shape[1])
    if tuple(logsumexp.shape) != want or logsumexp.dtype != torch.float32:
        raise FlashjitError("%s through flashjit: logsumexp must be the forward's fp32 [batch, heads, seq_q] %s, got "
                            "%s %s" % (op, list(want), str(logsumexp.dtype).replace("torch.", ""),
                                       list(logsumexp.shape)))


def kernels(device_type, launch_backward, check_devices, count):
    """The backward kernels by aten op name. launch_backward has flashjit.ops.launch_backward's
    contract (a parameter so the CPU tests run a float64 reference through the same code);
    check_devices(op, device_type, named tensors) and count(op) are the SDPA module's."""

    def run(op, grad_out, query, key, value, out, logsumexp, cum_seq_q, dropout_p, is_causal, scale, window_left,
            window_right, to_bshd):
        check_devices(op, device_type, (("grad_out", grad_out), ("query", query), ("key", key), ("value", value),
                                        ("out", out), ("logsumexp", logsumexp)))
        left, right = interface._window((window_left, window_right), is_causal)
        q, k, v, o, do = (to_bshd(t) for t in (query, key, value, out, grad_out))
        refuse_unsupported(op, q, logsumexp, cum_seq_q, dropout_p, scale)
        # aten's meta functions: torch.empty_like, so the gradients keep the inputs' dim order.
        dq, dk, dv = torch.empty_like(query), torch.empty_like(key), torch.empty_like(value)
        try:
            launch_backward(do, q, k, v, o, logsumexp, to_bshd(dq), to_bshd(dk), to_bshd(dv),
                            softmax_scale=0.0 if scale is None else float(scale), causal=bool(is_causal),
                            window_left=left, window_right=right, deterministic=deterministic_requested())
        except FlashjitError as e:
            raise FlashjitError("%s through flashjit: %s" % (op, e)).with_traceback(e.__traceback__) from None
        count(op)
        return dq, dk, dv

    def scaled_dot_product_flash_attention_backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k,
                                                    max_q, max_k, dropout_p, is_causal, philox_seed, philox_offset, *,
                                                    scale=None):
        # philox_*: dropout's rng state, unused (dropout is refused). SDPA's layout is [batch, heads,
        # seq, head_dim]: transposed views, nothing copied.
        return run("_scaled_dot_product_flash_attention_backward", grad_out, query, key, value, out, logsumexp,
                   cum_seq_q, dropout_p, is_causal, scale, None, None, lambda t: t.transpose(1, 2))

    def flash_attention_backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
                                 dropout_p, is_causal, rng_state, unused, *, scale=None, window_size_left=None,
                                 window_size_right=None):
        return run("_flash_attention_backward", grad_out, query, key, value, out, logsumexp, cum_seq_q, dropout_p,
                   is_causal, scale, window_size_left, window_size_right, lambda t: t)

    return {"_scaled_dot_product_flash_attention_backward": scaled_dot_product_flash_attention_backward,
            "_flash_attention_backward": flash_attention_backward}
