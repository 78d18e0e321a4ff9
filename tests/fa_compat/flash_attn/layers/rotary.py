"""apply_rotary_emb with FlashAttention-2's signature, in plain torch.

Rotates the first rotary_dim = 2 * cos.shape[-1] channels of each head; the rest pass through.
Not interleaved (GPT-NeoX): channel i pairs with i + rotary_dim / 2. Interleaved (GPT-J): 2i with
2i + 1. The token at position p (its index in the sequence plus seqlen_offsets) uses cos[p] and
sin[p]; positions at or past cos.shape[0] are left unrotated, as FlashAttention's kernel leaves them.
"""
import torch


def _rotate(x, cos, sin, interleaved):
    """x [..., rotary_dim]; cos, sin broadcastable to [..., rotary_dim / 2]."""
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
        return out.flatten(-2)
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def _table(cos, sin, positions):
    """cos/sin rows at positions (any shape, long), identity rotation past the table's end."""
    n = cos.shape[0]
    inside = positions < n
    idx = positions.clamp(max=n - 1)
    c = torch.where(inside[..., None], cos[idx], torch.ones_like(cos[idx]))
    s = torch.where(inside[..., None], sin[idx], torch.zeros_like(sin[idx]))
    return c, s


def apply_rotary_emb(x, cos, sin, interleaved=False, inplace=False, seqlen_offsets=0, cu_seqlens=None,
                     max_seqlen=None):
    """x [batch, seqlen, heads, head_dim], or [total, heads, head_dim] with cu_seqlens [batch + 1];
    cos, sin [seqlen_ro, rotary_dim / 2]; seqlen_offsets an int or [batch] tensor."""
    rot = 2 * cos.shape[-1]
    if rot > x.shape[-1]:
        raise ValueError("rotary_dim %d exceeds head_dim %d" % (rot, x.shape[-1]))
    device = x.device
    if cu_seqlens is None:
        batch, seqlen = x.shape[0], x.shape[1]
        pos = torch.arange(seqlen, device=device)[None, :].expand(batch, seqlen)
        off = seqlen_offsets if isinstance(seqlen_offsets, int) else seqlen_offsets.to(device=device, dtype=torch.long)[:, None]
        pos = pos + off  # [batch, seqlen]
    else:
        total = x.shape[0]
        cu = cu_seqlens.to(device=device, dtype=torch.long)
        token = torch.arange(total, device=device)
        seq = torch.searchsorted(cu[1:], token, right=True)  # each token's sequence
        pos = token - cu[seq]
        if not isinstance(seqlen_offsets, int):
            pos = pos + seqlen_offsets.to(device=device, dtype=torch.long)[seq]
        else:
            pos = pos + seqlen_offsets
    c, s = _table(cos, sin, pos)
    c, s = c.unsqueeze(-2), s.unsqueeze(-2)  # broadcast over heads
    rotated = _rotate(x[..., :rot].float(), c.float(), s.float(), interleaved).to(x.dtype)
    if inplace:
        x[..., :rot] = rotated
        return x
    return torch.cat((rotated, x[..., rot:]), dim=-1)
