"""dense()'s eager fast path (eager/, _flashjit_eager.abi3.so) without a GPU.

The extension is found beside libflashjit.so, binds to PyTorch's DLPack exchange API and the
package's engine, and refuses an exchange API of another version. On CPU tensors it declines
(NotImplemented), so ops.dense() takes the operator; so do subclasses, torch-function and dispatch
modes, the profiler, torch.jit.trace, autograd (guards the extension checks itself, set_guards())
and compilers, and FLASHJIT_EAGER=0 turns it off. flash_attn() reads flash_attn_func's arguments
with FlashAttention's conventions and leaves other types to the Python route.
In its tests' CPU mode (CPU tensors standing in for CUDA ones, as the torch op's CPU registration)
it runs its checks (the Python kernel's messages), allocates the output and packs
flashjit_attention_args_v2, which a stand-in for flashjit_forward_v2 records and compares field by
field with what the Python binding (ops.c_args) packs. FLASHJIT_REQUIRE_EAGER=1 (CI) fails instead
of skipping where the extension was not built."""
import ctypes
import importlib.util
import os

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

import flashjit
from flashjit import FlashjitError, ops


def _sibling(name):
    """A test module of this folder, by path (CI's pytest imports test files with
    --import-mode=importlib, which puts none of them on sys.path)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name + ".py")
    spec = importlib.util.spec_from_file_location("flashjit_tests_" + name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The torch op's tests: their stand-ins for the engine's entry points, their recorder, messages.
_op_tests = _sibling("test_torch_op")
_FORWARD, _LAST_ERROR, _WORKSPACE = _op_tests._FORWARD, _op_tests._LAST_ERROR, _op_tests._WORKSPACE
_fields, _python_message, _run = _op_tests._fields, _op_tests._python_message, _op_tests._run

SCALARS = ("softmax_scale", "causal", "window_left", "window_right", "softcap")
NO_SCALARS = (0.0, False, -1, -1, 0.0)


def _needs_eager():
    if ops.eager_reason() is None:
        return ops._EAGER
    why = "the eager fast path is not in use: %s" % ops.eager_reason()
    if os.environ.get("FLASHJIT_REQUIRE_EAGER") == "1":
        pytest.fail(why)
    pytest.skip(why)


def _address(fn):
    return ctypes.cast(fn, ctypes.c_void_p).value


def _bind(eager, api=None, forward=None, workspace=None, last_error=None, abi=None, size=None):
    """eager.bind with the package's engine and torch's exchange API, less what is given."""
    lib = flashjit._library.get()
    eager.bind(torch.Tensor.__dlpack_c_exchange_api__ if api is None else api, torch.Tensor, FlashjitError,
               lib.engine.value, forward or _address(lib.flashjit_forward_v2),
               workspace or _address(lib.flashjit_workspace_size_v2), last_error or _address(lib.flashjit_last_error),
               lib.abi if abi is None else abi, lib.flashjit_args_v2_size() if size is None else size)


class Recorder:
    """Binds the extension to stand-ins that record each call's arguments (and fail on request) and
    turns its CPU mode on; close() binds the real engine again."""

    def __init__(self, eager):
        self.eager, self.calls, self.status = eager, [], 0
        self.message = ctypes.create_string_buffer(b"stand-in failure: rule broken")
        self._forward = _FORWARD(self.forward)
        self._workspace = _WORKSPACE(lambda engine, args, stream, size: 0)
        self._last_error = _LAST_ERROR(lambda: ctypes.addressof(self.message))
        _bind(eager, forward=_address(self._forward), workspace=_address(self._workspace),
              last_error=_address(self._last_error))
        eager._cpu_for_tests(True)

    def forward(self, engine, args, stream):
        assert engine == flashjit._library.get().engine.value and not stream
        self.calls.append(_fields(args.contents))
        return self.status

    def close(self):
        self.eager._cpu_for_tests(False)
        _bind(self.eager)


@pytest.fixture
def recorder():
    r = Recorder(_needs_eager())
    yield r
    r.close()


# ---- Loading and binding ----

def test_the_extension_is_found_beside_the_library_and_bound():
    eager = _needs_eager()
    assert ops.eager_path() == os.path.join(os.path.dirname(flashjit._library.library_path()), ops.EAGER_LIBRARY)
    assert os.path.samefile(eager.__file__, ops.eager_path())
    assert ops._EAGER_DENSE is eager.dense and eager.version() == ops._EAGER_VERSION


_STATE = ("from flashjit import ops; print(ops.eager_reason(), '|', ops._EAGER_DENSE is None, '|', "
          "ops.eager_calls())")


@pytest.mark.parametrize("setting, reason", [("0", "FLASHJIT_EAGER=0"), ("off", "FLASHJIT_EAGER=off"),
                                             ("/nowhere/_flashjit_eager.abi3.so", "not found")])
def test_flashjit_eager_0_or_a_missing_file_leaves_every_call_to_the_operator(setting, reason):
    why, off, calls = (part.strip() for part in _run(_STATE, FLASHJIT_EAGER=setting).split("|"))
    assert reason in why and off == "True" and calls == "0"


def test_flashjit_eager_may_name_the_file():
    eager = _needs_eager()
    why, off, _ = (part.strip() for part in _run(_STATE, FLASHJIT_EAGER=eager.__file__).split("|"))
    assert why == "None" and off == "False"


class _Header(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("prev_api", ctypes.c_void_p)]


class _ExchangeApi(ctypes.Structure):  # ATen/dlpack.h's DLPackExchangeAPI
    _fields_ = [("header", _Header), ("managed_tensor_allocator", ctypes.c_void_p),
                ("managed_tensor_from_py_object_no_sync", ctypes.c_void_p),
                ("managed_tensor_to_py_object_no_sync", ctypes.c_void_p),
                ("dltensor_from_py_object_no_sync", ctypes.c_void_p), ("current_work_stream", ctypes.c_void_p)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype, _capsule_new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def _torch_api():
    return _ExchangeApi.from_address(_capsule_pointer(torch.Tensor.__dlpack_c_exchange_api__, b"dlpack_exchange_api"))


def _still_bound_to_torch(eager):
    """The binding in force is torch's own: a CPU call declines, a subclass too, nothing crashes."""
    q = torch.randn(1, 4, 2, 16)
    assert eager.dense(q, q, q, *NO_SCALARS) is NotImplemented


@pytest.mark.parametrize("major, minor, missing, name, want", [
    (2, 0, None, b"dlpack_exchange_api", "version 2.0; this module needs 1.3"),
    (1, 2, None, b"dlpack_exchange_api", "version 1.2; this module needs 1.3"),
    (0, 9, None, b"dlpack_exchange_api", "version 0.9"),
    (1, 3, "dltensor_from_py_object_no_sync", b"dlpack_exchange_api", "lacks a function"),
    (1, 3, "managed_tensor_allocator", b"dlpack_exchange_api", "lacks a function"),
    (1, 3, None, b"another_name", "must be a \"dlpack_exchange_api\" capsule")])
def test_the_binding_refuses_an_exchange_api_it_does_not_speak(major, minor, missing, name, want):
    eager = _needs_eager()
    api = _ExchangeApi.from_buffer_copy(_torch_api())
    api.header.major, api.header.minor = major, minor
    if missing:
        setattr(api, missing, None)
    with pytest.raises(ValueError, match=want):
        _bind(eager, api=_capsule_new(ctypes.addressof(api), name, None))
    _still_bound_to_torch(eager)


def test_a_later_minor_version_and_torch_2_10s_address_are_taken():
    eager = _needs_eager()
    api = _ExchangeApi.from_buffer_copy(_torch_api())
    api.header.minor += 1  # a minor version only appends to the table
    try:
        _bind(eager, api=_capsule_new(ctypes.addressof(api), b"dlpack_exchange_api", None))
        _bind(eager, api=ctypes.addressof(_torch_api()))  # __c_dlpack_exchange_api__ (torch 2.10): an int
        _still_bound_to_torch(eager)
    finally:
        _bind(eager)


@pytest.mark.parametrize("change, want", [(dict(abi=3), "older than this module"),
                                          (dict(size=64), "older than this module"),
                                          (dict(api="a string"), "capsule or an address"),
                                          (dict(api=0), "NULL")])
def test_the_binding_refuses_an_older_engine_or_a_bad_value(change, want):
    eager = _needs_eager()
    with pytest.raises(ValueError, match=want):
        _bind(eager, **change)
    _still_bound_to_torch(eager)


def test_the_binding_takes_nine_arguments_of_its_kinds():
    eager = _needs_eager()
    with pytest.raises(TypeError, match="9 arguments"):
        eager.bind()
    lib = flashjit._library.get()
    good = [torch.Tensor.__dlpack_c_exchange_api__, torch.Tensor, FlashjitError, lib.engine.value,
            _address(lib.flashjit_forward_v2), _address(lib.flashjit_workspace_size_v2),
            _address(lib.flashjit_last_error), lib.abi, lib.flashjit_args_v2_size()]
    for index, bad in [(1, 3), (2, int), (3, 0), (3, "engine"), (4, None), (7, "7"), (8, -1)]:
        args = list(good)
        args[index] = bad
        with pytest.raises((ValueError, TypeError, OverflowError)):
            eager.bind(*args)
    _still_bound_to_torch(eager)


# ---- Arguments: every type, none crashes ----

_WEIRD = [None, object(), "q", 1.5, 3, True, np.zeros(3), [1.0], (1,), torch.float16, torch.device("cpu")]


@pytest.mark.parametrize("position", range(8))
def test_an_argument_of_a_wrong_type_raises_type_error_naming_it(position):
    eager = _needs_eager()
    q = torch.randn(1, 4, 2, 16)
    names = ("q", "k", "v") + SCALARS
    for weird in _WEIRD:
        args = [q, q, q, *NO_SCALARS]
        if (position in (3, 7) and isinstance(weird, (int, float))) or (position in (4, 5, 6) and isinstance(weird, int)):
            continue  # what the scalars take: float() of an int or float; an int or bool
        args[position] = weird
        with pytest.raises(TypeError, match="^flashjit eager dense: %s must be " % names[position]):
            eager.dense(*args)


def test_a_wrong_argument_count_raises_type_error():
    eager = _needs_eager()
    q = torch.randn(1, 4, 2, 16)
    for args in [(), (q,), (q, q, q), (q, q, q, *NO_SCALARS, 0)]:
        with pytest.raises(TypeError, match="takes 8 arguments"):
            eager.dense(*args)


def test_a_window_past_int64_raises_type_error():
    eager = _needs_eager()
    q = torch.randn(1, 4, 2, 16)
    with pytest.raises(TypeError, match="window_left must be an int within int64"):
        eager.dense(q, q, q, 0.0, False, 2 ** 70, -1, 0.0)


# ---- Declining: what only the operator runs ----

class Plain(torch.Tensor):
    pass


def test_cpu_tensors_subclasses_and_tensors_without_storage_are_declined():
    eager = _needs_eager()
    q = torch.randn(2, 4, 2, 16)
    assert eager.dense(q, q, q, *NO_SCALARS) is NotImplemented
    assert eager.dense(q.as_subclass(Plain), q, q, *NO_SCALARS) is NotImplemented
    assert eager.dense(q, q, torch.nn.Parameter(q), *NO_SCALARS) is NotImplemented
    assert eager.dense(q.to("meta"), q, q, *NO_SCALARS) is NotImplemented
    eager._cpu_for_tests(True)
    try:  # functorch's wrappers have no storage: DLPack can't describe them
        results = []
        torch.func.vmap(lambda x: results.append(eager.dense(x, x, x, *NO_SCALARS)) or x)(q.unsqueeze(0))
        torch.func.grad(lambda x: results.append(eager.dense(x, x, x, *NO_SCALARS)) or x.sum())(q)
        assert results == [NotImplemented, NotImplemented]
        assert eager.dense(q.as_subclass(Plain), q, q, *NO_SCALARS) is NotImplemented
    finally:
        eager._cpu_for_tests(False)
    assert eager.calls() == 0 or ops.eager_calls() == eager.calls()


def test_dense_takes_the_operator_for_cpu_tensors(cpu_reference_kernel):
    _needs_eager()
    q, k, v = (torch.randn(1, 8, 2, 16) for _ in range(3))
    before = ops.eager_calls()
    with torch.no_grad():
        out = ops.dense(q, k, v, *NO_SCALARS)
    torch.testing.assert_close(out, ops._DENSE_OP(q, k, v, *NO_SCALARS))
    assert ops.eager_calls() == before


class _Functions(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


class _Dispatch(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _profiler():
    return torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])


@pytest.mark.parametrize("context", [_Functions, _Dispatch, _profiler, lambda: torch.device("cpu")])
def test_modes_and_the_profiler_take_the_operator(recorder, cpu_reference_kernel, context):
    q, k, v = (torch.randn(1, 8, 2, 16) for _ in range(3))
    before = ops.eager_calls()
    with torch.no_grad():
        ops.dense(q, k, v, *NO_SCALARS)  # the fast path, in the tests' CPU mode
        assert len(recorder.calls) == 1 and ops.eager_calls() == before + 1
        with context():
            out = ops.dense(q, k, v, *NO_SCALARS)
    assert len(recorder.calls) == 1 and ops.eager_calls() == before + 1  # the operator (the CPU reference)
    torch.testing.assert_close(out, ops._DENSE_OP(q, k, v, *NO_SCALARS))


def test_the_profiler_records_the_operator(recorder, cpu_reference_kernel):
    q = torch.randn(1, 8, 2, 16)
    with torch.no_grad(), _profiler() as prof:
        ops.dense(q, q, q, *NO_SCALARS)
    assert any(e.name == "flashjit::attention_dense" for e in prof.events())
    assert not recorder.calls


def test_torch_jit_trace_records_the_operator(recorder, cpu_reference_kernel):
    q = torch.randn(1, 8, 2, 16)
    with torch.no_grad():
        traced = torch.jit.trace(lambda x: ops.dense(x, x, x, *NO_SCALARS), (q,), check_trace=False)
    assert "flashjit::attention_dense" in str(traced.graph) and not recorder.calls
    torch.testing.assert_close(traced(q * 2), ops._DENSE_OP(q * 2, q * 2, q * 2, *NO_SCALARS))


def test_calls_autograd_records_take_the_training_route(recorder, cpu_reference_kernel):
    q = torch.randn(1, 8, 2, 16, requires_grad=True)
    out = flashjit.flash_attn_func(q, q.detach(), q.detach())
    assert out.requires_grad and not recorder.calls


def test_a_scalar_type_the_fast_path_does_not_take_goes_to_the_operator(recorder, cpu_reference_kernel):
    q = torch.randn(1, 8, 2, 16)
    with torch.no_grad():
        out = ops.dense(q, q, q, np.float32(0.25), np.bool_(True), -1, -1, 0.0)
    assert not recorder.calls
    torch.testing.assert_close(out, ops._DENSE_OP(q, q, q, 0.25, True, -1, -1, 0.0))


def test_compiled_code_keeps_the_operator():
    """dynamo traces dense() with is_compiling() true: the graph holds attention_dense and no
    call into the extension (which fullgraph=True would refuse as a graph break)."""
    _needs_eager()
    from torch._subclasses.fake_tensor import FakeTensorMode
    graphs = []

    def backend(gm, example_inputs):
        graphs.append([str(n.target) for n in gm.graph.nodes])
        return gm.forward
    torch._dynamo.reset()
    with FakeTensorMode(allow_non_fake_inputs=True), torch.no_grad():
        q = torch.randn(1, 8, 2, 16, device="cuda")
        torch.compile(lambda x: flashjit.flash_attn_func(x, x, x, causal=True), backend=backend, fullgraph=True)(q)
    torch._dynamo.reset()
    assert any("flashjit.attention_dense" in g for g in graphs[0])


# ---- The tests' CPU mode: what reaches the engine ----

CASES = {  # q, k, v and the scalars
    "gqa": (lambda: (torch.randn(2, 8, 4, 64), torch.randn(2, 16, 2, 64), torch.randn(2, 16, 2, 32)), NO_SCALARS),
    "odd strides": (lambda: (torch.randn(2, 8, 6, 64, dtype=torch.bfloat16)[:, :, :4],
                             torch.randn(2, 16, 2, 64, dtype=torch.bfloat16).transpose(1, 2).contiguous().transpose(1, 2),
                             torch.randn(16, 2, 2, 64, dtype=torch.bfloat16).permute(1, 0, 2, 3)),
                    (0.25, True, 5, 0, 30.0)),
    "fp16 window": (lambda: tuple(torch.randn(1, 7, 3, 32, dtype=torch.float16) for _ in range(3)),
                    (0.0, False, 3, 4, 0.0)),
    "right window only": (lambda: tuple(torch.randn(1, 7, 3, 32) for _ in range(3)), (0.5, 0, -1, 2, 0.0)),
    "a view into storage": (lambda: (torch.randn(40, 4, 64)[8:24].view(2, 8, 4, 64),) * 3, (1, True, -1, -1, 2)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_fast_path_packs_what_the_python_binding_packs(recorder, case):
    make, scalars = CASES[case]
    q, k, v = make()
    before = ops.eager_calls()
    out = recorder.eager.dense(q, k, v, *scalars)
    want_shape = ops._out_shapes(q, v, False, False)[0]
    assert out.shape == want_shape and out.dtype == q.dtype and out.device == q.device
    assert out.stride() == q.new_empty(want_shape).stride()  # contiguous, as the operator's
    assert type(out) is torch.Tensor and not out.requires_grad
    o = dict(zip(SCALARS, scalars))
    want = ops.c_args(q, k, v, out, None, None, None, 0, 0, None, None, None, None, float(o["softmax_scale"]),
                      bool(o["causal"]), o["window_left"], o["window_right"], float(o["softcap"]), False, False)
    assert len(recorder.calls) == 1 and recorder.calls[0] == _fields(want)
    assert ops.eager_calls() == before + 1


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_fast_path_packs_what_the_torch_ops_kernel_packs(recorder, case):
    """The torch op's C++ kernel (its CPU registration, bound to the same stand-ins) gets the
    same arguments but for the output's address."""
    _op_tests._needs_cpp_kernel()
    make, scalars = CASES[case]
    q, k, v = make()
    recorder.eager.dense(q, k, v, *scalars)
    op = _op_tests.Recorder()
    try:
        torch.ops.flashjit.attention_dense(q, k, v, *scalars)
    finally:
        op.close()
    assert len(recorder.calls) == 1 and len(op.calls) == 1
    mine, theirs = (dict(c) for c in (recorder.calls[0], op.calls[0]))
    assert mine.pop("o.data") and theirs.pop("o.data")
    assert mine == theirs


def test_dense_takes_the_fast_path_and_flash_attn_func_with_it(recorder):
    q, k, v = CASES["gqa"][0]()
    with torch.no_grad():
        ops.dense(q, k, v, *NO_SCALARS)
        flashjit.flash_attn_func(q, k, v, causal=True, window_size=(3, 0), softcap=5.0)
        ops.call(q, k, v, None, None, 0, 0, None, None, None, None, 0.0, False, -1, -1, 0.0, False, False)
    assert len(recorder.calls) == 3
    assert recorder.calls[1]["mask"] == 1 and recorder.calls[1]["window"] == {"left": 3, "right": 0}


# flash_attn(): flash_attn_func's dense call with FlashAttention's conventions read in C.
FA_CASES = [  # (softmax_scale, causal, window_size, softcap) and what the operator gets
    ((None, False, (-1, -1), 0.0), (0.0, False, -1, -1, 0.0)),
    ((0.3, True, (5, 7), None), (0.3, True, 5, 0, 0.0)),  # causal ends rows at the diagonal
    ((None, 1, [4, None], 2.5), (0.0, True, 4, 0, 2.5)),
    ((2, False, None, 1), (2.0, False, -1, -1, 1.0)),
    ((0.5, False, (None, 3), 0), (0.5, False, -1, 3, 0.0)),
]


@pytest.mark.parametrize("given, want", FA_CASES)
def test_flash_attn_reads_flashattentions_conventions(recorder, given, want):
    q, k, v = CASES["gqa"][0]()
    out = recorder.eager.flash_attn(q, k, v, *given)
    assert out.shape == ops._out_shapes(q, v, False, False)[0]
    scale, causal, left, right, softcap = want
    expected = ops.c_args(q, k, v, out, None, None, None, 0, 0, None, None, None, None, scale, causal, left, right,
                          softcap, False, False)
    assert len(recorder.calls) == 1 and recorder.calls[0] == _fields(expected)
    kwargs = dict(zip(("softmax_scale", "causal", "window_size", "softcap"), given))
    with torch.no_grad():
        flashjit.flash_attn_func(q, k, v, **kwargs)  # the public function: the same call
    assert len(recorder.calls) == 2 and dict(recorder.calls[1], **{"o.data": 0}) == dict(recorder.calls[0], **{"o.data": 0})


@pytest.mark.parametrize("given", [(np.float32(0.25), False, (-1, -1), 0.0), (torch.tensor(0.25), False, (-1, -1), 0.0),
                                   (None, "yes", (-1, -1), 0.0), (None, False, (np.int64(3), -1), 0.0),
                                   (None, False, (1, 2, 3), 0.0), (None, False, 5, 0.0), (None, False, (-1, -1), "0"),
                                   (None, False, (2 ** 70, -1), 0.0)])
def test_flash_attn_leaves_other_argument_types_to_the_python_route(recorder, given):
    q = torch.randn(1, 8, 2, 16)
    assert recorder.eager.flash_attn(q, q, q, *given) is NotImplemented and not recorder.calls
    assert recorder.eager.flash_attn(q.as_subclass(_Plain), q, q, *given[:1], False, (-1, -1), 0.0) is NotImplemented


def test_flash_attn_raises_type_error_for_a_non_tensor_and_a_wrong_count(recorder):
    q = torch.randn(1, 8, 2, 16)
    with pytest.raises(TypeError, match="k must be a torch.Tensor, got list"):
        recorder.eager.flash_attn(q, [], q, None, False, (-1, -1), 0.0)
    with pytest.raises(TypeError, match="takes 7 arguments"):
        recorder.eager.flash_attn(q, q, q)
    assert not recorder.calls


class _Plain(torch.Tensor):
    pass


@pytest.fixture
def guards(recorder):
    yield recorder
    recorder.eager.set_guards(torch.is_grad_enabled, ops.EAGER_GUARDS)


def test_a_true_guard_or_autograd_recording_declines_the_call(guards):
    eager, q = guards.eager, torch.randn(1, 8, 2, 16)
    wants_grad = q.clone().requires_grad_()
    state = {"on": False}
    eager.set_guards(torch.is_grad_enabled, (lambda: 0, lambda: state["on"]))
    assert eager.dense(q, q, q, *NO_SCALARS) is not NotImplemented
    state["on"] = True
    assert eager.dense(q, q, q, *NO_SCALARS) is NotImplemented
    assert eager.flash_attn(q, q, q, None, False, (-1, -1), 0.0) is NotImplemented
    state["on"] = False
    assert eager.dense(q, q, wants_grad, *NO_SCALARS) is NotImplemented  # grad mode is on in tests
    with torch.no_grad():
        assert eager.dense(q, q, wants_grad, *NO_SCALARS) is not NotImplemented
    eager.set_guards(None, ())
    assert eager.dense(q, q, wants_grad, *NO_SCALARS) is not NotImplemented
    assert len(guards.calls) == 3


def test_a_guard_that_raises_raises(guards):
    q = torch.randn(1, 8, 2, 16)
    guards.eager.set_guards(None, (lambda: 1 / 0,))
    with pytest.raises(ZeroDivisionError):
        guards.eager.dense(q, q, q, *NO_SCALARS)
    assert not guards.calls


@pytest.mark.parametrize("args", [(), (None,), (1, ()), (None, [len]), (None, (len, 3)), (None, (len,) * 9)])
def test_set_guards_takes_a_callable_and_a_tuple_of_callables(guards, args):
    with pytest.raises(TypeError, match="set_guards"):
        guards.eager.set_guards(*args)


def test_the_engines_refusal_raises_its_message_and_returns_nothing(recorder):
    q = torch.randn(1, 8, 2, 64)
    recorder.status = 1
    before = ops.eager_calls()
    with pytest.raises(FlashjitError, match="^stand-in failure: rule broken$"):
        recorder.eager.dense(q, q, q, *NO_SCALARS)
    with pytest.raises(FlashjitError, match="^stand-in failure: rule broken$"):
        ops.dense(q, q, q, *NO_SCALARS)
    assert ops.eager_calls() == before


@pytest.mark.skipif(torch.cuda.is_available(), reason="the engine would launch on host pointers: only without a GPU")
def test_without_a_driver_the_engine_says_so():
    """Bound to the real engine, a CPU call in the tests' mode reaches flashjit_forward_v2, which
    refuses it (no driver here): a FlashjitError, not a crash."""
    eager = _needs_eager()
    q = torch.randn(1, 8, 2, 64)
    eager._cpu_for_tests(True)
    try:
        with pytest.raises(FlashjitError) as e:
            eager.dense(q, q, q, *NO_SCALARS)
    finally:
        eager._cpu_for_tests(False)
    assert str(e.value)


def _f(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype)


BAD = [  # q, k, v: the checks the fast path makes itself, in the operator's order
    (_f(2, 8, 4, 64, dtype=torch.int8), _f(2, 8, 4, 64), _f(2, 8, 4, 64)),
    (_f(2, 8, 4, 64), _f(2, 8, 4, 64, dtype=torch.float64), _f(2, 8, 4, 64, dtype=torch.int32)),
    (_f(2, 8, 4, 64), _f(2, 8, 4, 64), _f(2, 8, 4, 64, dtype=torch.bool)),
    (_f(2, 8, 4, 64, dtype=torch.complex64), _f(2, 8, 4, 64), _f(2, 8, 4, 64)),
    (_f(2, 8, 4, 64, dtype=torch.uint8), _f(8, 4, 64), _f(2, 8, 4, 64)),
    (_f(2, 8, 4, 64), _f(2, 8, 4, 64, dtype=torch.float16), _f(2, 8, 4, 64)),
    (_f(2, 8, 4, 64, dtype=torch.float32), _f(2, 8, 4, 64, dtype=torch.float32), _f(2, 8, 4, 64)),
    (_f(8, 4, 64), _f(2, 8, 4, 64), _f(2, 8, 4, 64)),
    (_f(1, 2, 8, 4, 64), _f(2, 8, 4, 64), _f(2, 8, 4, 64)),
    (_f(2, 8, 4, 64), _f(8, 4, 64), _f(2, 8, 4, 64)),
    (_f(2, 8, 4, 64), _f(2, 8, 4, 64), _f(1, 2, 8, 4, 64)),
]


@pytest.mark.parametrize("index", range(len(BAD)))
def test_bad_tensors_raise_the_operators_message_and_reach_nothing(recorder, index):
    qkv = BAD[index]
    want = _python_message(qkv, {})
    with pytest.raises(FlashjitError) as e:
        recorder.eager.dense(*qkv, *NO_SCALARS)
    assert str(e.value) == want
    assert not recorder.calls


def test_a_dtype_the_fast_path_cannot_name_is_left_to_the_operator(recorder):
    q = _f(2, 8, 4, 64)
    assert recorder.eager.dense(q.to(torch.float8_e8m0fnu), q, q, *NO_SCALARS) is NotImplemented
    assert not recorder.calls


def test_the_output_allocation_alone():
    eager = _needs_eager()
    q, v = torch.randn(2, 8, 4, 64, dtype=torch.float16), torch.randn(2, 16, 2, 32)
    out = eager._output_like(q, v)
    assert out.shape == (2, 8, 4, 32) and out.dtype == torch.float16 and out.is_contiguous()
    assert type(out) is torch.Tensor


def test_outputs_of_qs_shape_come_from_empty_like_others_from_new_empty():
    """empty_like(q) only where it gives what new_empty(q, shape) would: a contiguous q (its
    layout kept) and an output of q's shape; a permuted q or another head dim take new_empty."""
    eager = _needs_eager()
    used = []
    new_empty = lambda q, shape: used.append("new_empty") or torch.Tensor.new_empty(q, shape)
    empty_like = lambda q: used.append("empty_like") or torch.empty_like(q)
    eager.set_output_allocator(new_empty, empty_like)
    try:
        q = torch.randn(2, 8, 4, 64)
        permuted = torch.randn(2, 4, 8, 64).transpose(1, 2)
        ones = torch.randn(1, 1, 4, 64)[:, :, :, :]
        for q_, v, want in ((q, q, "empty_like"), (permuted, permuted, "new_empty"), (q, q[..., :32], "new_empty"),
                            (ones.expand(1, 1, 4, 64), ones, "empty_like")):
            out = eager._output_like(q_, v)
            assert used.pop() == want and out.is_contiguous() and out.shape == (*q_.shape[:3], v.shape[3])
    finally:
        ops.set_eager_output_allocator("torch")


@pytest.mark.parametrize("args", [(torch.Tensor.new_empty,), (None, torch.empty_like), (1, 2),
                                  (torch.Tensor.new_empty, None)])
def test_set_output_allocator_takes_both_functions_or_neither(args):
    eager = _needs_eager()
    with pytest.raises(TypeError, match="set_output_allocator takes"):
        eager.set_output_allocator(*args)


def test_output_allocator_names_its_choices():
    with pytest.raises(ValueError, match="FLASHJIT_EAGER_ALLOC must be torch or dlpack"):
        ops.set_eager_output_allocator("cuda")
