"""The SDPA backend's backward route (flashjit.sdpa_backward) without a GPU: aten's autograd formulas
of the flash forwards, with "FLASHJIT" active for the CPU dispatch key, call aten's flash backward
ops, which land in flashjit's route; a float64 flash-style backward stands in for the engine's (it
reads the forward's output and LSE, so a wrong LSE convention or layout reaching it shows). Checked:
gradients against PyTorch's math attention in float64, aten's meta strides, the routed-call
accounting, grouped-query attention (enable_gqa) and sliding windows passed through to the
launcher, the refusals by argument name, the engine's messages prefixed, and the route kept past
restore. Numerics on the GPU: tests/python/gpu/test_sdpa_backward_gpu.py."""
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from flashjit import FlashjitError, sdpa, sdpa_backward

SDPA_BWD = "_scaled_dot_product_flash_attention_backward"
FLASH_BWD = "_flash_attention_backward"


def leaves(*tensors):
    return [t.detach().clone().requires_grad_() for t in tensors]


def math_grads(q, k, v, dout, **kwargs):
    """Gradients of PyTorch's own attention in float64, [batch, heads, seq, dim]."""
    q2, k2, v2 = leaves(q.double(), k.double(), v.double())
    F.scaled_dot_product_attention(q2, k2, v2, **kwargs).backward(dout.double())
    return q2.grad, k2.grad, v2.grad


def bshd_as_bhsd(b, h, s, d):
    return torch.randn(b, s, h, d).transpose(1, 2)  # SDPA's usual input: projections viewed per head


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("causal, scale", [(False, None), (True, None), (True, 0.3)])
def test_sdpa_flash_gradients_against_torch_math(cpu_route, layout, causal, scale):
    torch.manual_seed(0)
    make = torch.randn if layout == "bhsd" else bshd_as_bhsd
    q, k, v = leaves(make(2, 4, 9, 16), make(2, 4, 9, 16), make(2, 4, 9, 16))
    dout = torch.randn(2, 4, 9, 16)
    forwards, backwards = sdpa.routed_calls(), sdpa.routed_calls(backward=True)
    out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, scale=scale)[0]
    out.backward(dout)
    assert sdpa.routed_calls() == forwards + 1  # the backward is counted apart
    assert sdpa.routed_calls(backward=True) == backwards + 1
    for got, want in zip((q.grad, k.grad, v.grad), math_grads(q, k, v, dout, is_causal=causal, scale=scale)):
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)
    with FakeTensorMode(allow_non_fake_inputs=True):  # aten's meta: the strides torch.compile checks
        meta = torch.ops.aten._scaled_dot_product_flash_attention_backward(
            dout, q, k, v, out, torch.empty(2, 4, 9), None, None, 9, 9, 0.0, causal,
            torch.empty(2, dtype=torch.uint64), torch.empty((), dtype=torch.uint64), scale=scale)
    for got, expected in zip((q.grad, k.grad, v.grad), meta):
        assert (got.shape, got.stride(), got.dtype) == (expected.shape, expected.stride(), expected.dtype)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_backward_bottom_right_against_torch_math(cpu_route, bottom_right_mask, causal):
    """aten's _flash_attention_forward ([batch, seq, heads, dim]) aligns causal bottom right, as
    FlashAttention and flashjit do: the backward keeps it (len_k > len_q here)."""
    torch.manual_seed(1)
    q, k, v = leaves(torch.randn(2, 6, 3, 16), torch.randn(2, 11, 3, 16), torch.randn(2, 11, 3, 16))
    dout = torch.randn(2, 6, 3, 16)
    before = sdpa.routed_calls(FLASH_BWD)
    out = torch.ops.aten._flash_attention_forward(q, k, v, None, None, 6, 11, 0.0, causal, False)[0]
    out.backward(dout)
    assert sdpa.routed_calls(FLASH_BWD) == before + 1
    mask = bottom_right_mask(6, 11, True) if causal else None
    want = math_grads(*(t.transpose(1, 2) for t in (q, k, v, dout)), attn_mask=mask)
    for got, w in zip((q.grad, k.grad, v.grad), want):
        torch.testing.assert_close(got.double(), w.transpose(1, 2), atol=1e-5, rtol=1e-5)


def test_rows_that_see_no_key_get_zero_gradients(cpu_route):
    """Causal with len_q > len_k: the first rows see no key (LSE -inf from flashjit's forward),
    their dq is zero and they add nothing to dk, dv."""
    q, k, v = leaves(torch.randn(1, 7, 2, 16), torch.randn(1, 4, 2, 16), torch.randn(1, 4, 2, 16))
    out, lse, *_ = torch.ops.aten._flash_attention_forward(q, k, v, None, None, 7, 4, 0.0, True, False)
    assert torch.isneginf(lse[:, :, :3]).all()
    out.sum().backward()
    assert (q.grad[:, :3] == 0).all() and torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all()


def test_a_training_step_through_sdpa_math_of_the_override(cpu_route):
    """A projection trained one step through the flash op equals the same step through math."""
    torch.manual_seed(2)
    x = torch.randn(2, 10, 32, dtype=torch.float64)
    w0 = torch.randn(32, 96, dtype=torch.float64) / 6
    steps = {}
    for name in ("flashjit", "math"):
        w = w0.clone().requires_grad_()
        q, k, v = (x @ w).view(2, 10, 3, 2, 16).permute(2, 0, 3, 1, 4)  # 3 x [batch, heads, seq, dim]
        if name == "flashjit":
            out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)[0]
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.square().mean().backward()
        with torch.no_grad():
            w -= 0.5 * w.grad
        steps[name] = w.detach()
    torch.testing.assert_close(steps["flashjit"], steps["math"])


# ---- grouped-query attention and sliding windows: passed through to the launcher -------------------

def with_kv_heads_expanded(launch_backward):
    """launch_backward's contract with fewer key/value heads than query heads, on conftest's float64
    reference (which takes as many key/value heads as query heads): k and v expanded per query head
    (repeat_interleave, as PyTorch's enable_gqa), dk and dv summed back over each group. For the
    reference only: flashjit's engine takes the key/value heads as they are."""
    def launch(dout, q, k, v, out, lse, dq, dk, dv, **options):
        group = q.shape[2] // k.shape[2]
        k2, v2 = (t.repeat_interleave(group, dim=2) for t in (k, v))
        dk2, dv2 = torch.empty_like(k2), torch.empty_like(v2)
        launch_backward(dout, q, k2, v2, out, lse, dq, dk2, dv2, **options)
        dk.copy_(dk2.unflatten(2, (k.shape[2], group)).sum(3))
        dv.copy_(dv2.unflatten(2, (v.shape[2], group)).sum(3))
    return launch


@pytest.fixture
def gqa_route(sdpa_route, reference_launcher, reference_backward_launcher):
    """conftest's cpu_route with the backward reference taking GQA (with_kv_heads_expanded)."""
    with sdpa_route(reference_launcher, with_kv_heads_expanded(reference_backward_launcher)) as activation:
        yield activation


@pytest.mark.parametrize("kv_heads", [2, 1])
@pytest.mark.parametrize("causal", [False, True])
def test_gqa_gradients_against_torch_math(gqa_route, kv_heads, causal):
    """enable_gqa's call: 4 query heads on 2 (GQA) or 1 (MQA) key/value heads; dk, dv come back per
    key/value head, in aten's meta layout."""
    torch.manual_seed(3)
    q, k, v = leaves(torch.randn(2, 4, 9, 16), bshd_as_bhsd(2, kv_heads, 9, 16), bshd_as_bhsd(2, kv_heads, 9, 16))
    dout = torch.randn(2, 4, 9, 16)
    before = sdpa.routed_calls(SDPA_BWD)
    out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal)[0]
    out.backward(dout)
    assert sdpa.routed_calls(SDPA_BWD) == before + 1
    assert k.grad.shape == v.grad.shape == (2, kv_heads, 9, 16)
    for got, want in zip((q.grad, k.grad, v.grad), math_grads(q, k, v, dout, is_causal=causal, enable_gqa=True)):
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)
    with FakeTensorMode(allow_non_fake_inputs=True):
        meta = torch.ops.aten._scaled_dot_product_flash_attention_backward(
            dout, q, k, v, out, torch.empty(2, 4, 9), None, None, 9, 9, 0.0, causal,
            torch.empty(2, dtype=torch.uint64), torch.empty((), dtype=torch.uint64))
    for got, expected in zip((q.grad, k.grad, v.grad), meta):
        assert (got.shape, got.stride(), got.dtype) == (expected.shape, expected.stride(), expected.dtype)


@pytest.mark.parametrize("causal, window", [(False, (3, 1)), (True, (4, None)), (False, (0, 0))])
@pytest.mark.parametrize("kv_heads", [3, 1])
def test_a_window_reaches_the_backward_against_torch_math(gqa_route, bottom_right_mask, causal, window, kv_heads):
    """_flash_attention_forward's window_size_left/right (bottom right, len_k > len_q), alone or
    with causal, with as many key/value heads as query heads or one (MQA): the backward takes it."""
    torch.manual_seed(4)
    q, k, v = leaves(torch.randn(2, 6, 3, 16), torch.randn(2, 11, kv_heads, 16), torch.randn(2, 11, kv_heads, 16))
    dout = torch.randn(2, 6, 3, 16)
    before = sdpa.routed_calls(FLASH_BWD)
    out = torch.ops.aten._flash_attention_forward(q, k, v, None, None, 6, 11, 0.0, causal, False,
                                                  window_size_left=window[0], window_size_right=window[1])[0]
    out.backward(dout)
    assert sdpa.routed_calls(FLASH_BWD) == before + 1
    left, right = (-1 if w is None else w for w in window)
    mask = bottom_right_mask(6, 11, causal, left, right)
    want = math_grads(*(t.transpose(1, 2) for t in (q, k, v, dout)), attn_mask=mask, enable_gqa=True)
    for got, w in zip((q.grad, k.grad, v.grad), want):
        torch.testing.assert_close(got.double(), w.transpose(1, 2), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("op", [SDPA_BWD, FLASH_BWD])
def test_gqa_and_windows_are_passed_to_the_launcher(reference_launcher, op):
    """What the engine now rules on reaches it as given: the key/value heads unexpanded, dk and dv
    allocated per key/value head, the window in flashjit's convention."""
    seen = []

    def record(dout, q, k, v, out, lse, dq, dk, dv, **options):
        seen.append((tuple(k.shape), tuple(dk.shape), tuple(dv.shape), options["causal"], options["window_left"],
                     options["window_right"]))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        activation = sdpa.Activation("cpu", reference_launcher, record)
    try:
        rng = (torch.zeros(2, dtype=torch.uint64), torch.zeros((), dtype=torch.uint64))
        if op == SDPA_BWD:  # [batch, heads, seq, dim]: 4 query heads on 1 key/value head, causal
            t, kv = torch.randn(1, 4, 8, 16), torch.randn(1, 1, 8, 16)
            dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_backward(
                t, t, kv, kv, t, torch.zeros(1, 4, 8), None, None, 8, 8, 0.0, True, *rng)
            assert seen == [((1, 8, 1, 16), (1, 8, 1, 16), (1, 8, 1, 16), True, -1, 0)]
        else:  # [batch, seq, heads, dim]: 4 query heads on 2 key/value heads, a window of (3, 1)
            t, kv = torch.randn(1, 8, 4, 16), torch.randn(1, 8, 2, 16)
            dq, dk, dv = torch.ops.aten._flash_attention_backward(
                t, t, kv, kv, t, torch.zeros(1, 4, 8), None, None, 8, 8, 0.0, False, *rng, window_size_left=3,
                window_size_right=1)
            assert seen == [((1, 8, 2, 16), (1, 8, 2, 16), (1, 8, 2, 16), False, 3, 1)]
        assert dq.shape == t.shape and dk.shape == dv.shape == kv.shape
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            activation.remove()


# ---- refusals: by aten's argument name, before the engine; the engine's own, prefixed -----------

def sdpa_backward_call(dropout_p=0.0, kv_heads=2, lse=None, cum_seq_q=None, dtype=torch.float32):
    t = torch.randn(1, 2, 8, 16, dtype=dtype)
    kv = torch.randn(1, kv_heads, 8, 16, dtype=dtype)
    lse = torch.zeros(1, 2, 8) if lse is None else lse
    return torch.ops.aten._scaled_dot_product_flash_attention_backward(
        t, t, kv, kv, t, lse, cum_seq_q, None, 8, 8, dropout_p, False,
        torch.zeros(2, dtype=torch.uint64), torch.zeros((), dtype=torch.uint64))


@pytest.mark.parametrize("call, error, needle", [
    (lambda: sdpa_backward_call(dropout_p=0.1), NotImplementedError, "dropout_p=0.1"),
    (lambda: sdpa_backward_call(lse=torch.zeros(1, 2, 128)), FlashjitError, r"logsumexp must be .*\[1, 2, 8\]"),
    (lambda: sdpa_backward_call(lse=torch.zeros(1, 2, 8, dtype=torch.float64)), FlashjitError, "logsumexp must be"),
    (lambda: sdpa_backward_call(cum_seq_q=torch.tensor([0, 8], dtype=torch.int32)), NotImplementedError,
     "cum_seq_q is given"),
])
def test_unsupported_backward_calls_are_refused_by_argument(cpu_route, call, error, needle):
    before = sdpa.routed_calls(backward=True)
    with pytest.raises(error, match=needle):
        call()
    assert sdpa.routed_calls(backward=True) == before  # refused calls are not counted


def test_causal_is_no_window(cpu_route):
    """aten passes window_size_right=0 style arguments with causal; that is not a sliding window."""
    q, k, v = leaves(*(torch.randn(1, 8, 2, 16) for _ in range(3)))
    torch.ops.aten._flash_attention_forward(q, k, v, None, None, 8, 8, 0.0, True, False, window_size_left=-1,
                                            window_size_right=0)[0].sum().backward()
    assert q.grad is not None


def test_varlen_is_refused_at_backward_by_name(cpu_route):
    cu = torch.tensor([0, 3, 10], dtype=torch.int32)
    q, k, v = leaves(*(torch.randn(10, 2, 16) for _ in range(3)))
    out = torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, 7, 7, 0.0, True, False)[0]
    with pytest.raises(NotImplementedError, match="_flash_attention_backward through flashjit: cum_seq_q is given"):
        out.sum().backward()


def engine_refusal(*args, **kwargs):
    raise FlashjitError("paged: the backward does not read page pools (no training through a KV cache)")


def test_the_engines_refusal_is_prefixed_with_the_aten_op(reference_launcher):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        activation = sdpa.Activation("cpu", reference_launcher, engine_refusal)
    try:
        with pytest.raises(FlashjitError, match=r"^%s through flashjit: paged: the backward does not read page pools"
                           % SDPA_BWD):
            sdpa_backward_call()
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            activation.remove()


@pytest.mark.parametrize("warn_only, expected", [(False, True), (True, False)])
def test_deterministic_algorithms_ask_for_the_deterministic_backward(reference_launcher, warn_only, expected):
    """As aten's flash backward: torch.use_deterministic_algorithms(True) asks for the deterministic
    mode (the engine refuses it by name until it exists), warn_only does not."""
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        activation = sdpa.Activation("cpu", reference_launcher, lambda *a, **kw: seen.append(kw["deterministic"]))
    was = torch.are_deterministic_algorithms_enabled()
    was_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    try:
        torch.use_deterministic_algorithms(True, warn_only=warn_only)
        sdpa_backward_call()
    finally:
        torch.use_deterministic_algorithms(was, warn_only=was_warn_only)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            activation.remove()
    assert seen == [expected]


def test_a_recorded_forward_asks_whether_its_backward_will_be_refused(reference_launcher,
                                                                     reference_backward_launcher):
    """A forward autograd records hands flashjit's arguments to the warning (on CUDA: the engine
    plans the backward and warns with its message, as flashjit's own functions); no_grad does not."""
    seen = []

    def warn(q, k, v, **options):
        seen.append((tuple(q.shape), tuple(k.shape), options["causal"], options["window_right"],
                     options["softmax_scale"]))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        activation = sdpa.Activation("cpu", reference_launcher, reference_backward_launcher, warn)
    try:
        q, k, v = leaves(torch.randn(1, 4, 8, 16), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16))
        torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True, scale=0.3)
        assert seen == [((1, 8, 4, 16), (1, 8, 2, 16), True, 0, 0.3)]  # the [batch, seq, heads, dim] views
        with torch.no_grad():
            torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)
        torch.ops.aten._flash_attention_forward(q.detach(), k.detach(), v.detach(), None, None, 8, 8, 0.0, False,
                                                False)
        assert len(seen) == 1
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            activation.remove()
    while sdpa._lingering_backward_routes:
        sdpa._lingering_backward_routes.pop()._destroy()


def test_production_kernels_check_devices_by_name():
    _, backward = sdpa._kernels("cuda", None, lambda *t: None, None)
    t = torch.empty(1, 2, 8, 64)
    with pytest.raises(FlashjitError, match="grad_out is on cpu"):
        backward[SDPA_BWD](t, t, t, t, t, torch.empty(1, 2, 8), None, None, 8, 8, 0.0, False, t, t)


def test_backward_ops_are_the_ones_aten_has():
    assert set(sdpa.aten_ops(sdpa_backward.BACKWARD_OPS)) == {SDPA_BWD, FLASH_BWD}


# ---- the route past restore ------------------------------------------------------------------

def test_backward_route_outlives_restore_after_a_recorded_forward(cpu_route):
    q, k, v = leaves(*(torch.randn(1, 2, 8, 16) for _ in range(3)))
    out = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, True)[0]
    with pytest.warns(UserWarning, match="stays routed to flashjit's backward"):
        cpu_route.remove()
    out.sum().backward()  # the graph recorded through flashjit still backpropagates, through flashjit
    for got, want in zip((q.grad, k.grad, v.grad), math_grads(q, k, v, torch.ones(1, 2, 8, 16), is_causal=True)):
        torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)
    with pytest.raises(NotImplementedError, match="Could not run"):  # the forward is aten's again (none on CPU)
        torch.ops.aten._scaled_dot_product_flash_attention(q, k, v)


def test_a_new_activation_takes_over_a_route_left_past_restore_and_release_drops_it(reference_launcher,
                                                                                  reference_backward_launcher):
    """Activate, record, restore (the route stays), activate again (torch takes one override per op
    and key: the new route replaces the old), restore again; release_backward_route() then gives
    aten's backward back. Once failed with 'already a kernel registered ... for CPU dispatch key'."""
    def activate():
        return sdpa.Activation("cpu", launch=reference_launcher, launch_backward=reference_backward_launcher,
                               warn_backward=lambda *a, **k: None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            route = activate()
            q = torch.randn(1, 2, 8, 16, requires_grad=True)
            out = torch.ops.aten._scaled_dot_product_flash_attention(q, q, q, 0.0, True)[0]
            route.remove()
            assert len(sdpa._lingering_backward_routes) == 1
        out.sum().backward()  # the graph of the second activation, through the route it left
        assert q.grad is not None
        assert sdpa.release_backward_route("cuda") == 0  # another device type's: none
        assert sdpa.release_backward_route() == 1
    assert not sdpa._lingering_backward_routes
    with pytest.raises(NotImplementedError, match="Could not run"):  # aten's own: no CPU kernel
        sdpa_backward_call()


def test_backward_route_goes_with_restore_when_nothing_was_recorded(cpu_route):
    q = torch.randn(1, 2, 8, 16, requires_grad=True)
    with torch.no_grad():
        torch.ops.aten._scaled_dot_product_flash_attention(q, q, q, 0.0, True)
    cpu_route.remove()
    assert not sdpa._lingering_backward_routes
    with pytest.raises(NotImplementedError, match="Could not run"):  # aten's own: no CPU kernel
        sdpa_backward_call()


# ---- the production backward launcher (ops.launch_backward) with the library call recorded ----------

def test_the_route_packs_aten_layouts_into_the_backward_call(monkeypatch, reference_launcher):
    """The route with flashjit's real launcher down to the C struct (the engine call recorded, no
    GPU): SDPA's [batch, heads, seq, dim] tensors reach it as [batch, seq, heads, dim] views of the
    same memory, the gradients written are the ones returned (aten's empty_like layout), and the
    LSE is the forward's tensor itself."""
    from flashjit import _library, ops
    seen = []

    class Stream:
        cuda_stream = 99

    def record(lib, args, stream, device):
        f = args.forward.contents
        view = lambda c: (c.data, list(c.shape), list(c.stride))  # noqa: E731
        seen.append(dict(q=view(f.q), o=view(f.o), lse=f.lse.contents.data, mask=f.mask, scale=f.softmax_scale,
                         dout=view(args.dout), dq=view(args.dq), dk=view(args.dk), dv=view(args.dv),
                         flags=args.flags))
    monkeypatch.setattr(ops, "_check_inputs", lambda *args: None)
    monkeypatch.setattr(ops, "_run_backward", record)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    monkeypatch.setattr(_library, "get", lambda: None)
    _, backward = sdpa._kernels("cpu", reference_launcher, lambda *t: False, ops.launch_backward)
    q = torch.randn(2, 9, 4, 64, dtype=torch.float16).transpose(1, 2)  # [2, 4, 9, 64], memory [2, 9, 4, 64]
    k, v, out = (torch.randn(2, 4, 9, 64, dtype=torch.float16) for _ in range(3))
    dout = torch.randn(2, 4, 9, 64, dtype=torch.float16)
    lse = torch.randn(2, 4, 9)
    dq, dk, dv = backward[SDPA_BWD](dout, q, k, v, out, lse, None, None, 9, 9, 0.0, True, torch.empty(2),
                                    torch.empty(()), scale=0.125)
    assert dq.stride() == torch.empty_like(q).stride() == q.stride() and dk.stride() == k.stride()
    (s,) = seen
    bshd = lambda t: (t.data_ptr(), [t.shape[0], t.shape[2], t.shape[1], t.shape[3]],  # noqa: E731
                      [t.stride(0), t.stride(2), t.stride(1), t.stride(3)])
    assert s["q"] == bshd(q) and s["o"] == bshd(out) and s["dout"] == bshd(dout)
    assert (s["dq"], s["dk"], s["dv"]) == (bshd(dq), bshd(dk), bshd(dv))
    assert s["lse"] == lse.data_ptr() and s["mask"] == 1 and s["scale"] == 0.125 and s["flags"] == 0
    assert sdpa.routed_calls(SDPA_BWD) >= 1


def test_warn_if_refused_passes_the_engine_check_its_full_call(monkeypatch):
    """The forward's refusal check runs only for CUDA tensors, so a CPU run never reaches it: here a
    tensor that says it is on CUDA stands in, and the check must receive flashjit's whole argument
    list and the deterministic switch (a call that dropped one broke every SDPA training step on
    the GPU)."""
    seen = []
    monkeypatch.setattr(sdpa_backward.ops, "_warn_if_backward_unsupported",
                        lambda args, deterministic: seen.append((args, deterministic)))

    class OnCuda(torch.Tensor):
        @property
        def is_cuda(self):
            return True

    q = torch.randn(1, 8, 2, 16).as_subclass(OnCuda)
    sdpa_backward.warn_if_refused(q, q, q, causal=True)
    assert len(seen) == 1
    args, deterministic = seen[0]
    assert len(args) == 18 and args[12] is True and deterministic is False
