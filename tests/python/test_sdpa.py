"""flashjit.sdpa without a GPU: the registration with torch.nn.attention (nothing active on import,
activate and restore), the override's refusals, and the override's own code run end to end on CPU
tensors with the float64 reference standing in for the kernel (an Activation for the CPU dispatch
key), checked against PyTorch's math attention, aten's meta functions and autograd. The backward
route (flashjit.sdpa_backward) has its own file, test_sdpa_backward.py. The GPU runs are
tests/python/gpu/test_sdpa_transformers_gpu.py and test_sdpa_backward_gpu.py."""
import math
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from flashjit import FlashjitError, sdpa
from torch.nn import attention as nn_attention

FORWARD_OPS = sdpa.aten_ops(sdpa._FORWARD_OPS)
BACKWARD_OPS = sdpa.aten_ops(sdpa._BACKWARD_OPS)
SDPA_FILE = os.path.abspath(sdpa.__file__)


def kernel_site(op, key):
    """Where the kernel the dispatcher runs for aten::op under `key` was registered."""
    for line in torch._C._dispatch_dump_table("aten::" + op).splitlines():
        if line.startswith(key + ":"):
            return line.split("registered at ", 1)[1].rsplit(":", 1)[0].rsplit(" [", 1)[0]
    return None


def from_flashjit(op, key="CUDA"):
    site = kernel_site(op, key)
    return site is not None and os.path.abspath(site.rsplit(":", 1)[0]) == SDPA_FILE


def test_core_ops_exist_in_this_torch():
    assert {"_scaled_dot_product_flash_attention", "_flash_attention_forward"} <= set(FORWARD_OPS)
    assert set(BACKWARD_OPS) == set(sdpa._BACKWARD_OPS)


def test_import_registers_and_activates_nothing():
    code = ("import torch, flashjit; import torch.nn.attention as A; before = A.list_flash_attention_impls(); "
            "import flashjit.sdpa as S; "
            "print('FLASHJIT' in before, 'FLASHJIT' in A.list_flash_attention_impls(), A.current_flash_attention_impl(), "
            "S.routed_calls())")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout.split()
    assert out == ["False", "True", "None", "0"]
    assert not any(from_flashjit(op) for op in FORWARD_OPS + BACKWARD_OPS)


def test_activate_and_restore_round_trip():
    assert nn_attention.current_flash_attention_impl() is None
    aten_sites = {op: kernel_site(op, "CUDA") for op in FORWARD_OPS + BACKWARD_OPS}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the dispatcher warns that a kernel is overridden
        for _ in range(2):  # activating again restores the first activation before its own
            nn_attention.activate_flash_attention_impl(sdpa.IMPL_NAME)
            assert nn_attention.current_flash_attention_impl() == sdpa.IMPL_NAME
            assert all(from_flashjit(op) for op in FORWARD_OPS + BACKWARD_OPS)
    nn_attention.restore_flash_attention_impl()
    assert nn_attention.current_flash_attention_impl() is None
    assert {op: kernel_site(op, "CUDA") for op in FORWARD_OPS + BACKWARD_OPS} == aten_sites
    assert not sdpa._lingering_backward_routes


def fail_launch(*args, **kwargs):
    raise AssertionError("launched although the arguments should have been refused")


def production_kernels():
    forward, backward = sdpa._kernels("cuda", fail_launch, lambda *t: None)
    return forward


def fake(*shape, dtype=torch.bfloat16, device="cuda"):
    return torch.empty(*shape, dtype=dtype, device=device)


@pytest.mark.parametrize("call, needle", [
    (lambda f: f["_scaled_dot_product_flash_attention"](fake(1, 2, 8, 16, device="cpu"), fake(1, 2, 8, 16),
                                                        fake(1, 2, 8, 16)), "query is on cpu"),
    (lambda f: f["_scaled_dot_product_flash_attention"](fake(1, 2, 8, 16), fake(1, 2, 8, 16, device="cpu"),
                                                        fake(1, 2, 8, 16)), "key is on cpu"),
    (lambda f: f["_flash_attention_forward"](fake(20, 2, 16), fake(20, 2, 16), fake(20, 2, 16),
                                             fake(3, dtype=torch.int32, device="cpu"), fake(3, dtype=torch.int32),
                                             10, 10, 0.0, True, False), "cum_seq_q is on cpu"),
    (lambda f: f["_flash_attention_forward"](fake(2, 8, 2, 16), fake(2, 8, 2, 16), fake(2, 8, 2, 16), None, None, 8,
                                             8, 0.0, False, False, seqused_k=fake(2, dtype=torch.int32, device="cpu")),
     "seqused_k is on cpu"),
    (lambda f: f["_scaled_dot_product_flash_attention"](fake(2, 8, 16), fake(2, 8, 16), fake(2, 8, 16)),
     "query must be [batch, heads, seq, head_dim]"),
])
def test_override_refuses_bad_arguments_by_name(call, needle):
    with FakeTensorMode(allow_non_fake_inputs=True):
        with pytest.raises(FlashjitError) as e:
            call(production_kernels())
    assert needle in str(e.value)


@pytest.mark.parametrize("op", ["_scaled_dot_product_flash_attention", "_flash_attention_forward"])
@pytest.mark.parametrize("options, name", [({"dropout_p": 0.1}, "dropout_p=0.1"),
                                           ({"return_debug_mask": True}, "return_debug_mask"),
                                           ({"scale": 0.0}, "scale=0.0")])
def test_override_refuses_what_flashjit_cannot_do_by_name(op, options, name):
    kernels = production_kernels()
    with FakeTensorMode():
        q = fake(1, 8, 2, 16)
        if op == "_flash_attention_forward":
            args = dict(dropout_p=0.0, is_causal=False, return_debug_mask=False)
            args.update(options)
            scale = args.pop("scale", None)
            call = lambda: kernels[op](q, q, q, None, None, 8, 8, args["dropout_p"], args["is_causal"],  # noqa: E731
                                       args["return_debug_mask"], scale=scale)
        else:
            call = lambda: kernels[op](q, q, q, **options)  # noqa: E731
        with pytest.raises(NotImplementedError, match=name):
            call()


# ---- the override end to end on CPU, the reference standing in for the kernel --------------------

def sdpa_math(q, k, v, **kwargs):
    """PyTorch's own attention in float64, [batch, heads, seq, dim]."""
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), **kwargs)


def bshd_as_bhsd(*shape):
    b, h, s, d = shape
    return torch.randn(b, s, h, d).transpose(1, 2)  # SDPA's usual input: projections viewed per head


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads_kv, scale", [(4, None), (2, 0.3), (1, None)])
def test_sdpa_flash_op_against_torch_math(cpu_route, layout, causal, heads_kv, scale):
    make = torch.randn if layout == "bhsd" else bshd_as_bhsd
    q, k, v = make(2, 4, 9, 16), make(2, heads_kv, 9, 16), make(2, heads_kv, 9, 16)
    before = sdpa.routed_calls("_scaled_dot_product_flash_attention")
    result = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, scale=scale)
    assert sdpa.routed_calls("_scaled_dot_product_flash_attention") == before + 1
    out, lse = result[0], result[1]
    want = sdpa_math(q, k, v, is_causal=causal, scale=scale, enable_gqa=heads_kv != 4)
    torch.testing.assert_close(out.double(), want, atol=1e-5, rtol=1e-5)
    scores = torch.einsum("bhqd,bhkd->bhqk", q.double(), k.double().repeat_interleave(4 // heads_kv, 1))
    scores = scores * (scale or 1 / math.sqrt(16))
    if causal:
        scores = scores.masked_fill(torch.ones(9, 9, dtype=torch.bool).triu(1), -math.inf)
    torch.testing.assert_close(lse.double(), torch.logsumexp(scores, -1), atol=1e-5, rtol=1e-5)
    with FakeTensorMode(allow_non_fake_inputs=True):  # aten's meta function: what torch.compile expects
        meta = torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal, scale=scale)
    for got, expected in zip(result, meta):
        if isinstance(expected, torch.Tensor):
            assert (got.shape, got.stride(), got.dtype) == (expected.shape, expected.stride(), expected.dtype)
        else:
            assert got == expected


@pytest.mark.parametrize("causal, window", [(False, (3, 1)), (True, (4, None)), (True, (None, None)), (False, (0, 0))])
def test_flash_forward_windows_against_torch_math(cpu_route, bottom_right_mask, causal, window):
    q, k, v = torch.randn(2, 6, 4, 16), torch.randn(2, 11, 2, 16), torch.randn(2, 11, 2, 16)  # bottom right: Sk > Sq
    out, lse, rng, unused, debug = torch.ops.aten._flash_attention_forward(
        q, k, v, None, None, 6, 11, 0.0, causal, False, window_size_left=window[0], window_size_right=window[1])
    mask = bottom_right_mask(6, 11, causal, -1 if window[0] is None else window[0], -1 if window[1] is None else window[1])
    want = sdpa_math(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(out.double(), want.transpose(1, 2), atol=1e-5, rtol=1e-5)
    assert lse.shape == (2, 4, 6) and rng.dtype == torch.uint64 and rng.shape == (2,) and debug.numel() == 0


def test_flash_forward_varlen_and_seqused_k_against_torch_math(cpu_route, bottom_right_mask):
    lens_q, used_k = [3, 7, 5], [6, 4, 9]  # the keys: 6, 7 and 9 per sequence, seqused_k shortens the second
    cu_q = torch.tensor([0, 3, 10, 15], dtype=torch.int32)
    cu_k = torch.tensor([0, 6, 13, 22], dtype=torch.int32)
    q, k, v = torch.randn(15, 4, 16), torch.randn(22, 2, 16), torch.randn(22, 2, 16)
    before = sdpa.routed_calls()
    out, lse, *_ = torch.ops.aten._flash_attention_forward(q, k, v, cu_q, cu_k, 7, 9, 0.0, True, False, scale=0.2,
                                                           seqused_k=torch.tensor(used_k, dtype=torch.int32))
    assert sdpa.routed_calls() == before + 1
    assert lse.shape == (4, 15)
    for b in range(3):
        qs = q[cu_q[b]:cu_q[b + 1]].transpose(0, 1)
        ks, vs = (t[cu_k[b]:cu_k[b] + used_k[b]].transpose(0, 1) for t in (k, v))
        mask = bottom_right_mask(lens_q[b], used_k[b], True)
        want = sdpa_math(qs, ks, vs, attn_mask=mask, scale=0.2, enable_gqa=True)
        torch.testing.assert_close(out[cu_q[b]:cu_q[b + 1]].double(), want.transpose(0, 1), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape, dims", [((2, 9, 4, 32), (0, 1, 2, 3)), ((2, 9, 4, 32), (0, 2, 1, 3)),
                                         ((2, 9, 4, 32), (2, 0, 1, 3))])
def test_outputs_are_allocated_as_aten_meta_does(shape, dims):
    """The override allocates (without launching) what aten's meta function returns, for queries
    laid out in any dim order: torch.compile's generated code asserts these strides."""
    with FakeTensorMode():
        base = fake(*[shape[d] for d in dims])
        q = base.permute(*[dims.index(i) for i in range(4)])  # logical `shape`, memory in `dims` order
        meta_out, meta_lse, *_ = torch.ops.aten._flash_attention_forward(q, q, q, None, None, 9, 9, 0.0, False, False)
        out = sdpa.empty_with_layout_of(q, tuple(q.shape))
        lse = sdpa.flash_lse(q, None)
        assert (out.shape, out.stride()) == (meta_out.shape, meta_out.stride())
        assert (lse.shape, lse.stride(), lse.dtype) == (meta_lse.shape, meta_lse.stride(), meta_lse.dtype)
        varlen_q = fake(30, 4, 32)
        _, meta_lse, *_ = torch.ops.aten._flash_attention_forward(varlen_q, varlen_q, varlen_q, fake(3, dtype=torch.int32),
                                                                  fake(3, dtype=torch.int32), 20, 20, 0.0, True, False)
        assert sdpa.flash_lse(varlen_q, fake(3, dtype=torch.int32)).shape == meta_lse.shape == (4, 30)


def test_an_output_of_another_head_dim_keeps_the_query_dim_order():
    q = torch.empty(2, 9, 4, 64).transpose(1, 2)  # [2, 4, 9, 64], memory [2, 9, 4, 64]
    out = sdpa.empty_with_layout_of(q, (2, 4, 9, 32))
    assert out.shape == (2, 4, 9, 32) and out.stride() == (9 * 4 * 32, 32, 4 * 32, 1)


def test_in_place_flash_forward_writes_the_callers_output(cpu_route):
    if "_flash_attention_forward_no_dropout_inplace" not in FORWARD_OPS:
        pytest.skip("this PyTorch (%s) has no aten::_flash_attention_forward_no_dropout_inplace" % torch.__version__)
    q, k, v = torch.randn(2, 7, 4, 16), torch.randn(2, 7, 4, 16), torch.randn(2, 7, 4, 16)
    out = torch.full((2, 7, 4, 16), float("nan"))
    lse = torch.ops.aten._flash_attention_forward_no_dropout_inplace(out, q, k, v, None, None, 7, 7, 0.0, True, False)
    want = sdpa_math(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)
    torch.testing.assert_close(out.double(), want, atol=1e-5, rtol=1e-5)
    assert lse.shape == (2, 4, 7)
