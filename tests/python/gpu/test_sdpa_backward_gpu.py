"""Gradients through F.scaled_dot_product_attention with flashjit as SDPA's flash backend (run on
the device by bench/device_autograd.sh; skipped, visibly, without CUDA).

dq, dk, dv through SDPA-with-"FLASHJIT" against SDPA's math backend in float64 on the same rounded
inputs and upstream gradient (relative L2), bounded by a few times the error of aten's own flash
backward on the same inputs, measured in the test; the routed-call counters move by one forward and
one backward per call; the gradients have aten's strides; no warning at the forward. Grouped-query
attention (enable_gqa, 8 query heads on 2 key/value heads) the same way, and head dims past 128
(160, 192, 256). Then deterministic mode's bitwise repeats under torch.use_deterministic_algorithms
(the aten op's prefix on engine refusals: tests/python/test_sdpa_backward.py); a tiny training run through F.scaled_dot_product_attention (200 steps) against aten's flash
kernels from the same init and data; and a torch.compile training step (inductor checks the
backward's strides against aten's meta)."""
import math
import warnings

import pytest
import torch
import torch.nn.functional as F

from flashjit_tests_tiny_block import PreNormBlock  # registered by conftest.py beside this file

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the device runs this file)")

if torch.cuda.is_available():
    from torch.nn import attention as nn_attention
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from flashjit import FlashjitError, sdpa

OVER_ATEN = 3.0  # as tests/python/gpu/test_autograd_gpu.py's OVER_SDPA


def rel_l2(a, b):
    return ((a.double() - b).norm() / b.norm().clamp_min(1e-30)).item()


def activate():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the dispatcher warns that aten's kernels are overridden
        nn_attention.activate_flash_attention_impl(sdpa.IMPL_NAME)


def restore():
    """aten's kernels back, forward and backward. A forward recorded through flashjit keeps the
    backward routed past restore (flashjit.sdpa's docstring); these tests consume their graphs
    before restoring, so they drop that route too: the next test's aten baseline is aten's own."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nn_attention.restore_flash_attention_impl()
    while sdpa._lingering_backward_routes:
        sdpa._lingering_backward_routes.pop()._destroy()


@pytest.fixture
def flashjit_sdpa():
    activate()
    yield
    restore()


def flash_grads(q, k, v, dout, **kwargs):
    """Output and gradients of SDPA's flash backend (aten's or flashjit's, whichever is active)."""
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):  # the flash backend or an error, never a silent other one
        out = F.scaled_dot_product_attention(*leaves, **kwargs)
    out.backward(dout)
    return out.detach(), [t.grad for t in leaves]


def math_grads(q, k, v, dout, **kwargs):
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.MATH):
        out = F.scaled_dot_product_attention(*leaves, **kwargs)
    out.backward(dout.double())
    return out.detach(), [t.grad for t in leaves]


CASES = [  # dtype, batch, heads, seq_q, seq_k, head_dim, causal, layout
    (torch.float16, 2, 8, 256, 256, 64, False, "bhsd"),
    (torch.bfloat16, 2, 8, 512, 512, 128, True, "bshd"),
    (torch.bfloat16, 3, 4, 333, 333, 64, True, "bshd"),     # odd length
    (torch.float16, 1, 4, 77, 300, 128, False, "bhsd"),     # seq_q != seq_k (SDPA's flash: not causal then)
    (torch.bfloat16, 1, 2, 1, 129, 64, False, "bshd"),      # one query row
    (torch.bfloat16, 2, 4, 256, 256, 160, True, "bshd"),    # head dims past 128 (aten's flash takes up to 256)
    (torch.float16, 1, 4, 200, 200, 192, True, "bhsd"),
    (torch.bfloat16, 1, 4, 333, 333, 256, False, "bhsd"),
    (torch.float16, 1, 2, 77, 300, 256, False, "bshd"),
]


def make(shape, dtype, layout):
    b, h, s, d = shape
    if layout == "bshd":  # SDPA's usual input: projections viewed per head
        return torch.randn(b, s, h, d, device="cuda", dtype=dtype).transpose(1, 2)
    return torch.randn(b, h, s, d, device="cuda", dtype=dtype)


@pytest.mark.parametrize("dtype, b, h, sq, sk, d, causal, layout", CASES)
def test_sdpa_gradients_within_a_few_times_aten_flash_error(dtype, b, h, sq, sk, d, causal, layout):
    torch.manual_seed(0)
    q, k, v = make((b, h, sq, d), dtype, layout), make((b, h, sk, d), dtype, layout), make((b, h, sk, d), dtype, layout)
    dout = torch.randn(b, h, sq, d, device="cuda", dtype=dtype)
    check_against_aten_flash(dtype, q, k, v, dout, is_causal=causal, scale=0.7 / d ** 0.5)


GQA_CASES = [  # dtype, batch, query heads, key/value heads, seq, head_dim, causal, layout
    (torch.bfloat16, 2, 8, 2, 256, 64, True, "bshd"),
    (torch.float16, 1, 8, 2, 333, 128, True, "bhsd"),    # odd length
    (torch.bfloat16, 2, 8, 2, 200, 128, False, "bhsd"),
]


@pytest.mark.parametrize("dtype, b, hq, hkv, s, d, causal, layout", GQA_CASES)
def test_gqa_gradients_through_enable_gqa_within_a_few_times_aten_flash_error(dtype, b, hq, hkv, s, d, causal,
                                                                               layout):
    """F.scaled_dot_product_attention(..., enable_gqa=True) on the flash backend: aten hands the
    key/value heads unexpanded to its flash ops (FlashAttention takes GQA natively, so aten's own
    flash kernels are the baseline here too), flashjit's backward writes dk, dv per key/value head.
    SDPA's math expands k and v itself (enable_gqa) and autograd sums the gradients back."""
    torch.manual_seed(0)
    q = make((b, hq, s, d), dtype, layout)
    k, v = make((b, hkv, s, d), dtype, layout), make((b, hkv, s, d), dtype, layout)
    dout = torch.randn(b, hq, s, d, device="cuda", dtype=dtype)
    got = check_against_aten_flash(dtype, q, k, v, dout, is_causal=causal, enable_gqa=True)
    assert got[1].shape == got[2].shape == (b, hkv, s, d)


def check_against_aten_flash(dtype, q, k, v, dout, **options):
    """SDPA's gradients with flashjit active against SDPA's math in float64 on the same inputs: the
    output within 1e-2, each of dq, dk, dv within OVER_ATEN times the error of aten's own flash
    backward (or the gradient's own rounding to dtype, whichever is larger), in aten's meta layout;
    one routed forward and one routed backward; no "backward will raise" warning at the forward.
    Returns flashjit's gradients."""
    want_out, want = math_grads(q, k, v, dout, **options)
    _, aten = flash_grads(q, k, v, dout, **options)  # aten's own flash kernels (not active yet)
    activate()
    try:
        forwards, backwards = sdpa.routed_calls(), sdpa.routed_calls(backward=True)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="flashjit: autograd records")  # "its backward will raise"
            out, got = flash_grads(q, k, v, dout, **options)
        torch.cuda.synchronize()
        assert sdpa.routed_calls() == forwards + 1
        assert sdpa.routed_calls(backward=True) == backwards + 1
    finally:
        restore()
    assert rel_l2(out, want_out) < 1e-2
    report = []
    for name, g, a, w, t in zip(("dq", "dk", "dv"), got, aten, want, (q, k, v)):
        assert g.dtype == dtype and g.shape == w.shape
        assert g.stride() == torch.empty_like(t).stride()  # aten's meta function's layout
        error, aten_error, rounding = rel_l2(g, w), rel_l2(a, w), rel_l2(w.to(dtype), w)
        report.append("%s %.3g (aten flash %.3g, rounding %.3g)" % (name, error, aten_error, rounding))
        assert error <= OVER_ATEN * max(aten_error, rounding) + 1e-6, "; ".join(report)
    print("sdpa grad errors:", "; ".join(report))
    return got


# Shapes of their own: the warning at the forward comes once per kind of call and process.

def test_deterministic_algorithms_give_the_same_gradients_bit_for_bit(flashjit_sdpa):
    """Under torch.use_deterministic_algorithms(True) (aten's switch for its flash backward's
    deterministic mode) flashjit's backward sums dq in a fixed order: repeated backwards agree bit
    for bit, on a shape where several K/V blocks add into each Q block."""
    g = torch.Generator(device="cuda").manual_seed(5)
    q, k, v = (torch.randn(2, 4, 1100, 64, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    dout = torch.randn_like(q)

    def grads():
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            F.scaled_dot_product_attention(*leaves, is_causal=True).backward(dout)
        return [t.grad for t in leaves]

    torch.use_deterministic_algorithms(True)
    try:
        first = grads()
        calls = sdpa.routed_calls(backward=True)
        for _ in range(3):
            for got, want in zip(grads(), first):
                assert torch.equal(got, want)
        assert sdpa.routed_calls(backward=True) == calls + 3, "the backward did not run through flashjit"
    finally:
        torch.use_deterministic_algorithms(False)


class Block(PreNormBlock):
    """Attention through F.scaled_dot_product_attention."""

    def __init__(self, dim=128, heads=2):
        super().__init__(dim, heads)

    def attend(self, qkv):
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # 3 x [batch, heads, seq, head_dim], the projection's memory
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)


def train(steps, with_flashjit, backend=None):
    backend = SDPBackend.FLASH_ATTENTION if backend is None else backend
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(32, 128), Block(), Block(), torch.nn.Linear(128, 32)).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    data = torch.Generator(device="cuda").manual_seed(1)
    losses = []
    if with_flashjit:
        activate()
    try:
        for _ in range(steps):
            # Sequences that repeat a random 8-token pattern: learnable only by attending back.
            tokens = torch.randint(0, 32, (16, 8), device="cuda", generator=data).repeat(1, 9)[:, :65]
            with sdpa_kernel(backend):
                logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    finally:
        if with_flashjit:
            restore()
    return torch.tensor(losses)


def test_tiny_training_through_sdpa_follows_aten_flash():
    """Same init and data, 200 steps: flashjit's curve against aten's flash kernels, the drift
    bounded by 3x that of a second correct implementation (SDPA's math backend), as in
    test_autograd_gpu.py's loss-curve test."""
    before = sdpa.routed_calls(backward=True)
    fj = train(200, True)
    assert sdpa.routed_calls(backward=True) - before == 2 * 200  # two blocks a step
    flash = train(200, False)
    ref = train(200, False, SDPBackend.MATH)
    window = lambda c: c.view(-1, 20).mean(1)  # noqa: E731
    drift_fj, drift_math = (window(fj) - window(flash)).abs(), (window(ref) - window(flash)).abs()
    print("windowed losses flashjit", window(fj).tolist(), "\naten flash", window(flash).tolist(),
          "\nmath", window(ref).tolist())
    # It learned: below the unigram entropy ln(32), reachable only by copying the pattern through
    # attention (a CPU dry run with SDPA's math went 3.46 -> 2.49 in 200 steps).
    assert fj[-20:].mean() < min(0.8 * fj[:20].mean(), math.log(32) - 0.5)
    assert torch.all(drift_fj <= 3 * drift_math.max() + 0.02 * window(flash)), (drift_fj, drift_math)


def test_torch_compile_training_step_through_sdpa(flashjit_sdpa):
    """Inductor calls aten's flash forward and backward as fallback kernels (flashjit's here) and
    asserts their outputs' strides against aten's meta functions."""
    torch.manual_seed(0)
    block = Block().cuda()
    x = torch.randn(2, 128, 128, device="cuda")
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        block(x).square().mean().backward()
    want = [p.grad.clone() for p in block.parameters()]
    block.zero_grad()
    before = sdpa.routed_calls(backward=True)
    torch._dynamo.reset()
    try:
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            torch.compile(lambda x: block(x).square().mean())(x).backward()
    finally:
        torch._dynamo.reset()
    assert sdpa.routed_calls(backward=True) > before
    for p, w in zip(block.parameters(), want):
        assert rel_l2(p.grad, w.double()) < 2e-2
