"""FlashAttention's Python API on flashjit: code written for flash_attn runs by changing the import.

    from flashjit import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache

Argument names and meanings are FlashAttention-2's (softmax_scale, causal, window_size, softcap,
alibi_slopes, return_attn_probs / return_softmax_lse, cu_seqlens, max_seqlen, seqused_k,
block_table, cache_seqlens, k/v appended into the cache), with FlashAttention-3's seqused_k.
What flashjit cannot do raises NotImplementedError naming the argument (dropout, rotary
embeddings, cache_batch_idx, cache_leftpad, seqused_q); speed-only arguments (deterministic,
num_splits) are accepted and left to the engine (the forward is deterministic).
"""
from typing import Optional, Tuple, Union

import torch
from torch import Tensor

from . import ops  # registers torch.ops.flashjit


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
               softcap=0.0, return_lse=False, check=False):
    left, right = _window(window_size, causal)
    run = ops.attention if ops.direct_call_is_safe((q, k, v, alibi_slopes, sinks)) else torch.ops.flashjit.attention
    return run(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k), kv_lens, block_table,
               alibi_slopes, sinks, _scale(softmax_scale), bool(causal), left, right, float(softcap or 0.0),
               bool(return_lse), bool(check))


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
    _no_dropout(dropout_p)
    out, lse = _attention(q, k, v, alibi_slopes=alibi_slopes, sinks=sinks, softmax_scale=softmax_scale, causal=causal,
                          window_size=window_size, softcap=softcap, return_lse=return_attn_probs)
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
                          return_lse=return_attn_probs)
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
    cache_seqlens[b] onward and attended to as well. num_splits is the engine's to choose."""
    if rotary_cos is not None or rotary_sin is not None:
        _unsupported("rotary_cos/rotary_sin", "rotary embeddings are not applied by flashjit: rotate q and k first")
    if cache_batch_idx is not None:
        _unsupported("cache_batch_idx", "not supported yet: index the caches (or the block table) first")
    if cache_leftpad is not None:
        _unsupported("cache_leftpad", "per-sequence key starts are not supported yet")
    if (k is None) != (v is None):
        raise ValueError("k and v are appended together: give both or neither")
    batch = q.shape[0]
    if cache_seqlens is None:
        capacity = k_cache.shape[1] * (block_table.shape[1] if block_table is not None else 1)
        cache_seqlens = torch.full((batch,), capacity - (k.shape[1] if k is not None else 0), dtype=torch.int32,
                                   device=q.device)
    elif isinstance(cache_seqlens, int):
        cache_seqlens = torch.full((batch,), cache_seqlens, dtype=torch.int32, device=q.device)
    kv_lens = cache_seqlens
    if k is not None:
        _append_to_cache(k_cache, v_cache, k, v, cache_seqlens, block_table)
        kv_lens = (cache_seqlens + k.shape[1]).to(torch.int32)
    out, lse = _attention(q, k_cache, v_cache, kv_lens=kv_lens, block_table=block_table, alibi_slopes=alibi_slopes,
                          sinks=sinks, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                          softcap=softcap, return_lse=return_softmax_lse)
    return (out, lse) if return_softmax_lse else out
