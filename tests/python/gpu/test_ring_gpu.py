"""A ring simulated on one GPU with flashjit's kernels (issue 27; run on the device, skipped visibly
without CUDA): a causal sequence cut into 2N chunks, shard r holding chunks r and 2N-1-r (PyTorch's
head-tail balancer, ring-flash-attention's zigzag), each shard's queries run against each shard's
keys one block at a time as a ring of N GPUs would run them (the diagonal block causal, earlier
chunks whole, later chunks skipped), the blocks merged by their LSE with flashjit.merge_attention;
then the backward per block from the merged output and LSE, dq summed over blocks and dk, dv
over query shards. Output, LSE and gradients against unsharded flashjit and float64."""
import math

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the device runs this file)")

if torch.cuda.is_available():
    import flashjit


def rel_l2(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def float64_attention(q, k, v):
    """Causal [B, S, H, D] attention (GQA by repeating k and v) in float64, with the LSE [B, H, S]."""
    group = q.shape[2] // k.shape[2]
    k, v = (t.double().repeat_interleave(group, dim=2) for t in (k, v))
    s = torch.einsum("bqhd,bkhd->bhqk", q.double(), k) / math.sqrt(q.shape[-1])
    n = q.shape[1]
    s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool, device=q.device).tril(), -math.inf)
    lse = torch.logsumexp(s, -1)
    return torch.einsum("bhqk,bkhd->bqhd", torch.exp(s - lse[..., None]), v), lse


def zigzag_rows(n, rank, world):
    """Positions of shard `rank`'s two chunks (first and second half of its rows)."""
    c = n // (2 * world)
    return torch.arange(rank * c, (rank + 1) * c), torch.arange((2 * world - 1 - rank) * c, (2 * world - rank) * c)


def ring_blocks(n, world):
    """(query shard, key shard, query positions, key positions, causal) of every block a ring runs."""
    for rank in range(world):
        q_pos = torch.cat(zigzag_rows(n, rank, world))
        for src in range(world):
            k_first, k_second = zigzag_rows(n, src, world)
            if src == rank:
                yield q_pos, torch.cat([k_first, k_second]), True  # positions ascend: causal is exact
            elif src < rank:
                yield q_pos, k_first, False  # both query chunks come after chunk src, before 2N-1-src
            else:
                yield zigzag_rows(n, rank, world)[1], torch.cat([k_first, k_second]), False


def backward(dout, q, k, v, out, lse, causal):
    return torch.ops.flashjit.attention_backward(dout, q, k, v, out, lse, None, None, 0, 0, None, None, None, None,
                                                 0.0, causal, -1, -1, 0.0, False)


@pytest.mark.parametrize("world, heads, kv_heads, dtype", [(2, 4, 4, torch.bfloat16), (4, 8, 2, torch.bfloat16),
                                                            (8, 4, 4, torch.float16)])
def test_a_simulated_ring_equals_unsharded_attention_forward_and_backward(world, heads, kv_heads, dtype):
    torch.manual_seed(world)
    n, d = 1024, 128
    q = torch.randn(1, n, heads, d, device="cuda", dtype=dtype)
    k, v = (torch.randn(1, n, kv_heads, d, device="cuda", dtype=dtype) for _ in range(2))
    dout = torch.randn(1, n, heads, d, device="cuda", dtype=dtype)

    # Forward: every block's output and LSE, merged per query row over the blocks that saw it.
    parts = {}  # query position -> [(out row, lse row)]
    for q_pos, k_pos, causal in ring_blocks(n, world):
        out, lse, _ = flashjit.flash_attn_func(q[:, q_pos], k[:, k_pos], v[:, k_pos], causal=causal,
                                               return_attn_probs=True)
        for i, p in enumerate(q_pos.tolist()):
            parts.setdefault(p, []).append((out[:, i], lse[:, :, i]))
    assert sorted(parts) == list(range(n))
    most = max(len(b) for b in parts.values())
    out_parts = torch.zeros(most, 1, n, heads, d, device="cuda", dtype=torch.float32)
    lse_parts = torch.full((most, 1, heads, n), -math.inf, device="cuda")  # absent parts weigh nothing
    for p, blocks in parts.items():
        for j, (o, l) in enumerate(blocks):
            out_parts[j, :, p] = o.float()
            lse_parts[j, :, :, p] = l
    ring_out, ring_lse = flashjit.merge_attention(out_parts, lse_parts, dtype)

    whole_out, whole_lse, _ = flashjit.flash_attn_func(q, k, v, causal=True, return_attn_probs=True)
    want_out, want_lse = float64_attention(q, k, v)
    rounding = rel_l2(want_out.to(dtype), want_out)
    assert rel_l2(ring_out, want_out) < max(2 * rel_l2(whole_out, want_out), 3 * rounding)
    assert (ring_lse.double() - want_lse).abs().max().item() < 1e-4
    assert (whole_lse.double() - want_lse).abs().max().item() < 1e-4

    # Backward: each block from the merged output and LSE (what a ring's backward reads).
    dq = torch.zeros(1, n, heads, d, device="cuda", dtype=torch.float32)
    dk, dv = (torch.zeros(1, n, kv_heads, d, device="cuda", dtype=torch.float32) for _ in range(2))
    for q_pos, k_pos, causal in ring_blocks(n, world):
        g = backward(dout[:, q_pos], q[:, q_pos], k[:, k_pos], v[:, k_pos], ring_out[:, q_pos],
                     ring_lse[:, :, q_pos].contiguous(), causal)
        dq[:, q_pos] += g[0].float()
        dk[:, k_pos] += g[1].float()
        dv[:, k_pos] += g[2].float()
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    float64_attention(*leaves)[0].backward(dout.double())
    whole = backward(dout, q, k, v, whole_out, whole_lse, True)
    for name, ring_grad, whole_grad, want in zip("qkv", (dq, dk, dv), whole, (t.grad for t in leaves)):
        floor = rel_l2(want.to(dtype), want)
        err, whole_err = rel_l2(ring_grad, want), rel_l2(whole_grad, want)
        print("world %d d%s: ring %.2e, unsharded %.2e, rounding %.2e" % (world, name, err, whole_err, floor))
        # Each block's gradient is rounded to dtype once before the sum: up to `blocks` more roundings.
        assert err < max(2 * whole_err, 4 * floor), name
