"""dense()'s eager fast path (eager/) on a GPU (run on the device; skipped without CUDA).

The fast path's output equals the operator's (torch.ops.flashjit.attention_dense) bit for bit,
layout included, across dtypes, masks, windows, softcap, GQA and odd strides, and it was taken
(ops.eager_calls()). It runs on the current stream, captures into CUDA graphs (its workspace from
the graph's pool) and replays; bad inputs raise the operator's messages; what it declines (another
device, subclasses, CPU tensors) still runs; torch.compile(fullgraph=True) keeps the operator.
Whether record_stream holds its output's block is reported (xfail where it does not).
FLASHJIT_REQUIRE_EAGER=1 fails instead of skipping where the extension is not in use."""
import os

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the device runs this file)")

if torch.cuda.is_available():
    import flashjit
    from flashjit import FlashjitError, ops


@pytest.fixture(autouse=True)
def eager():
    if ops.eager_reason() is not None:
        why = "the eager fast path is not in use: %s" % ops.eager_reason()
        if os.environ.get("FLASHJIT_REQUIRE_EAGER") == "1":
            pytest.fail(why)
        pytest.skip(why)
    with torch.no_grad():
        yield ops._EAGER


def randn(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape, device="cuda", dtype=dtype)


def op(q, k, v, *scalars):
    """The operator itself, with its errors as the public functions raise them."""
    try:
        return torch.ops.flashjit.attention_dense(q, k, v, *scalars)
    except RuntimeError as e:
        raise FlashjitError(str(e)) from None


def fast(q, k, v, *scalars):
    """ops.dense(), asserting that it took the fast path."""
    before = ops.eager_calls()
    out = ops.dense(q, k, v, *scalars)
    assert ops.eager_calls() == before + 1, "the fast path was not taken"
    return out


def assert_same(out, want):
    assert type(out) is torch.Tensor and out.shape == want.shape and out.stride() == want.stride()
    assert out.dtype == want.dtype and out.device == want.device and not out.requires_grad
    assert torch.equal(out, want), "not bit for bit: max diff %g" % (out.float() - want.float()).abs().max()


CASES = [  # name, q, k, v, (softmax_scale, causal, window_left, window_right, softcap)
    ("bf16", lambda: (randn(2, 256, 8, 128), randn(2, 256, 8, 128), randn(2, 256, 8, 128)), (0.0, False, -1, -1, 0.0)),
    ("fp16 causal gqa", lambda: tuple(randn(2, 333, h, 64, dtype=torch.float16) for h in (8, 2, 2)),
     (0.0, True, -1, -1, 0.0)),
    ("bottom-right causal", lambda: (randn(1, 128, 16, 128), randn(1, 517, 2, 128), randn(1, 517, 2, 128)),
     (0.0, True, -1, -1, 0.0)),
    ("window", lambda: tuple(randn(2, 300, 8, 64) for _ in range(3)), (0.0, True, 64, 0, 0.0)),
    ("two-sided window fp16", lambda: tuple(randn(1, 200, 4, 128, dtype=torch.float16) for _ in range(3)),
     (0.2, False, 32, 48, 0.0)),
    ("softcap gqa", lambda: (randn(2, 256, 8, 128), randn(2, 256, 4, 128), randn(2, 256, 4, 128)),
     (0.0, True, -1, -1, 30.0)),
    ("decode (split keys)", lambda: (randn(2, 1, 16, 128), randn(2, 1000, 4, 128), randn(2, 1000, 4, 128)),
     (0.0, False, -1, -1, 0.0)),
    ("fp32", lambda: tuple(randn(1, 100, 2, 64, dtype=torch.float32) for _ in range(3)), (0.0, True, -1, -1, 0.0)),
    ("head dim 256", lambda: tuple(randn(1, 77, h, 256, dtype=torch.float16) for h in (2, 1, 1)),
     (0.0, False, -1, -1, 0.0)),
    ("odd strides", lambda: (randn(2, 200, 12, 64)[:, :, 2:10], randn(2, 8, 200, 64).transpose(1, 2),
                             randn(200, 2, 8, 64).permute(1, 0, 2, 3)), (0.125, True, -1, -1, 0.0)),
    ("head dims differ", lambda: (randn(2, 64, 4, 128), randn(2, 64, 4, 128), randn(2, 64, 4, 64)),
     (0.0, False, -1, -1, 0.0)),
    ("a view into storage", lambda: (randn(40, 256, 64)[8:24].view(2, 8, 256, 64).transpose(1, 2),) * 3,
     (0.0, False, -1, -1, 0.0)),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_fast_path_equals_the_operator_bit_for_bit(case):
    _, make, scalars = case
    q, k, v = make()
    assert_same(fast(q, k, v, *scalars), op(q, k, v, *scalars))


def test_a_non_contiguous_head_dim_runs_or_fails_as_the_operator_does():
    """A head_dim stride of 2: the engine's narrow-access kernels or its refusal, either way the
    operator's outcome."""
    q, k, v = randn(1, 64, 2, 128)[..., ::2], randn(1, 64, 2, 64), randn(1, 64, 2, 128)[..., 1::2]
    try:
        want = op(q, k, v, 0.0, True, -1, -1, 0.0)
    except FlashjitError as e:
        before = ops.eager_calls()
        assert _message(ops.dense, q, k, v, 0.0, True, -1, -1, 0.0) == str(e)
        assert ops.eager_calls() == before
        return
    assert_same(fast(q, k, v, 0.0, True, -1, -1, 0.0), want)


def test_flash_attn_func_and_call_take_it():
    q, k, v = randn(2, 128, 8, 64), randn(2, 128, 2, 64), randn(2, 128, 2, 64)
    before = ops.eager_calls()
    out = flashjit.flash_attn_func(q, k, v, causal=True, window_size=(32, 0), softcap=10.0)
    out2, lse = ops.call(q, k, v, None, None, 0, 0, None, None, None, None, 0.0, True, 32, 0, 10.0, False, False)
    assert ops.eager_calls() == before + 2 and lse is None
    assert_same(out, op(q, k, v, 0.0, True, 32, 0, 10.0))
    assert_same(out2, out)


FA_CALLS = [  # flash_attn_func's keywords and the operator's scalars they mean
    (dict(), (0.0, False, -1, -1, 0.0)),
    (dict(causal=True, window_size=(16, 7)), (0.0, True, 16, 0, 0.0)),
    (dict(softmax_scale=0.3, window_size=[None, 5], softcap=None), (0.3, False, -1, 5, 0.0)),
    (dict(softmax_scale=1, causal=1, softcap=4), (1.0, True, -1, -1, 4.0)),
]


@pytest.mark.parametrize("given, scalars", FA_CALLS)
def test_flash_attn_func_reads_its_arguments_in_the_fast_path(given, scalars):
    """flash_attn_func's dense calls go straight to the extension's flash_attn(), which reads
    FlashAttention's conventions itself: the result is the operator's for the same meaning."""
    q, k, v = randn(2, 96, 8, 64), randn(2, 96, 2, 64), randn(2, 96, 2, 64)
    before = ops.eager_calls()
    out = flashjit.flash_attn_func(q, k, v, **given)
    assert ops.eager_calls() == before + 1
    assert_same(out, op(q, k, v, *scalars))


# GPU cycles the side stream sleeps before its copy, so that a kernel on another stream would run first.
SLEEP_CYCLES = 50_000_000


def test_the_current_stream_is_used():
    q, k, v = (randn(4, 512, 8, 128) for _ in range(3))
    q_new = randn(4, 512, 8, 128)
    want = op(q_new, k, v, 0.0, True, -1, -1, 0.0)
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
        q.copy_(q_new)
        out = fast(q, k, v, 0.0, True, -1, -1, 0.0)  # reads q after the copy only on this stream
    side.synchronize()
    assert_same(out, want)


@pytest.mark.parametrize("shape", [(2, 256, 8, 128, 8), (2, 1, 16, 1000, 4)], ids=["prefill", "decode"])
def test_cuda_graph_capture_and_replay(shape):
    batch, seq_q, heads_q, seq_k, heads_kv = shape
    q, k, v = randn(batch, seq_q, heads_q, 128), randn(batch, seq_k, heads_kv, 128), randn(batch, seq_k, heads_kv, 128)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up on the capture stream's kind of stream: compile, plan
        for _ in range(2):
            fast(q, k, v, 0.0, True, -1, -1, 0.0)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    before = ops.eager_calls()
    with torch.cuda.graph(graph):
        out = flashjit.flash_attn_func(q, k, v, causal=True)
    assert ops.eager_calls() == before + 1  # captured through the fast path
    for _ in range(2):
        for t in (q, k, v):
            t.copy_(torch.randn_like(t))
        graph.replay()
        torch.cuda.synchronize()
        assert_same(out, op(q, k, v, 0.0, True, -1, -1, 0.0))


def _reused_after_record_stream(make):
    """Whether the block of a tensor make() returns on this stream, recorded on a busy side stream
    and freed, is handed out again at once: PyTorch's allocator must hold it until the side stream's
    work is done (record_stream), so a new allocation of its size gets another block."""
    side = torch.cuda.Stream()
    out = make()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(SLEEP_CYCLES)
    out.record_stream(side)
    address, size = out.data_ptr(), out.numel()
    del out
    reused = torch.empty(size, dtype=torch.bfloat16, device="cuda").data_ptr() == address
    side.synchronize()
    return reused


def test_record_stream_on_the_output():
    """The operator's output honours record_stream (this checks the method), and so does the fast
    path's with its default allocator (Tensor.new_empty: storage the caching allocator owns). With
    FLASHJIT_EAGER_ALLOC=dlpack the output is managed_tensor_to_py_object_no_sync over a DLPack
    tensor: from_blob storage, whose deleter is not the caching allocator's, so record_stream may do
    nothing (why that allocator is not the default; reported as xfail rather than failed)."""
    q, k, v = (randn(1, 37, 3, 64) for _ in range(3))
    assert not _reused_after_record_stream(lambda: op(q, k, v, 0.0, False, -1, -1, 0.0))
    assert not _reused_after_record_stream(lambda: fast(q, k, v, 0.0, False, -1, -1, 0.0))
    ops.set_eager_output_allocator("dlpack")
    try:
        reused = _reused_after_record_stream(lambda: fast(q, k, v, 0.0, False, -1, -1, 0.0))
    finally:
        ops.set_eager_output_allocator("torch")
    if reused:
        pytest.xfail("record_stream on the dlpack allocator's output did not hold its block (from_blob storage)")


@pytest.mark.parametrize("which", ["torch", "dlpack"])
def test_both_allocators_give_the_operator_output(which):
    q, k, v = (randn(2, 65, 4, 96) for _ in range(3))
    ops.set_eager_output_allocator(which)
    try:
        before = ops.eager_calls()
        out = fast(q, k, v, 0.0, True, -1, -1, 0.0)
        assert ops.eager_calls() == before + 1
    finally:
        ops.set_eager_output_allocator("torch")
    assert_same(out, op(q, k, v, 0.0, True, -1, -1, 0.0))


def _message(fn, *args):
    with pytest.raises(FlashjitError) as e:
        fn(*args)
    return str(e.value)


BAD = [  # q, k, v: the operator's checks, the engine's refusals, and what the fast path declines
    ("float64", lambda: (randn(1, 8, 2, 64, dtype=torch.float64),) * 3),
    ("dtypes differ", lambda: (randn(1, 8, 2, 64), randn(1, 8, 2, 64, dtype=torch.float16), randn(1, 8, 2, 64))),
    ("3-d q", lambda: (randn(8, 2, 64), randn(1, 8, 2, 64), randn(1, 8, 2, 64))),
    ("3-d v", lambda: (randn(1, 8, 2, 64), randn(1, 8, 2, 64), randn(8, 2, 64))),
    ("heads", lambda: (randn(1, 8, 3, 64), randn(1, 8, 2, 64), randn(1, 8, 2, 64))),
    ("batches", lambda: (randn(2, 8, 2, 64), randn(1, 8, 2, 64), randn(1, 8, 2, 64))),
    ("head dim", lambda: (randn(1, 8, 2, 1024),) * 3),
    ("k on the CPU", lambda: (randn(1, 8, 2, 64), torch.randn(1, 8, 2, 64, dtype=torch.bfloat16), randn(1, 8, 2, 64))),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_inputs_raise_the_operators_messages(case):
    q, k, v = case[1]()
    before = ops.eager_calls()
    want = _message(op, q, k, v, 0.0, False, -1, -1, 0.0)
    assert _message(ops.dense, q, k, v, 0.0, False, -1, -1, 0.0) == want
    assert _message(flashjit.flash_attn_func, q, k, v) == want
    assert ops.eager_calls() == before


def test_what_the_fast_path_declines_still_runs():
    q, k, v = (randn(1, 64, 4, 64) for _ in range(3))
    want = op(q, k, v, 0.0, True, -1, -1, 0.0)

    class Plain(torch.Tensor):
        pass
    before = ops.eager_calls()
    out = ops.dense(q.as_subclass(Plain), k, v, 0.0, True, -1, -1, 0.0)
    assert torch.equal(out, want)
    if torch.cuda.device_count() > 1:  # q on a device that is not the current one: the operator switches
        q1, k1, v1 = (t.to("cuda:1") for t in (q, k, v))
        out = ops.dense(q1, k1, v1, 0.0, True, -1, -1, 0.0)
        assert out.device == q1.device and torch.equal(out.cpu(), want.cpu())
    assert ops.eager_calls() == before


def test_torch_compile_keeps_the_operator():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append([str(n.target) for n in gm.graph.nodes])
        return gm.forward

    def attention(x, k, v):
        return flashjit.flash_attn_func(x * 2, k, v, causal=True)
    q, k, v = (randn(1, 64, 4, 64) for _ in range(3))
    torch._dynamo.reset()
    compiled = torch.compile(attention, backend=backend, fullgraph=True)
    compiled(q, k, v)  # traces
    before = ops.eager_calls()
    out = compiled(q, k, v)
    torch._dynamo.reset()
    assert "flashjit.attention_dense" in graphs[0]
    assert ops.eager_calls() == before  # the graph calls the operator
    assert torch.equal(out, op(q * 2, k, v, 0.0, True, -1, -1, 0.0))
