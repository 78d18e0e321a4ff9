"""Exact merges of partial attention results by their log-sum-exp: what a ring (context parallelism),
split-KV decode done by hand, or any attention over key blocks run apart needs to join its pieces.

Attention over keys K = K_1 u ... u K_n is, per query row, the LSE-weighted mean of the attentions
over each K_i: out = sum_i exp(lse_i - lse) out_i with lse = log sum_i exp(lse_i). The forward's
LSE (flash_attn_func(..., return_attn_probs=True), the operator's return_lse) is that lse_i.

    out, lse = flashjit.merge_attention(out_parts, lse_parts)          # flashjit's layouts
    out, lse = flashjit.flash_attn_combine(out_partial, lse_partial)   # FlashAttention-3's

merge_attention takes [parts, batch, seq, heads, head_dim] outputs and [parts, batch, heads, seq]
LSEs (flashjit's and FlashAttention's LSE layout); flash_attn_combine FlashAttention-3's [splits,
batch, seq, heads(, head_dim)] for both. The arithmetic is fp32 for 16-bit and fp32 inputs (float64
for float64 ones), and so is the merged LSE. A part
whose LSE is -inf (its keys all masked for that row) weighs nothing; a row with every part at -inf
gets output 0 and LSE -inf, never NaN.

torch.ops.flashjit.merge_attention is one operator built from aten operations
(CompositeImplicitAutograd): autograd differentiates it, torch.compile fuses it into a kernel of
its own, and it runs on any device, the CPU included. It is memory-bound: eager, it reads the
parts about three times; compiled, once.
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

from ._abi import FlashjitError

_LIBRARY = torch.library.Library("flashjit", "FRAGMENT")  # flashjit.ops holds the namespace's DEF
_LIBRARY.define("merge_attention(Tensor out_parts, Tensor lse_parts, ScalarType? out_dtype=None) -> (Tensor, Tensor)")


def _check(out_parts: Tensor, lse_parts: Tensor):
    if out_parts.dim() != 5:
        raise FlashjitError("out_parts must be [parts, batch, seq, heads, head_dim], got %d dims" % out_parts.dim())
    parts, batch, seq, heads, _ = out_parts.shape
    if tuple(lse_parts.shape) != (parts, batch, heads, seq):
        raise FlashjitError("lse_parts must be [parts, batch, heads, seq] = %s to match out_parts %s, got %s"
                            % ([parts, batch, heads, seq], list(out_parts.shape), list(lse_parts.shape)))
    if parts == 0:
        raise FlashjitError("out_parts has no parts (dim 0 is 0): nothing to merge")
    if not lse_parts.is_floating_point() or not out_parts.is_floating_point():
        raise FlashjitError("out_parts and lse_parts must be floating point, got %s and %s"
                            % (out_parts.dtype, lse_parts.dtype))
    if out_parts.device != lse_parts.device:
        raise FlashjitError("out_parts is on %s but lse_parts on %s" % (out_parts.device, lse_parts.device))


def _merge(out_parts: Tensor, lse_parts: Tensor, out_dtype: Optional[torch.dtype] = None) -> Tuple[Tensor, Tensor]:
    _check(out_parts, lse_parts)
    compute = torch.promote_types(torch.promote_types(torch.float32, lse_parts.dtype), out_parts.dtype)
    lse = lse_parts.to(compute)
    top = lse.amax(0)
    # A row whose parts are all -inf has top -inf: shift by 0 there, so that exp gives 0, not NaN.
    top = torch.where(torch.isinf(top) & (top < 0), torch.zeros_like(top), top)
    weight = torch.exp(lse - top)  # [parts, batch, heads, seq]; 0 for a -inf part
    total = weight.sum(0)
    merged_lse = torch.log(total) + top  # log(0) = -inf for a row that saw no key
    share = weight / torch.where(total > 0, total, torch.ones_like(total))
    out = (share.permute(0, 1, 3, 2).unsqueeze(-1) * out_parts.to(compute)).sum(0)
    return out.to(out_dtype if out_dtype is not None else out_parts.dtype), merged_lse


_LIBRARY.impl("merge_attention", _merge, "CompositeImplicitAutograd")


def merge_attention(out_parts: Tensor, lse_parts: Tensor, out_dtype: Optional[torch.dtype] = None) -> Tuple[Tensor, Tensor]:
    """Joins attention computed over disjoint key sets. out_parts [parts, batch, seq, heads,
    head_dim] (any float dtype), lse_parts [parts, batch, heads, seq] (natural log). Returns the
    output [batch, seq, heads, head_dim] in out_dtype (default: out_parts' dtype) and the LSE fp32
    (float64 for float64 inputs) [batch, heads, seq]: what one call over all the keys would have returned."""
    return torch.ops.flashjit.merge_attention(out_parts, lse_parts, out_dtype)


def flash_attn_combine(out_partial: Tensor, lse_partial: Tensor, out: Optional[Tensor] = None,
                       out_dtype: Optional[torch.dtype] = None) -> Tuple[Tensor, Tensor]:
    """FlashAttention-3's flash_attn_combine: out_partial [splits, batch, seqlen, heads, head_dim],
    lse_partial [splits, batch, seqlen, heads]. Returns (out [batch, seqlen, heads, head_dim] in
    out_dtype, default fp32, or written into `out`; softmax_lse [batch, seqlen, heads] fp32, a view
    of a [batch, heads, seqlen] tensor, as FlashAttention-3 returns it)."""
    if lse_partial.dim() != 4:
        raise FlashjitError("lse_partial must be [splits, batch, seqlen, heads], got %d dims" % lse_partial.dim())
    dtype = out.dtype if out is not None else (out_dtype if out_dtype is not None else torch.float32)
    merged, lse = merge_attention(out_partial, lse_partial.transpose(2, 3), dtype)
    if out is not None:
        if tuple(out.shape) != tuple(merged.shape):
            raise FlashjitError("out must be [batch, seqlen, heads, head_dim] = %s, got %s"
                                % (list(merged.shape), list(out.shape)))
        out.copy_(merged)
        merged = out
    return merged, lse.transpose(1, 2)
