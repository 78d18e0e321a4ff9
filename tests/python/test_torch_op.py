"""torch.ops.flashjit.attention's C++ kernel (torch_op/, libflashjit_torch_op.so) without a GPU.

The library is found, loaded and registered for the CUDA key; the package falls back to its Python
kernel when the library is hidden or turned off. Its kernel also registers for the CPU key on
request (flashjit_torch_op_register(1, 1)), taking CPU tensors: there it runs the same checks (its
messages against the Python kernel's), allocates the outputs and packs flashjit_attention_args_v2,
which a stand-in for flashjit_forward_v2 records and compares field by field with what the Python
binding (ops.c_args) packs. FLASHJIT_REQUIRE_TORCH_OP=1 (CI) fails instead of skipping where the
library was not built. Autograd: the operator has no autograd kernel; the public functions' calls
that autograd records take flashjit::attention_train, eager or compiled (test_autograd.py)."""
import ctypes
import os
import subprocess
import sys

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import flashjit
from flashjit import FlashjitError, _abi, ops


def _needs_cpp_kernel():
    if ops.kernel_impl() == "cpp":
        return
    why = "the C++ kernel is not in use: %s" % ops.python_kernel_reason()
    if os.environ.get("FLASHJIT_REQUIRE_TORCH_OP") == "1":
        pytest.fail(why)
    pytest.skip(why)


def _run(code, **env):
    """`code` in a fresh interpreter with these environment variables; its stdout's last line."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **env)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


_DUMP = ("import torch; from flashjit import ops; "
         "cuda = [l for l in torch._C._dispatch_dump('flashjit::attention').splitlines() if l.startswith('CUDA:')]; "
         "print(ops.kernel_impl(), '|', ops.python_kernel_reason(), '|', cuda[0])")


def test_the_cpp_kernel_loads_and_registers_for_cuda():
    _needs_cpp_kernel()
    path = ops.torch_op_path()
    assert path in torch.ops.loaded_libraries
    cuda = [line for line in torch._C._dispatch_dump("flashjit::attention").splitlines() if line.startswith("CUDA:")]
    assert len(cuda) == 1 and "flashjit_torch_op.cpp" in cuda[0], cuda
    assert ops.python_kernel_reason() is None


@pytest.mark.parametrize("setting, reason", [("0", "FLASHJIT_TORCH_OP=0"), ("/nowhere/libflashjit_torch_op.so", "not found")])
def test_the_python_kernel_runs_where_the_library_is_hidden(setting, reason):
    impl, why, cuda = (part.strip() for part in _run(_DUMP, FLASHJIT_TORCH_OP=setting).split("|"))
    assert impl == "python" and reason in why
    assert "ops.py" in cuda


def test_a_library_for_another_binding_version_is_refused(monkeypatch):
    _needs_cpp_kernel()
    monkeypatch.setattr(ops, "_TORCH_OP_VERSION", 0)
    op, why = ops._load_cpp_kernel()
    assert op is None and "speaks version 3" in why


def test_the_package_runs_on_the_python_kernel_without_the_library():
    code = ("import torch, flashjit; from flashjit import ops; "
            "from torch._subclasses.fake_tensor import FakeTensorMode; "
            "m = FakeTensorMode(); m.__enter__(); q = torch.empty(1, 8, 2, 64, device='cuda'); "
            "print(ops.kernel_impl(), tuple(flashjit.flash_attn_func(q, q, q).shape))")
    assert _run(code, FLASHJIT_TORCH_OP="off") == "python (1, 8, 2, 64)"


# ---- The kernel on CPU tensors, with a recording stand-in for flashjit_forward_v2. ----

_FORWARD = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_abi.ArgsV2), ctypes.c_void_p)
_WORKSPACE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(_abi.ArgsV2), ctypes.c_void_p,
                              ctypes.POINTER(ctypes.c_uint64))
_LAST_ERROR = ctypes.CFUNCTYPE(ctypes.c_void_p)


def _fields(args):
    """Every scalar of an ArgsV2 and of the structs it points at (pointers as addresses)."""
    def flat(struct):
        out = {}
        for name, kind in struct._fields_:
            value = getattr(struct, name)
            if isinstance(value, ctypes.Structure):
                out.update({name + "." + k: v for k, v in flat(value).items()})
            elif isinstance(value, ctypes.Array):
                out[name] = list(value)
            elif isinstance(value, ctypes._Pointer):
                out[name] = flat(value.contents) if value else None
            else:
                out[name] = value
        return out
    return flat(args)


class Recorder:
    """Binds the C++ kernel to stand-ins that record each call's arguments (and fail on request),
    registers it for the CPU key, and restores the real library and registrations on close."""

    def __init__(self):
        self.calls, self.status, self.message = [], 0, ctypes.create_string_buffer(b"stand-in failure: rule broken")
        self._forward = _FORWARD(self.forward)
        self._workspace = _WORKSPACE(lambda engine, args, stream, size: 0)
        self._last_error = _LAST_ERROR(lambda: ctypes.addressof(self.message))
        op, lib = ops._TORCH_OP, flashjit._library.get()
        address = (lambda fn: ctypes.cast(fn, ctypes.c_void_p).value)
        assert op.flashjit_torch_op_bind(lib.engine, address(self._forward), address(self._workspace),
                                         address(self._last_error), lib.abi, lib.flashjit_args_v2_size()) == 0
        assert op.flashjit_torch_op_register(1, 1) == 0

    def forward(self, engine, args, stream):
        assert engine == flashjit._library.get().engine.value and not stream
        self.calls.append(_fields(args.contents))
        return self.status

    def close(self):
        op, lib = ops._TORCH_OP, flashjit._library.get()
        assert op.flashjit_torch_op_register(1, 0) == 0
        address = (lambda fn: ctypes.cast(fn, ctypes.c_void_p).value)
        assert op.flashjit_torch_op_bind(lib.engine, address(lib.flashjit_forward_v2),
                                         address(lib.flashjit_workspace_size_v2), address(lib.flashjit_last_error),
                                         lib.abi, lib.flashjit_args_v2_size()) == 0


@pytest.fixture
def recorder():
    _needs_cpp_kernel()
    r = Recorder()
    yield r
    r.close()


def _i32(*values):
    return torch.tensor(values, dtype=torch.int32)


# Operator arguments (after q, k, v) as keyword dicts, on CPU tensors.
OPTIONS = {
    "dense": (lambda: (torch.randn(2, 8, 4, 64), torch.randn(2, 16, 2, 64), torch.randn(2, 16, 2, 32)), {}),
    "dense-everything": (
        lambda: (torch.randn(2, 8, 6, 64, dtype=torch.bfloat16)[:, :, :4], torch.randn(2, 16, 2, 64, dtype=torch.bfloat16),
                 torch.randn(2, 16, 2, 64, dtype=torch.bfloat16).transpose(1, 2).contiguous().transpose(1, 2)),
        dict(kv_lens=_i32(9, 16), alibi_slopes=torch.rand(2, 4), sinks=torch.randn(4), softmax_scale=0.25, causal=True,
             window_left=5, window_right=0, softcap=30.0, return_lse=True, check=True)),
    "varlen": (lambda: (torch.randn(20, 4, 64, dtype=torch.float16), torch.randn(30, 2, 64, dtype=torch.float16),
                        torch.randn(30, 2, 64, dtype=torch.float16)),
               dict(cu_seqlens_q=_i32(0, 7, 20), cu_seqlens_k=_i32(0, 10, 30), max_seqlen_q=13, max_seqlen_k=20,
                    alibi_slopes=torch.rand(4), window_left=-1, window_right=3, return_lse=True)),
    "paged": (lambda: (torch.randn(3, 1, 8, 128, dtype=torch.bfloat16), torch.randn(40, 16, 2, 128, dtype=torch.bfloat16),
                       torch.randn(40, 16, 2, 128, dtype=torch.bfloat16)),
              dict(kv_lens=_i32(5, 40, 17), block_table=torch.arange(36, dtype=torch.int32).view(3, 12)[:, :9])),
    "left-padded": (lambda: (torch.randn(2, 1, 4, 64, dtype=torch.float16), torch.randn(2, 32, 2, 64, dtype=torch.float16),
                             torch.randn(2, 32, 2, 64, dtype=torch.float16)),
                    dict(kv_lens=_i32(20, 32), kv_starts=_i32(3, 0), causal=True)),
    "paged-left-padded": (lambda: (torch.randn(2, 2, 4, 64), torch.randn(8, 16, 2, 64), torch.randn(8, 16, 2, 64)),
                          dict(kv_lens=_i32(40, 9), kv_starts=_i32(17, 2), block_table=_i32(*range(8)).view(2, 4))),
    "varlen-paged": (lambda: (torch.randn(9, 8, 64), torch.randn(10, 4, 2, 64), torch.randn(10, 4, 2, 64)),
                     dict(cu_seqlens_q=_i32(0, 4, 9), max_seqlen_q=5, max_seqlen_k=16, kv_lens=_i32(3, 16),
                          block_table=_i32(0, 1, 2, 3, 4, 5, 6, 7).view(2, 4), causal=True)),
}

_DEFAULTS = dict(cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0, kv_lens=None, block_table=None,
                 alibi_slopes=None, sinks=None, softmax_scale=0.0, causal=False, window_left=-1, window_right=-1,
                 softcap=0.0, return_lse=False, check=False, kv_starts=None)


def _op_args(q, k, v, options):
    o = dict(_DEFAULTS, **options)
    return (q, k, v) + tuple(o[name] for name in _DEFAULTS)


@pytest.mark.parametrize("case", sorted(OPTIONS))
def test_the_cpp_kernel_packs_what_the_python_binding_packs(recorder, case):
    make, options = OPTIONS[case]
    q, k, v = make()
    out, lse = torch.ops.flashjit.attention(*_op_args(q, k, v, options))
    o = dict(_DEFAULTS, **options)
    # The Python kernel's outputs: shapes, dtypes, contiguous.
    want_out, want_lse = ops._out_shapes(q, v, o["cu_seqlens_q"] is not None, o["return_lse"])
    assert out.shape == want_out and out.dtype == q.dtype and out.is_contiguous()
    assert lse.shape == want_lse and lse.dtype == torch.float32 and lse.is_contiguous()
    want = ops.c_args(q, k, v, out, lse if o["return_lse"] else None, *(o[n] for n in list(_DEFAULTS)[:-3]),
                      o["return_lse"], o["check"], o["kv_starts"])
    assert len(recorder.calls) == 1
    assert recorder.calls[0] == _fields(want)


@pytest.mark.parametrize("scalars", [dict(), dict(softmax_scale=0.3, causal=True, window_left=7, window_right=0),
                                     dict(window_left=3, window_right=5, softcap=20.0)])
def test_the_dense_operator_packs_what_the_general_one_packs(recorder, scalars):
    """attention_dense (q, k, v and the scalars, no LSE): the same arguments reach the library, one
    output, and ops.call takes it for such calls."""
    q, k, v = torch.randn(2, 8, 4, 64), torch.randn(2, 16, 2, 64), torch.randn(2, 16, 2, 32)
    o = dict(_DEFAULTS, **scalars)
    out = torch.ops.flashjit.attention_dense(q, k, v, *(o[n] for n in ("softmax_scale", "causal", "window_left",
                                                                       "window_right", "softcap")))
    assert isinstance(out, torch.Tensor) and out.shape == (2, 8, 4, 32) and out.is_contiguous()
    torch.ops.flashjit.attention(*_op_args(q, k, v, scalars))
    assert len(recorder.calls) == 2
    def without_output_address(call):
        return {name: value for name, value in call.items() if name != "o.data"}
    assert without_output_address(recorder.calls[0]) == without_output_address(recorder.calls[1])
    out, lse = ops.call(*_op_args(q, k, v, scalars))
    assert lse is None and len(recorder.calls) == 3


def test_the_cpp_kernel_raises_the_library_message(recorder):
    q = torch.randn(1, 8, 2, 64)
    recorder.status = 1
    with pytest.raises(RuntimeError, match="^stand-in failure: rule broken$"):
        torch.ops.flashjit.attention(*_op_args(q, q, q, {}))
    with pytest.raises(FlashjitError, match="^stand-in failure: rule broken$"):  # the public route: FlashjitError
        ops.call(*_op_args(q, q, q, {}))


def _f(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype)


# Bad arguments (q, k, v and options): the C++ kernel's message is the Python kernel's.
BAD = [
    ((_f(2, 8, 4, 64, dtype=torch.int8), _f(2, 8, 4, 64), _f(2, 8, 4, 64)), {}),
    ((_f(2, 8, 4, 64), _f(2, 8, 4, 64, dtype=torch.float16), _f(2, 8, 4, 64)), {}),
    ((_f(2, 8, 4, 64), _f(2, 8, 4, 64), _f(2, 8, 4, 64, dtype=torch.float64)), {}),
    ((_f(8, 4, 64), _f(8, 4, 64), _f(8, 4, 64)), {}),
    ((_f(2, 8, 4, 64), _f(2, 8, 4, 64), _f(2, 8, 4, 64)), dict(cu_seqlens_q=_i32(0, 3, 8))),
    ((_f(30, 4, 64), _f(2, 30, 4, 64), _f(30, 4, 64)), dict(cu_seqlens_q=_i32(0, 3, 8), cu_seqlens_k=_i32(0, 3, 8))),
    ((_f(30, 4, 64), _f(30, 4, 64), _f(30, 4, 64)), dict(cu_seqlens_q=_i32(0, 3, 8))),
    ((_f(30, 4, 64), _f(30, 4, 64), _f(30, 4, 64)), dict(cu_seqlens_q=_i32(0, 3, 8).view(1, 3), cu_seqlens_k=_i32(0, 3, 8))),
    ((_f(30, 4, 64), _f(30, 4, 64), _f(30, 4, 64)), dict(cu_seqlens_q=_i32(0, 3, 8).long(), cu_seqlens_k=_i32(0, 3, 8))),
    ((_f(30, 4, 64), _f(30, 4, 64), _f(30, 4, 64)), dict(cu_seqlens_q=_i32(0, 3, 8), cu_seqlens_k=_i32(0, 3, 8, 9))),
    ((_f(30, 4, 64), _f(30, 4, 64), _f(30, 4, 64)),
     dict(cu_seqlens_q=_i32(0, 3, 8), cu_seqlens_k=torch.zeros(3, 2, dtype=torch.int32)[:, 0])),
    ((_f(2, 8, 4, 64), _f(2, 8, 4, 64), _f(2, 8, 4, 64)), dict(kv_lens=_i32(1, 2, 3))),
    ((_f(2, 8, 4, 64), _f(2, 8, 4, 64), _f(2, 8, 4, 64)), dict(kv_starts=_i32(1, 2, 3))),
    ((_f(2, 8, 4, 64), _f(2, 8, 4, 64), _f(2, 8, 4, 64)), dict(kv_starts=_i32(1, 2).long())),
    ((_f(2, 1, 4, 64), _f(8, 16, 4, 64), _f(8, 16, 4, 64)), dict(block_table=torch.zeros(2, 4, dtype=torch.int32))),
    ((_f(2, 1, 4, 64), _f(8, 16, 4, 64), _f(8, 16, 4, 64)),
     dict(kv_lens=_i32(1, 2), block_table=torch.zeros(3, 4, dtype=torch.int32))),
    ((_f(2, 1, 4, 64), _f(8, 16, 4, 64), _f(8, 16, 4, 64)),
     dict(kv_lens=_i32(1, 2), block_table=torch.zeros(2, 4, 2, dtype=torch.int32)[..., 0])),
    ((_f(2, 8, 4, 64), _f(2, 8, 4, 64), _f(2, 8, 4, 64)), dict(alibi_slopes=torch.zeros(3))),
    ((_f(2, 8, 4, 64), _f(2, 8, 4, 64), _f(2, 8, 4, 64)), dict(alibi_slopes=torch.zeros(3, 4))),
    ((_f(2, 8, 4, 64), _f(2, 8, 4, 64), _f(2, 8, 4, 64)), dict(alibi_slopes=torch.zeros(2, 4, dtype=torch.float16))),
    ((_f(2, 8, 4, 64), _f(2, 8, 4, 64), _f(2, 8, 4, 64)), dict(sinks=torch.zeros(4, dtype=torch.bfloat16))),
    ((_f(2, 8, 4, 64), _f(2, 8, 4, 64), _f(2, 8, 4, 64)), dict(sinks=torch.zeros(5))),
]


def _python_message(qkv, options):
    """The Python kernel's message for these arguments, on fake CUDA tensors of the same layouts."""
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        def cuda(t):
            if t is None:
                return None
            fake = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cuda")
            return fake
        args = [cuda(t) if isinstance(t, torch.Tensor) else t for t in _op_args(*qkv, options)]
        with pytest.raises(FlashjitError) as e:
            ops.attention(*args)
    del mode
    return str(e.value)


@pytest.mark.parametrize("index", range(len(BAD)))
def test_bad_arguments_raise_the_python_kernels_message(recorder, index):
    qkv, options = BAD[index]
    want = _python_message(qkv, options)
    with pytest.raises(RuntimeError) as e:
        torch.ops.flashjit.attention(*_op_args(*qkv, options))
    assert str(e.value) == want
    assert not recorder.calls


def test_cpu_tensors_are_refused_by_the_cuda_kernel_naming_the_tensor():
    """The CUDA kernel runs when any argument is a CUDA tensor: here through the fake kernel's
    identical check, as a GPU-less machine can't dispatch to it."""
    with FakeTensorMode(allow_non_fake_inputs=True):
        q = torch.empty(2, 8, 4, 64, dtype=torch.bfloat16, device="cuda")
        with pytest.raises(FlashjitError, match="k is on cpu: flashjit runs on CUDA tensors"):
            torch.ops.flashjit.attention(*_op_args(q, torch.empty(2, 8, 4, 64, dtype=torch.bfloat16), q, {}))


# ---- Autograd ----

def test_the_operator_has_no_autograd_kernel():
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("flashjit::attention", "Autograd")
    assert torch._C._dispatch_has_kernel_for_dispatch_key("flashjit::attention_train", "Autograd")


def test_public_calls_that_autograd_records_take_the_training_operator(cpu_reference_kernel):
    q, k, v = (torch.randn(1, 8, 2, 16) for _ in range(3))
    with torch.no_grad():
        assert not flashjit.flash_attn_func(q.requires_grad_(), k, v).requires_grad
    with torch.inference_mode():
        assert not flashjit.flash_attn_func(q, k, v).requires_grad
    assert not flashjit.flash_attn_func(q.detach(), k, v).requires_grad
    out = flashjit.flash_attn_func(q, k, v, causal=True)
    assert out.requires_grad and "AttentionTrain" in type(out.grad_fn).__name__  # ops.AttentionTrainFunction
    torch.testing.assert_close(out, flashjit.flash_attn_func(q.detach(), k, v, causal=True))


def test_compiled_code_that_autograd_records_takes_the_training_operator():
    """torch.compile traces attention_train where autograd records, the operator elsewhere."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append([str(n.target) for n in gm.graph.nodes])
        return gm.forward
    torch._dynamo.reset()
    with FakeTensorMode(allow_non_fake_inputs=True):
        q = torch.randn(1, 8, 2, 16, device="cuda", requires_grad=True)
        k = torch.randn(1, 8, 2, 16, device="cuda")

        def step(x):
            return flashjit.flash_attn_func(x * 2, k, k)
        torch.compile(step, backend=backend, fullgraph=True)(q)
        torch._dynamo.reset()
        with torch.no_grad():
            torch.compile(step, backend=backend, fullgraph=True)(q)
    torch._dynamo.reset()
    assert "flashjit.attention_train" in graphs[0]
    assert "flashjit.attention_dense" in graphs[1] and "flashjit.attention_train" not in graphs[1]
