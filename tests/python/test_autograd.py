"""Gradients through flashjit without a GPU: the backward's C struct against the header field by
field, the operators' registration, what the engine's backward plans and refuses (for a named
arch, no GPU: windows, softcap, ALiBi, sinks, GQA, varlen, head dims 1 to 256 and Dqk != Dv plan;
fp32 and paged caches are refused), and the autograd wiring end to end on CPU tensors, where the float64
reference stands in for the forward and backward kernels (eager and torch.compile). Numerics on the
GPU: tests/python/gpu."""
import ctypes
import os
import re

import pytest
import torch

import flashjit
from flashjit import FlashjitError, _abi, _library, ops

HEADER = os.path.join(os.path.dirname(__file__), "..", "..", "engine", "include", "flashjit", "flashjit.h")
_C_TYPES = {"uint32_t": ctypes.c_uint32, "uint64_t": ctypes.c_uint64, "int32_t": ctypes.c_int32,
            "float": ctypes.c_float, "flashjit_tensor": _abi.Tensor}


def _header_fields(struct):
    """(name, ctypes type) of each field of `struct` as flashjit.h declares it."""
    text = open(HEADER).read()
    body = re.search(r"typedef struct %s \{(.*?)\} %s;" % (struct, struct), text, re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    fields = []
    for decl in body.split(";"):
        decl = " ".join(decl.split())
        if not decl:
            continue
        m = re.match(r"(const )?(\w+)\s*(\*?)\s*(.*)", decl)
        _, ctype, pointer, names = m.groups()
        for name in names.split(","):
            name = name.strip().lstrip("*")
            if pointer:
                t = ctypes.POINTER(_abi.ArgsV2) if ctype == "flashjit_attention_args_v2" else ctypes.c_void_p
            else:
                t = _C_TYPES[ctype]
            fields.append((name, t))
    return fields


def test_backward_struct_matches_the_header_field_by_field():
    header = _header_fields("flashjit_backward_args_v1")
    binding = _abi.BackwardArgsV1._fields_
    assert [n for n, _ in binding] == [n for n, _ in header]
    for (name, mine), (_, theirs) in zip(binding, header):
        assert ctypes.sizeof(mine) == ctypes.sizeof(theirs), name
        if theirs is ctypes.c_void_p:  # float* and void*
            assert mine is ctypes.c_void_p, name
        else:
            assert mine is theirs or (issubclass(mine, ctypes._Pointer) and mine._type_ is _abi.ArgsV2), name
    lib = _library.get()
    assert lib.flashjit_backward_args_v1_size() == ctypes.sizeof(_abi.BackwardArgsV1)


def test_the_forward_struct_matches_the_header_too():
    names = [n for n, _ in _header_fields("flashjit_attention_args_v2")]
    assert names[:2] == ["struct_size", "abi_version"]  # the parser reads the precedent's struct
    assert names[-3:] == ["workspace", "workspace_bytes", "kv_starts"]
    assert names == [n for n, _ in _abi.ArgsV2._fields_]  # the binding's fields, in the header's order


def test_backward_args_carry_every_field():
    q, o = torch.empty(2, 64, 8, 128)[:, :, :4], torch.empty(2, 64, 4, 128)
    lse = torch.empty(2, 4, 64)
    fwd = _abi.make_args_v2(q, q, q, o, causal=True, lse=lse)
    dout, dq = torch.empty(2, 64, 4, 128), torch.empty(2, 64, 4, 128)
    b = _abi.make_backward_args_v1(fwd, dout, dq, q, o, deterministic=True)
    assert (b.struct_size, b.abi_version, b.flags, b.reserved, b.dsinks, b.workspace, b.workspace_bytes) == \
        (ctypes.sizeof(_abi.BackwardArgsV1), _abi.ABI_VERSION, _abi.DETERMINISTIC, 0, None, None, 0)
    assert ctypes.addressof(b.forward.contents) == ctypes.addressof(fwd)
    assert b.forward.contents.lse.contents.data == lse.data_ptr()
    for field, t in (("dout", dout), ("dq", dq), ("dk", q), ("dv", o)):
        c = getattr(b, field)
        assert (c.data, list(c.shape), list(c.stride), c.dtype) == (t.data_ptr(), list(t.shape), list(t.stride()), 2)
    assert _abi.make_backward_args_v1(fwd, dout, dq, q, o).flags == 0


def test_the_operators_register():
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("flashjit::attention", "Autograd")
    assert torch._C._dispatch_has_kernel_for_dispatch_key("flashjit::attention_train", "Autograd")
    assert torch._C._dispatch_has_kernel_for_dispatch_key("flashjit::attention_backward", "CUDA")
    with torch._subclasses.fake_tensor.FakeTensorMode():
        q = torch.empty(2, 33, 4, 64, dtype=torch.float16, device="cuda")
        dq, dk, dv, dsinks = torch.ops.flashjit.attention_backward(q, q, q, q, q, torch.empty(2, 4, 33, device="cuda"),
                                                                   None, None, 0, 0, None, None, None, None, 0.0, True,
                                                                   -1, 0, 0.0, False)
        assert dq.shape == dk.shape == dv.shape == q.shape and dq.dtype == torch.float16
        assert dsinks.shape == (0,)
        sinks = torch.empty(4, device="cuda")
        *_, dsinks = torch.ops.flashjit.attention_backward(q, q, q, q, q, torch.empty(2, 4, 33, device="cuda"), None,
                                                           None, 0, 0, None, None, None, sinks, 0.0, True, -1, 0, 0.0,
                                                           False)
        assert dsinks.shape == (4,) and dsinks.dtype == torch.float32


def meta(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def test_supported_backward_plans_without_a_gpu():
    name = flashjit.precompile(meta(2, 77, 4, 64), meta(2, 77, 4, 64), meta(2, 77, 4, 64), causal=True, arch="sm_90a",
                               backward=True)
    assert name.startswith("bwd_sm90-bf16-dqk64-dv64-causal")  # Hopper's wgmma backward serves it


def backward_precompile(kv_heads=4, d=64, dv=None, dtype=torch.bfloat16, **kwargs):
    """precompile(backward=True) for sm_80 without a GPU: 4 query heads, `kv_heads` key/value heads,
    head dim `d` for q and k and `dv` (default `d`) for v."""
    dv = d if dv is None else dv
    return flashjit.precompile(meta(2, 77, 4, d, dtype=dtype), meta(2, 77, kv_heads, d, dtype=dtype),
                               meta(2, 77, kv_heads, dv, dtype=dtype), arch="sm_80", backward=True, **kwargs)


@pytest.mark.parametrize("kwargs, tag", [
    (dict(window_size=(8, 0)), "-window-"),
    (dict(softcap=2.0), "-softcap-"),
    (dict(alibi_slopes=meta(4, dtype=torch.float32)), "-alibi-"),
    (dict(kv_heads=2), "-gqa-"),  # GQA: dk, dv per key/value head
    (dict(kv_heads=1, causal=True, window_size=(8, 0)), "-causal-gqa-window-"),  # MQA
    (dict(d=96), "-dqk96-dv96-"),
    (dict(d=160), "-dqk160-dv160-"),  # head dims past 128, as the forward
    (dict(d=256, causal=True), "-dqk256-dv256-causal-"),
    (dict(d=192, dv=128), "-dqk192-dv128-"),  # Dqk != Dv (MLA)
])
def test_the_backwards_semantics_plan_for_sm80(kwargs, tag):
    name = backward_precompile(**kwargs)
    assert name.startswith("bwd_sm80-bf16-") and tag in name, name


@pytest.mark.parametrize("d, tag", [(64, "-dqk64-dv64-vec4-m64n64w8q2"), (256, "-dqk256-dv256-vec4-m32n32w4q1")])
def test_fp32_backward_compiles_for_sm80(d, tag):
    # fp32 trains too: exact fp32 (3xTF32 products), fp32 tiles (sm_80's 163 KB: 32 x 32 at 256).
    name = backward_precompile(dtype=torch.float32, d=d)
    assert name.startswith("bwd_sm80-f32-") and tag in name, name


def test_varlen_backward_compiles_and_paged_is_refused_by_name():
    # Ragged batches train (the variant's name says varlen); a page pool does not.
    cu = meta(3, dtype=torch.int32)
    name = flashjit.precompile(meta(150, 4, 64), meta(150, 4, 64), meta(150, 4, 64), cu_seqlens_q=cu, cu_seqlens_k=cu,
                               max_seqlen_q=100, max_seqlen_k=100, arch="sm_80", backward=True)
    assert name.startswith("bwd_sm80-") and "-varlen-" in name, name
    with pytest.raises(FlashjitError, match="paged: the backward does not read page pools"):
        flashjit.precompile(meta(2, 8, 4, 64), meta(10, 16, 4, 64), meta(10, 16, 4, 64), kv_lens=meta(2, dtype=torch.int32),
                            block_table=meta(2, 5, dtype=torch.int32), arch="sm_80", backward=True)


# ---- The wiring on CPU tensors: the float64 reference as both kernels ----

def reference_backward(reference_attention, dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                       max_seqlen_k, kv_lens, block_table, alibi_slopes, sinks, softmax_scale, causal, window_left,
                       window_right, softcap, deterministic):
    with torch.enable_grad():
        leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
        o = _reference_out(reference_attention, *leaves, causal=causal, softmax_scale=softmax_scale)
        grads = torch.autograd.grad(o, leaves, dout.double())
    return tuple(g.to(t.dtype) for g, t in zip(grads, (q, k, v))) + (_dsinks(dout, out, lse, sinks),)


def _dsinks(dout, out, lse, sinks):
    """dL/dsinks[h] = -sum over rows of exp(sink[h] - LSE) * rowsum(dO * O), in float64 (dense
    [B, S, H, D] layouts), or empty without sinks."""
    if sinks is None:
        return torch.empty(0)
    d = (dout.double() * out.double()).sum(-1).transpose(1, 2)  # [B, H, S]
    return (-(sinks.double()[None, :, None] - lse.double()).exp() * d).sum((0, 2)).float()


def _reference_out(reference, q, k, v, causal, softmax_scale):
    """The reference's output in float64 with its graph (reference_attention casts to q's dtype)."""
    return reference(q, k, v, causal=causal, softmax_scale=softmax_scale)[0]


@pytest.fixture
def cpu_fakes(monkeypatch):
    """The fake kernels check that tensors are on CUDA: let them trace CPU tensors here."""
    monkeypatch.setattr(ops, "_check_inputs", lambda *args: None)


@pytest.fixture
def cpu_kernels(cpu_reference_kernel, reference):
    # The reference comes as conftest's fixture: CI imports test files from outside the checkout
    # (--import-mode=importlib), where conftest is not an importable module.
    lib = torch.library.Library("flashjit", "IMPL", "CPU")
    lib.impl("attention_backward", lambda *args: reference_backward(reference, *args), "CPU")
    yield
    lib._destroy()


def _math(q, k, v, causal):
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) / q.shape[-1] ** 0.5
    if causal:
        lq, lk = q.shape[1], k.shape[1]
        s = s.masked_fill(torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq).logical_not(), float("-inf"))
    return torch.einsum("bhqk,bkhd->bqhd", s.softmax(-1), v)


@pytest.mark.parametrize("causal", [False, True])
def test_gradients_flow_through_flash_attn_func(cpu_kernels, causal):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 13, 3, 16, dtype=torch.float64, requires_grad=True) for _ in range(3))
    out = flashjit.flash_attn_func(q, k, v, causal=causal)
    out.square().sum().backward()
    want = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    _math(*want, causal).square().sum().backward()
    for got, ref in zip((q, k, v), want):
        torch.testing.assert_close(got.grad, ref.grad)


def test_self_attention_on_one_tensor_and_the_lse(cpu_kernels):
    x = torch.randn(1, 9, 2, 16, dtype=torch.float64, requires_grad=True)
    out, lse, _ = flashjit.flash_attn_func(x, x, x, return_attn_probs=True)
    assert lse.shape == (1, 2, 9) and not lse.requires_grad  # the LSE is read, not differentiated
    out.sum().backward()
    y = x.detach().clone().requires_grad_()
    _math(y, y, y, False).sum().backward()
    torch.testing.assert_close(x.grad, y.grad)


@pytest.mark.parametrize("how", ["flash_attn_func", "flash_attn_varlen_func", "use_deterministic_algorithms", "off"])
def test_deterministic_reaches_the_backward_operator(cpu_reference_kernel, how):
    """FlashAttention's deterministic=True, per call, or torch.use_deterministic_algorithms(True),
    as aten's flash backward reads it: attention_backward is asked for the fixed dQ order."""
    asked = []

    def backward(dout, q, k, v, *args):  # only the flag matters here
        asked.append(args[-1])
        return torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v), torch.empty(0)

    lib = torch.library.Library("flashjit", "IMPL", "CPU")
    lib.impl("attention_backward", backward, "CPU")
    was = torch.are_deterministic_algorithms_enabled()
    try:
        torch.use_deterministic_algorithms(how == "use_deterministic_algorithms")
        q = torch.randn(1, 7, 2, 16, dtype=torch.float64, requires_grad=True)
        if how == "flash_attn_varlen_func":
            cu = torch.tensor([0, 7], dtype=torch.int32)
            out = flashjit.flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, 7, 7, deterministic=True)
        else:
            out = flashjit.flash_attn_func(q, q, q, deterministic=how == "flash_attn_func")
        out.sum().backward()
    finally:
        torch.use_deterministic_algorithms(was)
        lib._destroy()
    assert asked == [how != "off"]


def test_no_grad_takes_the_operator_without_autograd(cpu_kernels):
    q = torch.randn(1, 8, 2, 16, requires_grad=True)
    with torch.no_grad():
        assert not flashjit.flash_attn_func(q, q, q).requires_grad
    d = q.detach()
    out, lse = ops.call(d, d, d, None, None, 0, 0, None, None, None, None, 0.0, False, -1, -1, 0.0, False,
                        False)
    assert lse is None and not out.requires_grad  # the dense operator: no LSE


def test_sinks_requiring_grad_get_the_kernels_gradient(cpu_kernels):
    # The backward's fourth output lands in sinks.grad (its values: tests/python/gpu, against float64).
    q = torch.randn(1, 8, 2, 16, dtype=torch.float64, requires_grad=True)
    sinks = torch.tensor([0.5, -1.0], dtype=torch.float32, requires_grad=True)
    out, lse = ops.call(q, q, q, None, None, 0, 0, None, None, None, sinks, 0.0, False, -1, -1, 0.0, True, False)
    dout = torch.randn_like(out)
    out.backward(dout)
    assert sinks.grad.dtype == torch.float32 and sinks.grad.shape == (2,)
    torch.testing.assert_close(sinks.grad, _dsinks(dout, out.detach(), lse, sinks.detach()))
    alibi = torch.ones(2, dtype=torch.float32, requires_grad=True)
    out = ops.call(q, q, q, None, None, 0, 0, None, None, alibi, None, 0.0, False, -1, -1, 0.0, False, False)[0]
    with pytest.raises(NotImplementedError, match="alibi_slopes requires grad"):
        out.sum().backward()


def test_torch_compile_fullgraph_training_step(cpu_kernels, cpu_fakes):
    """dynamo traces attention_train and AOTAutograd its formula into attention_backward."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append([str(n.target) for n in gm.graph.nodes])
        return torch._dynamo.backends.debugging.aot_eager(gm, example_inputs)

    torch.manual_seed(0)
    w = torch.randn(16, 48, dtype=torch.float64, requires_grad=True)
    x = torch.randn(2, 11, 16, dtype=torch.float64)

    def step(w, x):
        q, k, v = (x @ w).view(2, 11, 3, 2, 8).unbind(2)
        return flashjit.flash_attn_func(q, k, v, causal=True).square().sum()

    torch._dynamo.reset()
    try:
        loss = torch.compile(step, backend=backend, fullgraph=True)(w, x)
        loss.backward()
    finally:
        torch._dynamo.reset()
    assert any("flashjit.attention_train" in str(t) for t in graphs[0])
    w2 = w.detach().clone().requires_grad_()
    q, k, v = (x @ w2).view(2, 11, 3, 2, 8).unbind(2)
    _math(q, k, v, True).square().sum().backward()
    torch.testing.assert_close(w.grad, w2.grad)


def test_compiled_aot_graph_calls_the_backward_operator(cpu_kernels, cpu_fakes):
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd
    seen = []

    def compiler(gm, example_inputs):
        seen.append([str(n.target) for n in gm.graph.nodes])
        return make_boxed_func(gm.forward)

    q = torch.randn(1, 7, 2, 16, dtype=torch.float64, requires_grad=True)
    torch._dynamo.reset()
    try:
        torch.compile(lambda q: flashjit.flash_attn_func(q, q, q).sum(),
                      backend=aot_autograd(fw_compiler=compiler, bw_compiler=compiler), fullgraph=True)(q).backward()
    finally:
        torch._dynamo.reset()
    assert any("flashjit.attention_train" in t for t in seen[0])
    assert any("flashjit.attention_backward" in t for t in seen[1])
    assert q.grad is not None


# ---- attention_backward's CUDA kernel on CPU tensors, with the library call recorded ----

@pytest.mark.parametrize("varlen", [False, True])
def test_the_backward_kernel_packs_the_forward_and_the_gradients(monkeypatch, varlen):
    seen = []

    class Stream:
        cuda_stream = 1234

    def record(lib, args, stream, device):
        f = args.forward.contents
        seen.append(dict(stream=stream, flags=args.flags, workspace=args.workspace, mask=f.mask,
                         scale=f.softmax_scale, lse=f.lse.contents.data, o=f.o.data, q=f.q.data,
                         varlen=bool(f.varlen), dout=(args.dout.data, list(args.dout.shape)),
                         dq=(args.dq.data, list(args.dq.shape), list(args.dq.stride)),
                         dk=(args.dk.data, list(args.dk.shape)), dv=(args.dv.data, list(args.dv.shape))))
    monkeypatch.setattr(ops, "_check_inputs", lambda *args: None)
    monkeypatch.setattr(ops, "_run_backward", record)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    monkeypatch.setattr(_library, "get", lambda: None)
    if varlen:
        q = torch.randn(50, 4, 128, dtype=torch.float16)[:, :2]  # a strided view
        kv = torch.randn(70, 2, 128, dtype=torch.float16)
        cu_q, cu_k = torch.tensor([0, 20, 50], dtype=torch.int32), torch.tensor([0, 30, 70], dtype=torch.int32)
        lse = torch.empty(2, 50)
        side = (cu_q, cu_k, 30, 40)
    else:
        q = torch.randn(2, 25, 4, 128, dtype=torch.float16)[:, :, :2]
        kv = torch.randn(2, 35, 2, 128, dtype=torch.float16)
        lse = torch.empty(2, 2, 25)
        side = (None, None, 0, 0)
    out, dout = torch.randn(q.shape, dtype=torch.float16), torch.ones(1, dtype=torch.float16).expand(q.shape)
    dq, dk, dv, _ = ops.attention_backward(dout, q, kv, kv, out, lse, *side, None, None, None, None, 0.25, True, -1,
                                           0, 0.0, False)
    assert dq.shape == q.shape and dk.shape == dv.shape == kv.shape and dq.is_contiguous()
    (s,) = seen
    lead = [1] if varlen else []
    assert s["stream"] == 1234 and s["flags"] == 0 and not s["workspace"] and s["mask"] == 1 and s["scale"] == 0.25
    assert (s["q"], s["o"], s["lse"], s["varlen"]) == (q.data_ptr(), out.data_ptr(), lse.data_ptr(), varlen)
    assert s["dout"][1] == lead + list(q.shape)  # the expanded gradient, made contiguous
    assert s["dq"] == (dq.data_ptr(), lead + list(q.shape), ([dq.numel()] if varlen else []) + list(dq.stride()))
    assert s["dk"] == (dk.data_ptr(), lead + list(kv.shape)) and s["dv"] == (dv.data_ptr(), lead + list(kv.shape))
