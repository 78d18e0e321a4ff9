"""Rotary position embeddings as flash_attn_with_kvcache applies them (FlashAttention-2's
rotary_cos / rotary_sin / rotary_interleaved): plain PyTorch on the new keys and the queries
before the attention call, computed in fp32 and rounded once to the tensors' dtype."""
import torch

from ._abi import FlashjitError


def check_tables(cos, sin, head_dim, capacity, device):
    """rotary_cos and rotary_sin: [positions, rotary_dim / 2] on the inputs' device, a position for
    every cache slot (checked on the host, so a captured call needs no read of cache_seqlens),
    rotary_dim at most head_dim."""
    if cos is None or sin is None:
        raise FlashjitError("rotary_cos and rotary_sin go together: give both or neither")
    if cos.dim() != 2 or cos.shape != sin.shape:
        raise FlashjitError("rotary_cos and rotary_sin must both be [positions, rotary_dim / 2], got %s and %s"
                            % (list(cos.shape), list(sin.shape)))
    if cos.device != device or sin.device != device:
        raise FlashjitError("rotary_cos and rotary_sin must be on q's device %s" % device)
    if cos.shape[0] < capacity:
        raise FlashjitError("rotary_cos has %d positions but the cache holds %d: it needs one per cache slot"
                            % (cos.shape[0], capacity))
    if 2 * cos.shape[1] > head_dim:
        raise FlashjitError("rotary_cos is [%d, %d]: rotary_dim %d exceeds head_dim %d"
                            % (cos.shape[0], cos.shape[1], 2 * cos.shape[1], head_dim))


def rotate(x, cos, sin, positions, interleaved):
    """x [batch, seq, heads, head_dim] with its first rotary_dim features rotated by the angles of
    `positions` [batch, seq] (rows of cos and sin); interleaved rotates pairs (0, 1), (2, 3), ...
    (GPT-J), else the two halves of the rotary features (GPT-NeoX)."""
    half = cos.shape[1]
    c = cos.float()[positions].unsqueeze(2)  # [batch, seq, 1, half]
    s = sin.float()[positions].unsqueeze(2)
    part = x[..., :2 * half].float()
    x1, x2 = (part[..., 0::2], part[..., 1::2]) if interleaved else (part[..., :half], part[..., half:])
    r1, r2 = x1 * c - x2 * s, x1 * s + x2 * c
    rotated = torch.stack((r1, r2), dim=-1).flatten(-2) if interleaved else torch.cat((r1, r2), dim=-1)
    return torch.cat((rotated.to(x.dtype), x[..., 2 * half:]), dim=-1)
