"""flash_attn_with_kvcache's rotary embeddings and cache_batch_idx, on CPU tensors through the
operator's float64 reference kernel (conftest): the rotation against the complex-number formula,
and a call against the same attention on caches rotated, appended and indexed by hand."""
import pytest
import torch

import flashjit
from flashjit import FlashjitError, rotary


def angles(positions, half, base=10000.0):
    inv = base ** (-torch.arange(half, dtype=torch.float64) / half)
    return torch.arange(positions, dtype=torch.float64)[:, None] * inv[None, :]


def rotate_by_formula(x, theta, positions, interleaved):
    """x's rotary features as complex numbers times e^(i theta[position])."""
    half = theta.shape[1]
    part = x[..., :2 * half].double()
    pairs = part.unflatten(-1, (half, 2)) if interleaved else torch.stack((part[..., :half], part[..., half:]), -1)
    z = torch.view_as_complex(pairs.contiguous()) * torch.polar(torch.ones_like(theta), theta)[positions][:, :, None]
    r = torch.view_as_real(z)
    rotated = r.flatten(-2) if interleaved else torch.cat((r[..., 0], r[..., 1]), -1)
    return torch.cat((rotated.to(x.dtype), x[..., 2 * half:]), -1)


@pytest.mark.parametrize("interleaved", [True, False])
def test_rotate_matches_the_complex_formula(interleaved):
    torch.manual_seed(0)
    x = torch.randn(2, 5, 3, 40)
    theta = angles(32, 12)  # rotary_dim 24 of 40
    positions = torch.tensor([[0, 1, 2, 3, 4], [7, 9, 11, 30, 31]])
    got = rotary.rotate(x, theta.cos().float(), theta.sin().float(), positions, interleaved)
    torch.testing.assert_close(got, rotate_by_formula(x, theta, positions, interleaved), atol=1e-5, rtol=1e-5)
    assert torch.equal(got[..., 24:], x[..., 24:])


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("interleaved", [True, False])
def test_kvcache_rotates_new_keys_at_their_slots_and_queries_as_flash_attention(cpu_reference_kernel, reference,
                                                                                 causal, interleaved):
    torch.manual_seed(1)
    batch, capacity, new, hq, hkv, d = 2, 24, 3, 4, 2, 32
    q, k, v = torch.randn(batch, new, hq, d), torch.randn(batch, new, hkv, d), torch.randn(batch, new, hkv, d)
    k_cache, v_cache = torch.randn(batch, capacity, hkv, d), torch.randn(batch, capacity, hkv, d)
    lens = torch.tensor([5, 17], dtype=torch.int32)
    theta = angles(capacity, 8)
    cos, sin = theta.cos().float(), theta.sin().float()
    kc, vc = k_cache.clone(), v_cache.clone()
    got = flashjit.flash_attn_with_kvcache(q, kc, vc, k, v, cos, sin, cache_seqlens=lens, causal=causal,
                                           rotary_interleaved=interleaved)
    slots = lens.long()[:, None] + torch.arange(new)[None, :]
    # Causal: each query at its own slot; otherwise every query at the cache's end (FlashAttention).
    q_pos = slots if causal else lens.long()[:, None].expand(batch, new)
    want_k = rotate_by_formula(k, theta, slots, interleaved)
    for b in range(batch):
        k_cache[b, slots[b]] = want_k[b]
        v_cache[b, slots[b]] = v[b]
    assert torch.allclose(kc, k_cache, atol=1e-5)  # rotated keys appended in place
    want = reference(rotate_by_formula(q, theta, q_pos, interleaved), k_cache, v_cache, kv_lens=lens + new,
                     causal=causal)[0]
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_kvcache_rotary_checks_its_tables(cpu_reference_kernel):
    q, cache = torch.randn(1, 1, 2, 16), torch.randn(1, 8, 2, 16)
    with pytest.raises(FlashjitError, match="one per cache slot"):
        flashjit.flash_attn_with_kvcache(q, cache, cache, q, q, torch.ones(4, 4), torch.ones(4, 4), cache_seqlens=2)
    with pytest.raises(FlashjitError, match="rotary_dim 18 exceeds head_dim 16"):
        flashjit.flash_attn_with_kvcache(q, cache, cache, q, q, torch.ones(8, 9), torch.ones(8, 9), cache_seqlens=2)
    with pytest.raises(ValueError, match="give k and v"):
        flashjit.flash_attn_with_kvcache(q, cache, cache, rotary_cos=torch.ones(8, 4), rotary_sin=torch.ones(8, 4))


@pytest.mark.parametrize("capacity", [40, 300])  # one page per row; 150-key pages (over the 256 limit)
def test_cache_batch_idx_reads_and_appends_the_named_rows(cpu_reference_kernel, reference, capacity):
    torch.manual_seed(2)
    rows, hkv, d = 4, 2, 16
    k_cache, v_cache = torch.randn(rows, capacity, hkv, d), torch.randn(rows, capacity, hkv, d)
    idx = torch.tensor([3, 0], dtype=torch.int32)
    lens = torch.tensor([capacity - 2, 7], dtype=torch.int32)
    q, k, v = torch.randn(2, 2, 4, d), torch.randn(2, 2, hkv, d), torch.randn(2, 2, hkv, d)
    kc, vc = k_cache.clone(), v_cache.clone()
    got = flashjit.flash_attn_with_kvcache(q, kc, vc, k, v, cache_seqlens=lens, cache_batch_idx=idx, causal=True)
    for b, row in enumerate(idx.tolist()):
        k_cache[row, lens[b]:lens[b] + 2] = k[b]
        v_cache[row, lens[b]:lens[b] + 2] = v[b]
    assert torch.equal(kc, k_cache) and torch.equal(vc, v_cache)  # appended into the named rows only
    want = reference(q, k_cache[idx.long()], v_cache[idx.long()], kv_lens=lens + 2, causal=True)[0]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    with pytest.raises(FlashjitError, match="rows back to back"):
        flashjit.flash_attn_with_kvcache(q, kc[:, :capacity - 1], vc[:, :capacity - 1], cache_seqlens=lens - 2,
                                         cache_batch_idx=idx)
