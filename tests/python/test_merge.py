"""flashjit.merge_attention and flash_attn_combine (python/flashjit/merge.py) on the CPU: pieces of
attention over disjoint key sets, merged, against one attention over all the keys in float64; the
-inf rules (masked parts, rows with no key); FlashAttention-3's layouts; a simulated causal ring
(zigzag shards, as PyTorch's context parallelism and ring-flash-attention cut a sequence) equal to
unsharded attention; autograd and tracing through the operator; argument errors."""
import math

import pytest
import torch

import flashjit
from flashjit import FlashjitError
from flashjit.merge import flash_attn_combine, merge_attention


def attention(q, k, v, visible=None):
    """[B, S, H, D] attention in float64 with its LSE [B, H, S]; rows that see no key: 0 and -inf."""
    s = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double()) / math.sqrt(q.shape[-1])
    if visible is not None:
        s = s.masked_fill(~visible, -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return torch.einsum("bhqk,bkhd->bqhd", p, v.double()), lse


def inputs(b=2, sq=33, sk=70, h=3, d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, s, h, d, generator=g, dtype=torch.float64) for s in (sq, sk, sk)]


def split_keys(q, k, v, bounds, visible=None):
    """Attention over each key block [lo, hi) of `bounds`, stacked: ([parts, ...], [parts, ...])."""
    outs, lses = [], []
    for lo, hi in bounds:
        vis = None if visible is None else visible[..., lo:hi]
        o, l = attention(q, k[:, lo:hi], v[:, lo:hi], vis)
        outs.append(o)
        lses.append(l)
    return torch.stack(outs), torch.stack(lses)


def test_merged_parts_equal_attention_over_all_keys():
    q, k, v = inputs()
    want, want_lse = attention(q, k, v)
    for bounds in ([(0, 70)], [(0, 35), (35, 70)], [(0, 1), (1, 40), (40, 41), (41, 70)]):
        out, lse = merge_attention(*split_keys(q, k, v, bounds))
        assert out.dtype == torch.float64 and lse.dtype == torch.float64  # float64 in, float64 arithmetic
        assert (out - want).abs().max().item() < 1e-12
        assert (lse - want_lse).abs().max().item() < 1e-12
        out, lse = merge_attention(*(t.float() for t in split_keys(q, k, v, bounds)))
        assert out.dtype == torch.float32 and lse.dtype == torch.float32
        assert (out.double() - want).abs().max().item() < 1e-5
        assert (lse.double() - want_lse).abs().max().item() < 1e-5


def test_16_bit_parts_merge_within_their_rounding():
    q, k, v = inputs(sq=64, sk=256, d=64)
    want, _ = attention(q, k, v)
    outs, lses = split_keys(q, k, v, [(0, 100), (100, 256)])
    for dtype in (torch.float16, torch.bfloat16):
        out, _ = merge_attention(outs.to(dtype), lses.float())
        assert out.dtype == dtype
        rounding = (want.to(dtype).double() - want).norm() / want.norm()
        assert ((out.double() - want).norm() / want.norm()).item() < 3 * rounding.item()
        assert merge_attention(outs.to(dtype), lses.float(), torch.float32)[0].dtype == torch.float32


def test_masked_parts_weigh_nothing_and_rows_without_keys_give_zero_and_minus_inf():
    q, k, v = inputs(sq=8, sk=8)
    visible = torch.ones(8, 8, dtype=torch.bool).tril()  # causal, square: row i sees keys 0..i
    visible[0] = False  # and row 0 sees nothing at all
    want, want_lse = attention(q, k, v, visible)
    outs, lses = split_keys(q, k, v, [(0, 4), (4, 8)], visible)
    assert torch.isneginf(lses[1][:, :, :4]).all()  # rows 0-3 see no key of the second block
    out, lse = merge_attention(outs, lses)
    assert not out.isnan().any() and not lse.isnan().any()
    assert (out[:, 0] == 0).all() and torch.isneginf(lse[:, :, 0]).all()
    assert (out - want).abs().max().item() < 1e-12
    assert (lse[:, :, 1:] - want_lse[:, :, 1:]).abs().max().item() < 1e-12


def test_flash_attn_combine_takes_and_returns_flashattention3s_layouts():
    q, k, v = inputs()
    want, want_lse = attention(q, k, v)
    outs, lses = split_keys(q, k, v, [(0, 20), (20, 70)])
    out_partial, lse_partial = outs.float(), lses.float().transpose(2, 3)  # [splits, B, S, H]
    out, lse = flash_attn_combine(out_partial, lse_partial)
    assert out.dtype == torch.float32 and tuple(out.shape) == tuple(want.shape)
    assert tuple(lse.shape) == (2, 33, 3) and lse.transpose(1, 2).is_contiguous()  # a view of [B, H, S]
    assert (out.double() - want).abs().max().item() < 1e-5
    assert (lse.transpose(1, 2).double() - want_lse).abs().max().item() < 1e-5
    into = torch.empty(2, 33, 3, 16, dtype=torch.bfloat16)
    assert flash_attn_combine(out_partial, lse_partial, out=into)[0] is into
    assert (into.double() - want).abs().max().item() < 2e-2
    assert flash_attn_combine(out_partial, lse_partial, out_dtype=torch.float16)[0].dtype == torch.float16


def zigzag(x, rank, world, dim=1):
    """Rank `rank`'s shard of x: chunks rank and 2 * world - 1 - rank of 2 * world along dim."""
    chunks = x.chunk(2 * world, dim=dim)
    return torch.cat([chunks[rank], chunks[2 * world - 1 - rank]], dim=dim)


@pytest.mark.parametrize("world", [1, 2, 4])
def test_a_simulated_causal_ring_over_zigzag_shards_equals_unsharded_attention(world):
    """Each rank's queries against every rank's keys, one block at a time, merged by LSE: the
    diagonal block causal, blocks of earlier chunks whole, of later chunks skipped, as a ring runs
    them; then the shards put back in order."""
    s = 16 * world
    q, k, v = inputs(b=1, sq=s, sk=s, h=2, d=8, seed=world)
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    want, want_lse = attention(q, k, v, causal)
    pos = torch.arange(s)
    got = torch.empty_like(want)
    for rank in range(world):
        q_pos = zigzag(pos, rank, world, dim=0)
        outs, lses = [], []
        for src in range(world):
            k_pos = zigzag(pos, src, world, dim=0)
            visible = k_pos[None, :] <= q_pos[:, None]
            if not visible.any():
                continue
            o, l = attention(q[:, q_pos], k[:, k_pos], v[:, k_pos], visible)
            outs.append(o)
            lses.append(l)
        out, lse = merge_attention(torch.stack(outs), torch.stack(lses))
        got[:, q_pos] = out
        assert (lse - want_lse[:, :, q_pos]).abs().max().item() < 1e-12
    assert (got - want).abs().max().item() < 1e-12


def test_the_operator_is_differentiable_and_traceable():
    q, k, v = inputs(b=1, sq=5, sk=12, h=2, d=4)
    outs, lses = split_keys(q, k, v, [(0, 5), (5, 12)])
    outs.requires_grad_(True)
    lses = lses.detach().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda o, l: merge_attention(o, l), (outs, lses))
    compiled = torch.compile(merge_attention, backend="aot_eager", fullgraph=True)
    a, b = compiled(outs.detach(), lses.detach())
    c, d = merge_attention(outs.detach(), lses.detach())
    assert torch.equal(a, c) and torch.equal(b, d)
    assert flashjit.merge_attention is merge_attention and flashjit.flash_attn_combine is flash_attn_combine


@pytest.mark.parametrize("outs, lses, needle", [
    (torch.zeros(2, 1, 4, 3), torch.zeros(2, 1, 3, 4), r"out_parts must be \[parts, batch, seq, heads, head_dim\]"),
    (torch.zeros(2, 1, 4, 3, 8), torch.zeros(2, 1, 4, 3), r"lse_parts must be \[parts, batch, heads, seq\] = \[2, 1, 3, 4\]"),
    (torch.zeros(0, 1, 4, 3, 8), torch.zeros(0, 1, 3, 4), "no parts"),
    (torch.zeros(2, 1, 4, 3, 8), torch.zeros(2, 1, 3, 4, dtype=torch.int64), "floating point"),
])
def test_bad_arguments_are_named(outs, lses, needle):
    with pytest.raises(FlashjitError, match=needle):
        merge_attention(outs, lses)
