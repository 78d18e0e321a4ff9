"""pad_input / unpad_input with FlashAttention-2's signatures and results, in plain torch
(indexing ops, so autograd flows through them as through any torch op)."""
import torch
import torch.nn.functional as F


def unpad_input(hidden_states, attention_mask, unused_mask=None):
    """hidden_states [batch, seqlen, ...]; attention_mask [batch, seqlen] (nonzero: a token);
    unused_mask [batch, seqlen] (nonzero: a slot kept in the packed tensor but not used).
    Returns (packed [total, ...], indices [total] into the flattened batch*seqlen axis,
    cu_seqlens int32 [batch + 1], max_seqlen int, seqused int32 [batch]), where the packed
    tokens of each sequence are its attention_mask plus unused_mask positions, in order."""
    kept = (attention_mask != 0) if unused_mask is None else ((attention_mask != 0) | (unused_mask != 0))
    seqlens = kept.sum(dim=-1, dtype=torch.int32)
    seqused = (attention_mask != 0).sum(dim=-1, dtype=torch.int32)
    indices = torch.nonzero(kept.flatten(), as_tuple=False).flatten()
    max_seqlen = int(seqlens.max().item()) if seqlens.numel() else 0
    cu_seqlens = F.pad(torch.cumsum(seqlens, dim=0, dtype=torch.int32), (1, 0))
    flat = hidden_states.reshape(-1, *hidden_states.shape[2:])
    return flat.index_select(0, indices), indices, cu_seqlens, max_seqlen, seqused


def pad_input(hidden_states, indices, batch, seqlen):
    """hidden_states [total, ...] back to [batch, seqlen, ...], zeros where no token was."""
    out = hidden_states.new_zeros((batch * seqlen,) + tuple(hidden_states.shape[1:]))
    out = out.index_put((indices,), hidden_states)
    return out.reshape(batch, seqlen, *hidden_states.shape[1:])
