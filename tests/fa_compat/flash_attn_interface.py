"""A stand-in `flash_attn_interface` (FlashAttention-3's hopper module) for running FA3's test file
against flashjit. Positional order follows FA3's flash_attn_interface.

Mapped: q/k/v, cu_seqlens, max_seqlen, seqused_k, softmax_scale, causal, window_size, softcap,
return_attn_probs / return_softmax_lse (FA3 returns (out, lse)), k/v appended into the cache,
cache_seqlens, cache_batch_idx, cache_leftpad, rotary_cos/sin (rotary in the cache), page_table
(flashjit's block_table), flash_attn_combine (flashjit.merge's).
Passed on: deterministic (flashjit's backward then sums dq in a fixed order; its forward is
deterministic anyway). Ignored as speed-only (the result does not depend on them): num_splits,
pack_gqa, sm_margin, scheduler_metadata
(flashjit schedules itself; get_scheduler_metadata returns an empty plan that only this shim accepts).
Raising NotImplementedError: qv, q/k/v_descale (FP8), attention_chunk != 0, seqused_q,
rotary_seqlens, varlen queries or new keys in the cache (cu_seqlens_q, cu_seqlens_k_new,
max_seqlen_q).
"""
import torch

from flash_attn._unsupported import unsupported
from flashjit import interface as _fj


def _common(qv, q_descale, k_descale, v_descale, attention_chunk):
    if qv is not None:
        unsupported("qv", "no extra query-times-value term (FA3's MLA decode input)")
    if q_descale is not None or k_descale is not None or v_descale is not None:
        unsupported("q_descale/k_descale/v_descale", "no FP8 inputs")
    if attention_chunk:
        unsupported("attention_chunk=%r" % (attention_chunk,), "no chunked-local attention (Llama 4)")


def flash_attn_func(q, k, v, softmax_scale=None, causal=False, qv=None, q_descale=None, k_descale=None,
                    v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0, num_splits=1,
                    pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False):
    _common(qv, q_descale, k_descale, v_descale, attention_chunk)
    res = _fj.flash_attn_func(q, k, v, softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                              softcap=softcap, deterministic=deterministic, return_attn_probs=return_attn_probs)
    return (res[0], res[1]) if return_attn_probs else res


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_q=None,
                           seqused_k=None, softmax_scale=None, causal=False, qv=None, q_descale=None,
                           k_descale=None, v_descale=None, window_size=(-1, -1), attention_chunk=0, softcap=0.0,
                           num_splits=1, pack_gqa=None, deterministic=False, sm_margin=0, return_attn_probs=False):
    _common(qv, q_descale, k_descale, v_descale, attention_chunk)
    # flashjit raises for seqused_q itself.
    res = _fj.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                     softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                                     softcap=softcap, deterministic=deterministic,
                                     return_attn_probs=return_attn_probs, seqused_q=seqused_q,
                                     seqused_k=seqused_k)
    return (res[0], res[1]) if return_attn_probs else res


class _NoPlan:
    """What get_scheduler_metadata returns here: flashjit plans each call itself."""

    def __repr__(self):
        return "<flashjit fa_compat: no precomputed schedule>"


_NO_PLAN = _NoPlan()


def get_scheduler_metadata(batch_size, max_seqlen_q, max_seqlen_k, num_heads_q, num_heads_kv, headdim,
                           cache_seqlens, qkv_dtype=torch.bfloat16, headdim_v=None, cu_seqlens_q=None,
                           cu_seqlens_k_new=None, cache_leftpad=None, page_size=None, max_seqlen_k_new=0,
                           causal=False, window_size=(-1, -1), attention_chunk=0, has_softcap=False, num_splits=0,
                           pack_gqa=None, sm_margin=0):
    """FA3 precomputes its tile schedule; flashjit's engine schedules each call, so the plan is empty.
    The arguments of the call that uses it are checked there."""
    return _NO_PLAN


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, qv=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, page_table=None,
                            cu_seqlens_q=None, cu_seqlens_k_new=None, max_seqlen_q=None, rotary_seqlens=None,
                            q_descale=None, k_descale=None, v_descale=None, softmax_scale=None, causal=False,
                            window_size=(-1, -1), attention_chunk=0, softcap=0.0, rotary_interleaved=True,
                            scheduler_metadata=None, num_splits=0, pack_gqa=None, sm_margin=0,
                            return_softmax_lse=False):
    _common(qv, q_descale, k_descale, v_descale, attention_chunk)
    if scheduler_metadata is not None and scheduler_metadata is not _NO_PLAN:
        unsupported("scheduler_metadata", "only the empty plan of this shim's get_scheduler_metadata is accepted")
    if rotary_seqlens is not None:
        unsupported("rotary_seqlens", "rotary embeddings are not applied by flashjit")
    if cu_seqlens_q is not None or max_seqlen_q is not None:
        unsupported("cu_seqlens_q/max_seqlen_q in flash_attn_with_kvcache", "queries are [batch, seqlen_q, ...] here")
    if cu_seqlens_k_new is not None:
        unsupported("cu_seqlens_k_new", "new keys are [batch, seqlen_new, ...] here")
    # num_splits is speed-only.
    res = _fj.flash_attn_with_kvcache(q, k_cache, v_cache, k=k, v=v, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                                      cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx,
                                      cache_leftpad=cache_leftpad, block_table=page_table,
                                      softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                                      softcap=softcap, rotary_interleaved=rotary_interleaved, num_splits=num_splits,
                                      return_softmax_lse=return_softmax_lse)
    return res


def flash_attn_combine(out_partial, lse_partial, out=None, out_dtype=None):
    from flashjit import merge
    return merge.flash_attn_combine(out_partial, lse_partial, out=out, out_dtype=out_dtype)
