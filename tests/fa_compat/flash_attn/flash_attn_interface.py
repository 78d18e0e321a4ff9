"""FlashAttention-2's public functions (positional order as FA2's flash_attn_interface) on flashjit.

Packed variants split the packed tensor into views (no copy). flashjit's own argument checks and
NotImplementedErrors (dropout_p > 0, rotary in the KV cache, cache_batch_idx, cache_leftpad) apply
unchanged; deterministic=True reaches flashjit's backward (dq summed in a fixed order). return_attn_probs gives
(out, softmax_lse, None): flashjit never forms the attention probabilities, so S_dmask is None
(FA2 fills it only for dropout's testing, which flashjit refuses).
"""
import flashjit
from flashjit import interface as _fj

from ._unsupported import unsupported

USE_TRITON_ROCM = False  # this shim is never FA2's ROCm/Triton backend


def _get_block_size_n(device, head_dim, is_dropout, is_causal):
    """FA2's kernel tile width, used only to decode S_dmask; flashjit returns no S_dmask."""
    unsupported("_get_block_size_n (S_dmask layout)", "flashjit never forms the attention probabilities")


def _flash_attn_forward(*args, **kwargs):
    unsupported("flash_attn_interface._flash_attn_forward (FA2's private op)", "use flash_attn_func")


def _flash_attn_varlen_forward(*args, **kwargs):
    unsupported("flash_attn_interface._flash_attn_varlen_forward (FA2's private op)", "use flash_attn_varlen_func")


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    return flashjit.flash_attn_func(q, k, v, dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                                    window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                                    deterministic=deterministic, return_attn_probs=return_attn_probs)


def flash_attn_kvpacked_func(q, kv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                             softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """kv [batch, seqlen_k, 2, heads_kv, head_dim]."""
    k, v = kv.unbind(dim=-3)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                           deterministic, return_attn_probs)


def flash_attn_qkvpacked_func(qkv, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                              softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """qkv [batch, seqlen, 3, heads, head_dim]."""
    q, k, v = qkv.unbind(dim=-3)
    return flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size, softcap, alibi_slopes,
                           deterministic, return_attn_probs)


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    return flashjit.flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                           dropout_p=dropout_p, softmax_scale=softmax_scale, causal=causal,
                                           window_size=window_size, softcap=softcap, alibi_slopes=alibi_slopes,
                                           deterministic=deterministic, return_attn_probs=return_attn_probs,
                                           block_table=block_table)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                                    softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """kv [total_k, 2, heads_kv, head_dim]."""
    k, v = kv.unbind(dim=-3)
    return flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p,
                                  softmax_scale, causal, window_size, softcap, alibi_slopes, deterministic,
                                  return_attn_probs)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, dropout_p=0.0, softmax_scale=None, causal=False,
                                     window_size=(-1, -1), softcap=0.0, alibi_slopes=None, deterministic=False,
                                     return_attn_probs=False):
    """qkv [total, 3, heads, head_dim]; one cu_seqlens for queries and keys."""
    q, k, v = qkv.unbind(dim=-3)
    return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, dropout_p, softmax_scale,
                                  causal, window_size, softcap, alibi_slopes, deterministic, return_attn_probs)


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False):
    # flashjit raises for rotary_cos/sin, cache_batch_idx and cache_leftpad; num_splits is speed-only.
    return _fj.flash_attn_with_kvcache(q, k_cache, v_cache, k=k, v=v, rotary_cos=rotary_cos, rotary_sin=rotary_sin,
                                       cache_seqlens=cache_seqlens, cache_batch_idx=cache_batch_idx,
                                       cache_leftpad=cache_leftpad, block_table=block_table,
                                       softmax_scale=softmax_scale, causal=causal, window_size=window_size,
                                       softcap=softcap, rotary_interleaved=rotary_interleaved,
                                       alibi_slopes=alibi_slopes, num_splits=num_splits,
                                       return_softmax_lse=return_softmax_lse)
