"""FlashAttention's Python API on flashjit: code written for flash_attn runs by changing the import.

    from flashjit import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache

Argument names and meanings are FlashAttention-2's (softmax_scale, causal, window_size, softcap,
alibi_slopes, return_attn_probs / return_softmax_lse, cu_seqlens, max_seqlen, seqused_k,
block_table, cache_seqlens, cache_batch_idx, cache_leftpad, k/v appended into the cache, rotary),
with FlashAttention-3's seqused_k. What flashjit cannot do raises NotImplementedError naming the
argument (dropout, seqused_q). deterministic=True makes the backward sum dq in a fixed order (the
forward is deterministic anyway); num_splits, speed only, is left to the engine.
"""
import functools
from typing import Optional, Tuple, Union

import torch
from torch import Tensor

from . import ops, rotary  # ops registers torch.ops.flashjit
from ._abi import FlashjitError


def _unsupported(name, why):
    raise NotImplementedError("%s: %s" % (name, why))


def _window(window_size, causal):
    left, right = (-1, -1) if window_size is None else window_size
    left = -1 if left is None else int(left)
    right = -1 if right is None else int(right)
    if causal:
        right = 0  # as FlashAttention: causal ends each row at its diagonal, whatever window_size says
    return left, right


def _scale(softmax_scale):
    return 0.0 if softmax_scale is None else float(softmax_scale)


def _attention(q, k, v, *, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0, kv_lens=None,
               block_table=None, alibi_slopes=None, sinks=None, softmax_scale=None, causal=False, window_size=(-1, -1),
               softcap=0.0, return_lse=False, check=False, kv_starts=None, deterministic=False):
    left, right = _window(window_size, causal)
    return ops.call(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k), kv_lens, block_table,
                    alibi_slopes, sinks, _scale(softmax_scale), bool(causal), left, right, float(softcap or 0.0),
                    bool(return_lse), bool(check), kv_starts, deterministic=bool(deterministic))


def _no_dropout(dropout_p):
    if dropout_p:
        _unsupported("dropout_p", "flashjit has no attention dropout (pass 0.0, as inference and most training do)")


def flash_attn_func(q: Tensor, k: Tensor, v: Tensor, dropout_p: float = 0.0, softmax_scale: Optional[float] = None,
                    causal: bool = False, window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                    alibi_slopes: Optional[Tensor] = None, deterministic: bool = False, return_attn_probs: bool = False,
                    sinks: Optional[Tensor] = None) -> Union[Tensor, Tuple[Tensor, Tensor, None]]:
    """q [batch, seqlen_q, heads_q, head_dim], k and v [batch, seqlen_k, heads_kv, head_dim] (heads_q a
    multiple of heads_kv). Returns the output [batch, seqlen_q, heads_q, head_dim_v], or with
    return_attn_probs (out, softmax_lse [batch, heads_q, seqlen_q], None): flashjit never forms
    the probabilities. sinks (fp32 [heads_q], flashjit's addition): per-head logits that join each
    row's denominator (GPT-OSS)."""
    if alibi_slopes is None and sinks is None and not return_attn_probs and not dropout_p:
        fast = ops._EAGER_FLASH_ATTN  # the eager fast path, arguments read in C (None: FLASHJIT_EAGER=0)
        if fast is not None and not torch.compiler.is_compiling():
            try:
                out = fast(q, k, v, softmax_scale, causal, window_size, softcap)
            except TypeError:  # q, k or v not a tensor: the route below says so
                out = NotImplemented
            if out is not NotImplemented:
                return out
    _no_dropout(dropout_p)
    if alibi_slopes is None and sinks is None and not return_attn_probs:  # the dense operator, directly
        left, right = _window(window_size, causal)
        return ops.dense(q, k, v, _scale(softmax_scale), bool(causal), left, right, float(softcap or 0.0),
                         bool(deterministic))
    out, lse = _attention(q, k, v, alibi_slopes=alibi_slopes, sinks=sinks, softmax_scale=softmax_scale, causal=causal,
                          window_size=window_size, softcap=softcap, return_lse=return_attn_probs,
                          deterministic=deterministic)
    return (out, lse, None) if return_attn_probs else out


def flash_attn_varlen_func(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_k: Optional[Tensor],
                           max_seqlen_q: int, max_seqlen_k: int, dropout_p: float = 0.0,
                           softmax_scale: Optional[float] = None, causal: bool = False,
                           window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                           alibi_slopes: Optional[Tensor] = None, deterministic: bool = False,
                           return_attn_probs: bool = False, block_table: Optional[Tensor] = None,
                           seqused_q: Optional[Tensor] = None, seqused_k: Optional[Tensor] = None,
                           sinks: Optional[Tensor] = None) -> Union[Tensor, Tuple[Tensor, Tensor, None]]:
    """Sequences packed along the token axis: q [total_q, heads_q, head_dim], k and v [total_k,
    heads_kv, head_dim] (or page pools [pages, page_size, heads_kv, head_dim] with block_table
    [batch, max_pages]), cu_seqlens int32 [batch + 1] on the GPU. seqused_k: keys each sequence
    uses (int32 [batch]). The LSE is [heads_q, total_q]."""
    _no_dropout(dropout_p)
    if seqused_q is not None:
        _unsupported("seqused_q", "not supported: shorten cu_seqlens_q instead")
    kv_lens = seqused_k
    if block_table is not None and kv_lens is None:
        if cu_seqlens_k is None:
            raise ValueError("block_table needs seqused_k or cu_seqlens_k: the keys each sequence uses")
        kv_lens = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).to(torch.int32)  # each sequence's cache length
    out, lse = _attention(q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=None if block_table is not None else cu_seqlens_k,
                          max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, kv_lens=kv_lens,
                          block_table=block_table, alibi_slopes=alibi_slopes, sinks=sinks,
                          softmax_scale=softmax_scale, causal=causal, window_size=window_size, softcap=softcap,
                          return_lse=return_attn_probs, deterministic=deterministic)
    return (out, lse, None) if return_attn_probs else out


def _append_to_cache(k_cache, v_cache, k, v, cache_seqlens, block_table):
    """Writes the new keys and values k, v [batch, new, heads_kv, head_dim] into the caches at each
    sequence's positions cache_seqlens[b] onward (in place, as FlashAttention does)."""
    batch, new = k.shape[0], k.shape[1]
    pos = cache_seqlens.to(torch.long)[:, None] + torch.arange(new, device=k.device)[None, :]  # [batch, new]
    if block_table is None:
        rows = torch.arange(batch, device=k.device)[:, None].expand(batch, new)
        k_cache[rows, pos] = k
        v_cache[rows, pos] = v
    else:
        page_size = k_cache.shape[1]
        pages = torch.gather(block_table.to(torch.long), 1, pos // page_size)
        k_cache[pages, pos % page_size] = k
        v_cache[pages, pos % page_size] = v


# The largest page the engine takes (its kMaxPageSize).
_MAX_PAGE = 256


@functools.lru_cache(maxsize=None)
def _page_for(capacity):
    """The largest page size up to the engine's that divides a cache row (once per capacity: the
    search runs up to 256 steps, and decode calls this every step)."""
    return next(p for p in range(min(capacity, _MAX_PAGE), 0, -1) if capacity % p == 0)


def _rows_as_pages(k_cache, v_cache, cache_batch_idx, block_table):
    """cache_batch_idx without copying a cache: each cache row [capacity, heads, dim] seen as
    capacity / page pages of a page pool, and a block table naming the rows' pages in order."""
    if block_table is not None:
        raise ValueError("cache_batch_idx indexes contiguous caches: with block_table, index the table instead")
    if cache_batch_idx.dtype != torch.int32 or cache_batch_idx.device != k_cache.device or cache_batch_idx.dim() != 1:
        raise FlashjitError("cache_batch_idx must be a 1-d int32 tensor on the caches' device, got %s %s on %s"
                            % (list(cache_batch_idx.shape), cache_batch_idx.dtype, cache_batch_idx.device))
    rows, capacity = k_cache.shape[0], k_cache.shape[1]
    page = _page_for(capacity)
    pools = []
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        if cache.stride(0) != capacity * cache.stride(1):
            raise FlashjitError("%s with cache_batch_idx needs its rows back to back (stride(0) == shape[1] * "
                                "stride(1)), got strides %s" % (name, list(cache.stride())))
        pools.append(cache.view(rows * (capacity // page), page, cache.shape[2], cache.shape[3]))
    pages_per_row = capacity // page
    table = (cache_batch_idx[:, None] * pages_per_row +
             torch.arange(pages_per_row, dtype=torch.int32, device=k_cache.device)[None, :])
    return pools[0], pools[1], table


def flash_attn_with_kvcache(q: Tensor, k_cache: Tensor, v_cache: Tensor, k: Optional[Tensor] = None,
                            v: Optional[Tensor] = None, rotary_cos: Optional[Tensor] = None,
                            rotary_sin: Optional[Tensor] = None, cache_seqlens: Optional[Union[int, Tensor]] = None,
                            cache_batch_idx: Optional[Tensor] = None, cache_leftpad: Optional[Tensor] = None,
                            block_table: Optional[Tensor] = None, softmax_scale: Optional[float] = None,
                            causal: bool = False, window_size: Tuple[int, int] = (-1, -1), softcap: float = 0.0,
                            rotary_interleaved: bool = True, alibi_slopes: Optional[Tensor] = None,
                            num_splits: int = 0, return_softmax_lse: bool = False,
                            sinks: Optional[Tensor] = None) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Attention of q [batch, seqlen_q, heads_q, head_dim] against KV caches [batch, capacity,
    heads_kv, head_dim] (or page pools with block_table), each sequence using cache_seqlens[b] keys.
    k and v ([batch, new, heads_kv, head_dim]), when given, are first written into the caches at
    cache_seqlens[b] onward and attended to as well. rotary_cos / rotary_sin ([positions,
    rotary_dim / 2]) rotate k at its cache positions and q at its own (causal or local) or at the
    cache's end, before the append. cache_batch_idx (int32 [batch]) picks each sequence's cache row
    without copying (the rows are read as pages). cache_leftpad (int32 [batch]): sequence b's keys
    start at slot cache_leftpad[b] of its cache (left-padded batches; the slots before are never
    read, and causal masks, windows and ALiBi count keys from there); cache_seqlens still counts
    from slot 0, and rotary positions are cache slots, as FlashAttention's. num_splits is the
    engine's to choose."""
    if cache_leftpad is not None:
        ops._check_side("cache_leftpad", cache_leftpad, q.device, torch.int32, (q.shape[0],))
    if (k is None) != (v is None):
        raise ValueError("k and v are appended together: give both or neither")
    batch = q.shape[0]
    if cache_seqlens is None:
        capacity = k_cache.shape[1] * (block_table.shape[1] if block_table is not None else 1)
        cache_seqlens = torch.full((batch,), capacity - (k.shape[1] if k is not None else 0), dtype=torch.int32,
                                   device=q.device)
    elif isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((batch,), cache_seqlens, dtype=torch.int32, device=q.device)
    if rotary_cos is not None or rotary_sin is not None:
        if k is None:
            raise ValueError("rotary_cos/rotary_sin rotate the new keys k: give k and v with them")
        capacity = k_cache.shape[1] * (block_table.shape[1] if block_table is not None else 1)
        rotary.check_tables(rotary_cos, rotary_sin, q.shape[-1], capacity, q.device)
        start = cache_seqlens.to(torch.long)[:, None]
        # Queries sit at their own positions under a causal or local mask, else all at the cache's end.
        q_steps = torch.arange(q.shape[1], device=q.device)[None, :] if causal or window_size != (-1, -1) else \
            torch.zeros(1, q.shape[1], dtype=torch.long, device=q.device)
        q = rotary.rotate(q, rotary_cos, rotary_sin, start + q_steps, rotary_interleaved)
        k = rotary.rotate(k, rotary_cos, rotary_sin, start + torch.arange(k.shape[1], device=k.device)[None, :],
                          rotary_interleaved)
    if cache_batch_idx is not None:
        k_cache, v_cache, block_table = _rows_as_pages(k_cache, v_cache, cache_batch_idx, block_table)
    kv_lens = cache_seqlens
    if k is not None:
        _append_to_cache(k_cache, v_cache, k, v, cache_seqlens, block_table)
        kv_lens = (cache_seqlens + k.shape[1]).to(torch.int32)
    out, lse = _attention(q, k_cache, v_cache, kv_lens=kv_lens, block_table=block_table, alibi_slopes=alibi_slopes,
                          sinks=sinks, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                          softcap=softcap, return_lse=return_softmax_lse, kv_starts=cache_leftpad)
    return (out, lse) if return_softmax_lse else out
