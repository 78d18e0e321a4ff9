"""The backward's deterministic mode on a GPU (skipped, visibly, without CUDA).

deterministic=True makes the K/V blocks add into each Q block's fp32 dQ sums one after another in a
fixed order (templates/bwd_sm80/dq_order.cuh): dq, dk and dv must then have the same bits on every
call, on shapes whose K/V blocks share Q blocks (several blocks of keys; causal and windowed walks
that start at different Q blocks; GQA groups; ragged sequences, one without keys), and the gradients
must be the default mode's up to the order of fp32 additions. Both run the same inputs through
flashjit.ops.attention_backward (the operator the autograd formula calls), on the forward's LSE."""
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the device runs this file)")

if torch.cuda.is_available():
    import flashjit
    from flashjit import ops

REPEATS = 4  # calls compared bit for bit: each interleaves a default-mode call, so the atomics' order varies
# Relative L2 distance allowed between the two modes' gradients: both round the same fp32 sums to
# 16 bits, in another order; a bf16 ulp is 2^-8 of a value, so a tenth of it bounds the difference.
MODES_APART = 4e-3

CASES = {
    # name: (batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim, causal, window, dtype)
    "dense 1k": (2, 1024, 1024, 4, 4, 64, False, (-1, -1), torch.bfloat16),
    "causal d128 sq<sk": (2, 700, 1300, 4, 4, 128, True, (-1, -1), torch.float16),
    "gqa 4:1 causal": (1, 1500, 1500, 8, 2, 64, True, (-1, -1), torch.bfloat16),
    "window 256,64": (2, 1100, 1100, 2, 2, 128, False, (256, 64), torch.bfloat16),
}


def _inputs(b, sq, sk, hq, hkv, d, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype, generator=g)
    k = torch.randn(b, sk, hkv, d, device="cuda", dtype=dtype, generator=g)
    v = torch.randn(b, sk, hkv, d, device="cuda", dtype=dtype, generator=g)
    dout = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype, generator=g)
    return q, k, v, dout


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


@pytest.mark.parametrize("name", list(CASES))
def test_deterministic_backward_repeats_bit_for_bit(name):
    b, sq, sk, hq, hkv, d, causal, window, dtype = CASES[name]
    q, k, v, dout = _inputs(b, sq, sk, hq, hkv, d, dtype, seed=1)
    left, right = flashjit.interface._window(window, causal)
    out, lse = ops.call(q, k, v, None, None, 0, 0, None, None, None, None, 0.0, causal, left, right, 0.0, True, False)

    def backward(deterministic):
        dq, dk, dv, _ = ops.attention_backward(dout, q, k, v, out, lse, None, None, 0, 0, None, None, None, None, 0.0,
                                               causal, left, right, 0.0, deterministic)
        return dq, dk, dv

    first = backward(True)
    for _ in range(REPEATS):
        default = backward(False)
        again = backward(True)
        for got, want in zip(again, first):
            assert torch.equal(got, want), name
    for got, want in zip(first, default):
        assert _rel(got, want) < MODES_APART, name


def test_deterministic_varlen_with_an_empty_sequence_repeats():
    """Ragged sequences (one without keys, one without queries) through the FlashAttention API,
    gradients from autograd: the same bits on every call."""
    lens_q, lens_k = [300, 0, 517, 64], [420, 190, 517, 0]
    cu_q = torch.tensor([0] + torch.tensor(lens_q).cumsum(0).tolist(), device="cuda", dtype=torch.int32)
    cu_k = torch.tensor([0] + torch.tensor(lens_k).cumsum(0).tolist(), device="cuda", dtype=torch.int32)
    g = torch.Generator(device="cuda").manual_seed(3)
    q0 = torch.randn(sum(lens_q), 4, 64, device="cuda", dtype=torch.bfloat16, generator=g)
    k0 = torch.randn(sum(lens_k), 2, 64, device="cuda", dtype=torch.bfloat16, generator=g)
    v0 = torch.randn(sum(lens_k), 2, 64, device="cuda", dtype=torch.bfloat16, generator=g)
    dout = torch.randn_like(q0)

    def grads():
        q, k, v = (t.clone().requires_grad_() for t in (q0, k0, v0))
        out = flashjit.flash_attn_varlen_func(q, k, v, cu_q, cu_k, max(lens_q), max(lens_k), causal=True,
                                              deterministic=True)
        out.backward(dout)
        return q.grad, k.grad, v.grad

    first = grads()
    for _ in range(REPEATS):
        for got, want in zip(grads(), first):
            assert torch.equal(got, want)
