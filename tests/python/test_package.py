"""The flashjit Python package without a GPU: import, the binding's layout against the library,
argument checks, FlashAttention's signatures, and tracing through torch.compile and torch.export
on fake CUDA tensors (torch's FakeTensorMode needs no device). Numerics run on the device
(tests/gpu)."""
import inspect
import os
import subprocess
import sys

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import flashjit
from flashjit import FlashjitError, _abi, _library


def fake(*shape, dtype=torch.bfloat16, device="cuda"):
    return torch.empty(*shape, dtype=dtype, device=device)


@pytest.fixture
def mode():
    with FakeTensorMode(allow_non_fake_inputs=True) as m:
        yield m


def test_import_loads_neither_torch_nor_the_library():
    code = ("import sys, flashjit, flashjit._library as L; "
            "print('torch' in sys.modules, L._lib is None)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout.split()
    assert out == ["False", "True"]


def test_the_binding_matches_the_library():
    lib = _library.get()  # loads without a GPU: the driver and NVRTC load on first use
    assert lib.flashjit_args_size() == __import__("ctypes").sizeof(_abi.Args)
    assert lib.flashjit_args_v2_size() == __import__("ctypes").sizeof(_abi.ArgsV2)
    assert lib.flashjit_abi_version() == _abi.ABI_VERSION
    assert flashjit.version().startswith("flashjit 0.1.0")
    assert os.path.basename(flashjit.library_path()) == "libflashjit.so"


def test_args_v2_carry_every_option_to_the_library_layout():
    """make_args_v2 packs the struct and the option structs it points at into one buffer: read
    back through the ctypes layout, every field is what was given."""
    q, o = torch.empty(2, 64, 8, 128)[:, :, :4], torch.empty(2, 64, 4, 96)
    lse, cu, slopes, table = torch.empty(2, 4, 64), torch.zeros(3, dtype=torch.int32), torch.empty(2, 4), \
        torch.zeros(2, 9, dtype=torch.int32)
    a = _abi.make_args_v2(q, q, q, o, causal=True, lse=lse, scale=0.5, tf32=True, varlen=(cu, None, 5, 7),
                          window=(3, 0), softcap=2.0, alibi_slopes=slopes, sinks=lse, kv_lens=cu, block_table=table,
                          check=True)
    assert (a.struct_size, a.abi_version, a.mask, a.fp32_math, a.flags) == (__import__("ctypes").sizeof(_abi.ArgsV2),
                                                                          _abi.ABI_VERSION, 1, 1, _abi.CHECK_METADATA)
    assert (a.q.data, list(a.q.shape), list(a.q.stride), a.q.dtype) == (q.data_ptr(), list(q.shape), list(q.stride()), 2)
    assert (list(a.o.shape), list(a.o.stride)) == (list(o.shape), list(o.stride()))
    assert (a.softmax_scale, a.softcap, a.sinks, a.kv_lens) == (0.5, 2.0, lse.data_ptr(), cu.data_ptr())
    assert (a.lse.contents.data, list(a.lse.contents.shape), list(a.lse.contents.stride)) == \
        (lse.data_ptr(), list(lse.shape), list(lse.stride()))
    varlen = a.varlen.contents
    assert (varlen.cu_seqlens_q, varlen.cu_seqlens_k, varlen.batch, varlen.max_seqlen_q, varlen.max_seqlen_k) == \
        (cu.data_ptr(), None, 2, 5, 7)
    assert (a.window.contents.left, a.window.contents.right) == (3, 0)
    assert (a.alibi.contents.slopes, a.alibi.contents.batch_stride) == (slopes.data_ptr(), 4)
    paged = a.paged.contents
    assert (paged.block_table, paged.table_stride, paged.max_pages) == (table.data_ptr(), 9, 9)
    bare = _abi.make_args_v2(q, q, q, o)
    assert not any((bare.lse, bare.varlen, bare.window, bare.alibi, bare.paged, bare.sinks, bare.kv_lens, bare.flags))


def test_eager_calls_skip_the_dispatcher_only_where_it_changes_nothing():
    from flashjit import ops
    cpu = torch.empty(1, 8, 1, 64)
    assert not ops.direct_call_is_safe((cpu, cpu, cpu))  # the CPU tests' reference kernel must run
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(cpu)
        assert not ops.direct_call_is_safe((fake, fake, fake))


def test_nvrtc_found_in_nvidia_wheels(tmp_path, monkeypatch):
    lib_dir = tmp_path / "nvidia" / "cu13" / "lib"
    lib_dir.mkdir(parents=True)
    (lib_dir / "libnvrtc.so.13").write_bytes(b"")
    monkeypatch.setattr(sys, "path", [str(tmp_path)] + sys.path)
    assert _library.nvrtc_from_wheels() == str(lib_dir / "libnvrtc.so.13")


def test_fake_shapes(mode):
    q, k, v = fake(2, 128, 8, 64), fake(2, 256, 2, 64), fake(2, 256, 2, 32)
    out = flashjit.flash_attn_func(q, k, v, causal=True)
    assert out.shape == (2, 128, 8, 32) and out.dtype == torch.bfloat16 and out.device.type == "cuda"
    out, lse, probs = flashjit.flash_attn_func(q, k, v, return_attn_probs=True)
    assert lse.shape == (2, 8, 128) and lse.dtype == torch.float32 and probs is None
    cu = fake(4, dtype=torch.int32)
    out, lse, _ = flashjit.flash_attn_varlen_func(fake(300, 8, 64), fake(500, 2, 64), fake(500, 2, 64), cu, cu, 200,
                                                   300, causal=True, return_attn_probs=True)
    assert out.shape == (300, 8, 64) and lse.shape == (8, 300)
    cache = fake(4, 1024, 2, 64)
    out, lse = flashjit.flash_attn_with_kvcache(fake(4, 1, 8, 64), cache, cache, cache_seqlens=fake(4, dtype=torch.int32),
                                               return_softmax_lse=True)
    assert out.shape == (4, 1, 8, 64) and lse.shape == (4, 8, 1)


def test_left_padded_cache_traces_with_fake_tensors(mode):
    cache = fake(4, 1024, 2, 64)
    lens = fake(4, dtype=torch.int32)
    out = flashjit.flash_attn_with_kvcache(fake(4, 1, 8, 64), cache, cache, k=fake(4, 1, 2, 64), v=fake(4, 1, 2, 64),
                                           cache_seqlens=lens, cache_leftpad=fake(4, dtype=torch.int32), causal=True)
    assert out.shape == (4, 1, 8, 64)


def test_paged_cache_and_appended_tokens(mode):
    pool_k, pool_v = fake(64, 16, 2, 64), fake(64, 16, 2, 64)
    table = fake(4, 16, dtype=torch.int32)
    lens = fake(4, dtype=torch.int32)
    out = flashjit.flash_attn_with_kvcache(fake(4, 3, 8, 64), pool_k, pool_v, k=fake(4, 3, 2, 64), v=fake(4, 3, 2, 64),
                                           cache_seqlens=lens, block_table=table, causal=True)
    assert out.shape == (4, 3, 8, 64)


@pytest.mark.parametrize("case, needle", [
    (lambda: flashjit.flash_attn_func(fake(2, 8, 4, 64, device="cpu"), fake(2, 8, 4, 64), fake(2, 8, 4, 64)), "q is on cpu"),
    (lambda: flashjit.flash_attn_func(fake(2, 8, 4, 64), fake(2, 8, 4, 64, dtype=torch.float16), fake(2, 8, 4, 64)),
     "one dtype"),
    (lambda: flashjit.flash_attn_func(fake(2, 8, 4, 64, dtype=torch.int8), fake(2, 8, 4, 64), fake(2, 8, 4, 64)),
     "q must be float16, bfloat16 or float32"),
    (lambda: flashjit.flash_attn_func(fake(8, 4, 64), fake(8, 4, 64), fake(8, 4, 64)), "q must be [batch, seq, heads, head_dim]"),
    (lambda: flashjit.flash_attn_varlen_func(fake(30, 4, 64), fake(30, 4, 64), fake(30, 4, 64), fake(3, dtype=torch.int64),
                                             fake(3, dtype=torch.int32), 20, 20), "cu_seqlens_q must be int32"),
    (lambda: flashjit.flash_attn_varlen_func(fake(30, 4, 64), fake(30, 4, 64), fake(30, 4, 64), fake(3, dtype=torch.int32),
                                             fake(4, dtype=torch.int32), 20, 20), "cu_seqlens_k must have shape [3]"),
    (lambda: flashjit.flash_attn_varlen_func(fake(30, 4, 64), fake(30, 4, 64), fake(30, 4, 64),
                                             fake(3, dtype=torch.int32, device="cpu"), fake(3, dtype=torch.int32), 20, 20),
     "cu_seqlens_q is on cpu"),
    (lambda: flashjit.flash_attn_func(fake(2, 8, 4, 64), fake(2, 8, 4, 64), fake(2, 8, 4, 64),
                                      alibi_slopes=fake(3, dtype=torch.float32)), "alibi_slopes must have shape [4]"),
    (lambda: flashjit.flash_attn_func(fake(2, 8, 4, 64), fake(2, 8, 4, 64), fake(2, 8, 4, 64), sinks=fake(4)),
     "sinks must be float32"),
    (lambda: flashjit.flash_attn_with_kvcache(fake(2, 1, 4, 64), fake(8, 16, 4, 64), fake(8, 16, 4, 64),
                                              cache_seqlens=fake(2, dtype=torch.int32), block_table=fake(3, 4, dtype=torch.int32)),
     "block_table must have shape [2, *]"),
    (lambda: flashjit.flash_attn_with_kvcache(fake(2, 1, 4, 64), fake(2, 16, 4, 64), fake(2, 16, 4, 64),
                                              cache_seqlens=fake(2, dtype=torch.int32), cache_leftpad=fake(2)),
     "cache_leftpad must be int32"),
    (lambda: flashjit.flash_attn_with_kvcache(fake(2, 1, 4, 64), fake(2, 16, 4, 64), fake(2, 16, 4, 64),
                                              cache_seqlens=fake(2, dtype=torch.int32),
                                              cache_leftpad=fake(3, dtype=torch.int32)), "cache_leftpad must have shape [2]"),
])
def test_bad_arguments_name_the_argument_and_rule(mode, case, needle):
    with pytest.raises(FlashjitError) as e:
        case()
    assert needle in str(e.value)


@pytest.mark.parametrize("call, name", [
    (lambda q: flashjit.flash_attn_func(q, q, q, dropout_p=0.1), "dropout_p"),
    (lambda q: flashjit.flash_attn_varlen_func(q[0], q[0], q[0], fake(3, dtype=torch.int32), fake(3, dtype=torch.int32), 4, 4,
                                              dropout_p=0.5), "dropout_p"),
    (lambda q: flashjit.flash_attn_varlen_func(q[0], q[0], q[0], fake(3, dtype=torch.int32), fake(3, dtype=torch.int32), 4, 4,
                                              seqused_q=fake(2, dtype=torch.int32)), "seqused_q"),
])
def test_what_flashjit_cannot_do_raises_naming_the_argument(mode, call, name):
    with pytest.raises(NotImplementedError, match=name):
        call(fake(2, 8, 4, 64))


# FlashAttention-2's signatures (flash_attn/flash_attn_interface.py, v2.8): each name at the
# same position, so positional and keyword calls written for it mean the same here.
FA2 = {
    "flash_attn_func": ["q", "k", "v", "dropout_p", "softmax_scale", "causal", "window_size", "softcap", "alibi_slopes",
                        "deterministic", "return_attn_probs"],
    "flash_attn_varlen_func": ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "dropout_p",
                               "softmax_scale", "causal", "window_size", "softcap", "alibi_slopes", "deterministic",
                               "return_attn_probs", "block_table"],
    "flash_attn_with_kvcache": ["q", "k_cache", "v_cache", "k", "v", "rotary_cos", "rotary_sin", "cache_seqlens",
                                "cache_batch_idx", "cache_leftpad", "block_table", "softmax_scale", "causal",
                                "window_size", "softcap", "rotary_interleaved", "alibi_slopes", "num_splits",
                                "return_softmax_lse"],
}


@pytest.mark.parametrize("name", sorted(FA2))
def test_flash_attention_signatures(name):
    params = list(inspect.signature(getattr(flashjit, name)).parameters)
    assert params[:len(FA2[name])] == FA2[name]


def test_autograd_runs_on_its_own_operator():
    # The operator itself has no autograd kernel (none runs on its hot path): the public functions
    # call attention_train where autograd records (tests/python/test_autograd.py).
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("flashjit::attention", "Autograd")
    assert torch._C._dispatch_has_kernel_for_dispatch_key("flashjit::attention_train", "Autograd")


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(512, 3 * 512, dtype=torch.bfloat16, device="cuda")
        self.o = torch.nn.Linear(512, 512, dtype=torch.bfloat16, device="cuda")

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, 8, 64).unbind(2)
        return self.o(flashjit.flash_attn_func(q, k, v, causal=True).reshape(b, s, 512))


def test_torch_compile_fullgraph_traces_the_op(mode):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    y = torch.compile(Block(), backend=backend, fullgraph=True)(fake(2, 128, 512))
    assert y.shape == (2, 128, 512)
    assert len(graphs) == 1
    # The Linear weights require grad: autograd records, and the training operator is traced.
    assert "flashjit.attention_train" in [str(n.target) for n in graphs[0].graph.nodes]


def test_torch_export_keeps_the_op():
    with FakeTensorMode(allow_non_fake_inputs=True):
        ep = torch.export.export(Block(), (fake(2, 128, 512),))
        assert "flashjit.attention_train.default" in [str(n.target) for n in ep.graph.nodes]
        with torch.no_grad():
            ep = torch.export.export(Block(), (fake(2, 128, 512),))
        assert "flashjit.attention_dense.default" in [str(n.target) for n in ep.graph.nodes]


def meta(*shape, dtype=torch.bfloat16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def test_precompile_for_a_named_arch_without_a_gpu():
    q, kv = meta(8, 4096, 32, 128), meta(8, 4096, 8, 128)
    assert flashjit.precompile(q, kv, kv, causal=True, arch="sm_90a").startswith("fa3_sm90-bf16-dqk128-dv128-causal-gqa-")
    name = flashjit.precompile(q, kv, kv, arch="sm_80", return_lse=True, sinks=meta(32, dtype=torch.float32),
                               window_size=(128, 0))
    assert name.startswith("fa2_sm80-bf16-dqk128-dv128-gqa-lse-window-sinks-")
    lens, table = meta(8, dtype=torch.int32), meta(8, 64, dtype=torch.int32)
    name = flashjit.precompile(meta(8, 1, 32, 128), meta(512, 16, 8, 128), meta(512, 16, 8, 128), kv_lens=lens,
                               block_table=table, arch="sm_90a")
    assert name.startswith("decode_sm80-bf16-dqk128-dv128-gqa-kvlens-paged-")
    cu = meta(4, dtype=torch.int32)
    name = flashjit.precompile(meta(300, 16, 64, dtype=torch.float16), meta(500, 4, 64, dtype=torch.float16),
                               meta(500, 4, 64, dtype=torch.float16), cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=200,
                               max_seqlen_k=300, causal=True, arch="sm_90a")
    assert name.startswith("fa3_sm90-f16-dqk64-dv64-causal-gqa-varlen-")
    assert os.listdir(os.environ["FLASHJIT_CACHE_DIR"])  # compiled into the disk cache


def test_precompile_refuses_an_unknown_arch_by_name():
    with pytest.raises(FlashjitError, match="arch must look like sm_80"):
        flashjit.precompile(meta(1, 8, 4, 64), meta(1, 8, 4, 64), meta(1, 8, 4, 64), arch="sm_7x")


@pytest.mark.parametrize("window, causal, want", [((-1, -1), False, (-1, -1)), ((-1, -1), True, (-1, 0)),
                                                  ((4, 77), True, (4, 0)), ((4, 77), False, (4, 77)),
                                                  (None, True, (-1, 0)), ((8, None), False, (8, -1))])
def test_causal_ends_each_row_at_its_diagonal_whatever_the_window(window, causal, want):
    """FlashAttention's rule (its own tests pass causal=True with a random right window)."""
    from flashjit import interface
    assert interface._window(window, causal) == want


def test_the_engines_sm_margin_is_set_and_checked_by_name():
    flashjit.set_sm_margin(16)
    flashjit.set_sm_margin(0)
    with pytest.raises(flashjit.FlashjitError, match="sm_margin is -1 but must be 0 to 4096"):
        flashjit.set_sm_margin(-1)
