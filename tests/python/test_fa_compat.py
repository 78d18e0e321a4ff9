"""tests/fa_compat, the stand-in flash_attn / flash_attn_interface that runs FlashAttention's own test
files against flashjit (bench/device_fa_tests.sh): positional order as FA2's and FA3's public
functions, packed tensors split into views, every argument reaching flashjit's call, unsupported
features refused by name, deterministic=True passed on to the backward, and the plain-torch
bert_padding and rotary helpers. No GPU: flashjit's call is replaced by a recorder. Then the tally
(fa_compat_plugin: the backward's refusals counted unsupported by feature) on a synthetic file, and
the runner's MODE=train and MODE=forward with COLLECT_ONLY=1 on synthetic FlashAttention files."""
import importlib
import inspect
import math
import pathlib
import sys

import pytest

torch = pytest.importorskip("torch")

SHIM = pathlib.Path(__file__).resolve().parents[1] / "fa_compat"

# Positional parameters of FlashAttention's public functions (FA2 2.8, FA3 hopper).
FA2 = {
    "flash_attn_func": "q k v dropout_p softmax_scale causal window_size softcap alibi_slopes deterministic "
                       "return_attn_probs",
    "flash_attn_kvpacked_func": "q kv dropout_p softmax_scale causal window_size softcap alibi_slopes deterministic "
                                "return_attn_probs",
    "flash_attn_qkvpacked_func": "qkv dropout_p softmax_scale causal window_size softcap alibi_slopes deterministic "
                                 "return_attn_probs",
    "flash_attn_varlen_func": "q k v cu_seqlens_q cu_seqlens_k max_seqlen_q max_seqlen_k dropout_p softmax_scale "
                              "causal window_size softcap alibi_slopes deterministic return_attn_probs block_table",
    "flash_attn_varlen_kvpacked_func": "q kv cu_seqlens_q cu_seqlens_k max_seqlen_q max_seqlen_k dropout_p "
                                       "softmax_scale causal window_size softcap alibi_slopes deterministic "
                                       "return_attn_probs",
    "flash_attn_varlen_qkvpacked_func": "qkv cu_seqlens max_seqlen dropout_p softmax_scale causal window_size "
                                        "softcap alibi_slopes deterministic return_attn_probs",
    "flash_attn_with_kvcache": "q k_cache v_cache k v rotary_cos rotary_sin cache_seqlens cache_batch_idx "
                               "cache_leftpad block_table softmax_scale causal window_size softcap "
                               "rotary_interleaved alibi_slopes num_splits return_softmax_lse",
}
FA3 = {
    "flash_attn_func": "q k v softmax_scale causal qv q_descale k_descale v_descale window_size attention_chunk "
                       "softcap num_splits pack_gqa deterministic sm_margin return_attn_probs",
    "flash_attn_varlen_func": "q k v cu_seqlens_q cu_seqlens_k max_seqlen_q max_seqlen_k seqused_q seqused_k "
                              "softmax_scale causal qv q_descale k_descale v_descale window_size attention_chunk "
                              "softcap num_splits pack_gqa deterministic sm_margin return_attn_probs",
    "flash_attn_with_kvcache": "q k_cache v_cache k v qv rotary_cos rotary_sin cache_seqlens cache_batch_idx "
                               "cache_leftpad page_table cu_seqlens_q cu_seqlens_k_new max_seqlen_q rotary_seqlens "
                               "q_descale k_descale v_descale softmax_scale causal window_size attention_chunk "
                               "softcap rotary_interleaved scheduler_metadata num_splits pack_gqa sm_margin "
                               "return_softmax_lse",
}


@pytest.fixture
def shim(monkeypatch):
    """(fa2, fa3, calls): the shim's modules with flashjit's _attention (and ops.dense) recording its calls."""
    monkeypatch.syspath_prepend(str(SHIM))
    for name in [m for m in sys.modules if m == "flash_attn" or m.startswith("flash_attn.") or
                 m == "flash_attn_interface"]:
        monkeypatch.delitem(sys.modules, name)
    from flashjit import interface
    calls = []

    def record(q, k, v, **kw):
        calls.append((q, k, v, kw))
        return q.new_zeros(tuple(q.shape[:-1]) + (v.shape[-1],)), torch.zeros(1)

    monkeypatch.setattr(interface, "_attention", record)
    # flash_attn_func's dense calls take ops.dense directly (scale 0: the default; windows as normalized).
    monkeypatch.setattr(interface.ops, "dense", lambda q, k, v, scale, causal, left, right, softcap, deterministic=False:
                        record(q, k, v, softmax_scale=scale or None, causal=causal, window_size=(left, right),
                               softcap=softcap, return_lse=False, deterministic=deterministic)[0])
    fa2 = importlib.import_module("flash_attn")
    fa3 = importlib.import_module("flash_attn_interface")
    assert pathlib.Path(fa2.__file__).parent.parent == SHIM and pathlib.Path(fa3.__file__).parent == SHIM
    return fa2, fa3, calls


@pytest.mark.parametrize("version", ["fa2", "fa3"])
def test_positional_order_is_flash_attentions(shim, version):
    module = shim[0] if version == "fa2" else shim[1]
    for name, params in (FA2 if version == "fa2" else FA3).items():
        got = [p.name for p in inspect.signature(getattr(module, name)).parameters.values()
               if p.kind == p.POSITIONAL_OR_KEYWORD]
        assert got == params.split(), name


def test_fa2_packed_variants_pass_views_and_every_argument(shim):
    fa2, _, calls = shim
    q, kv = torch.randn(2, 5, 4, 8), torch.randn(2, 7, 2, 2, 8)
    alibi = torch.rand(4)
    out, lse, s_dmask = fa2.flash_attn_kvpacked_func(q, kv, 0.0, 0.5, True, (3, 0), 1.5, alibi, False, True)
    _, k, v, kw = calls[-1]
    assert k.data_ptr() == kv[:, :, 0].data_ptr() and v.data_ptr() == kv[:, :, 1].data_ptr()
    assert (kw["softmax_scale"], kw["causal"], tuple(kw["window_size"]), kw["softcap"], kw["return_lse"]) == \
        (0.5, True, (3, 0), 1.5, True)
    assert kw["alibi_slopes"] is alibi and s_dmask is None
    qkv = torch.randn(9, 3, 4, 8)
    cu = torch.tensor([0, 4, 9], dtype=torch.int32)
    fa2.flash_attn_varlen_qkvpacked_func(qkv, cu, 5, 0.0, 0.25, True)
    q_, k_, v_, kw = calls[-1]
    assert [t.data_ptr() for t in (q_, k_, v_)] == [qkv[:, i].data_ptr() for i in range(3)]
    assert kw["cu_seqlens_q"] is cu and kw["cu_seqlens_k"] is cu and kw["max_seqlen_q"] == kw["max_seqlen_k"] == 5
    assert (kw["softmax_scale"], kw["causal"]) == (0.25, True)


def test_fa2_kvcache_appends_and_counts_the_new_keys(shim):
    fa2, _, calls = shim
    q = torch.randn(2, 1, 4, 8)
    k_cache, v_cache, new = torch.zeros(2, 10, 2, 8), torch.zeros(2, 10, 2, 8), torch.ones(2, 1, 2, 8)
    lens = torch.tensor([3, 4], dtype=torch.int32)
    fa2.flash_attn_with_kvcache(q, k_cache, v_cache, new, new, None, None, lens, None, None, None, 0.3, True)
    kw = calls[-1][3]
    assert kw["kv_lens"].tolist() == [4, 5] and (kw["softmax_scale"], kw["causal"]) == (0.3, True)
    assert k_cache[0, 3].eq(1).all() and k_cache[1, 4].eq(1).all() and k_cache.sum() == 2 * 2 * 8


def test_fa3_order_returns_and_speed_only_arguments(shim):
    _, fa3, calls = shim
    q = torch.randn(2, 5, 4, 8)
    out, lse = fa3.flash_attn_func(q, q, q, 0.2, True, None, None, None, None, [2, 0], 0, 3.0, 3, True, False, 0,
                                   True)
    kw = calls[-1][3]
    assert (kw["softmax_scale"], kw["causal"], list(kw["window_size"]), kw["softcap"], kw["return_lse"]) == \
        (0.2, True, [2, 0], 3.0, True)
    cu = torch.tensor([0, 2, 5], dtype=torch.int32)
    used = torch.tensor([2, 3], dtype=torch.int32)
    fa3.flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, 3, 3, None, used, 0.7)
    kw = calls[-1][3]
    assert kw["kv_lens"] is used and kw["softmax_scale"] == 0.7
    plan = fa3.get_scheduler_metadata(2, 1, 10, 4, 2, 8, torch.tensor([3, 4], dtype=torch.int32))
    cache = torch.zeros(3, 4, 2, 8)  # pages of 4
    table = torch.tensor([[0, 1], [2, 0]], dtype=torch.int32)
    fa3.flash_attn_with_kvcache(q[:, :1], cache, cache, cache_seqlens=torch.tensor([5, 3], dtype=torch.int32),
                                page_table=table, scheduler_metadata=plan, num_splits=3, pack_gqa=True)
    kw = calls[-1][3]
    assert kw["block_table"] is table and kw["kv_lens"].tolist() == [5, 3]


@pytest.mark.parametrize("call, feature", [
    ("fa2.flash_attn_func(q, q, q, 0.1)", "dropout_p"),
    ("fa3.flash_attn_func(q, q, q, qv=q)", "qv"),
    ("fa3.flash_attn_func(q, q, q, q_descale=one)", "descale"),
    ("fa3.flash_attn_func(q, q, q, attention_chunk=8)", "attention_chunk"),
    ("fa3.flash_attn_varlen_func(q[0], q[0], q[0], cu, cu, 3, 3, seqused_q=lens)", "seqused_q"),
    ("fa3.flash_attn_with_kvcache(q, q, q, cache_seqlens=lens, cu_seqlens_q=cu)", "cu_seqlens_q"),
    ("fa3.flash_attn_with_kvcache(q, q, q, cache_seqlens=lens, scheduler_metadata=one)", "scheduler_metadata"),
    ("fa2.flash_attn_interface._get_block_size_n('cuda', 64, False, False)", "S_dmask"),
])
def test_unsupported_features_raise_by_name(shim, call, feature):
    fa2, fa3, calls = shim
    names = {"fa2": fa2, "fa3": fa3, "q": torch.randn(2, 5, 4, 8), "one": torch.ones(2, 2),
             "cu": torch.tensor([0, 2, 5], dtype=torch.int32), "lens": torch.tensor([1, 1], dtype=torch.int32)}
    with pytest.raises(NotImplementedError, match=feature):
        eval(call, names)
    assert not calls


def test_unpad_and_pad_input(shim):
    from flash_attn.bert_padding import pad_input, unpad_input
    x = torch.randn(3, 5, 2, 4, requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]], dtype=torch.bool)
    packed, indices, cu, max_len, used = unpad_input(x, mask)
    assert indices.tolist() == [0, 1, 2, 5, 6, 7, 8, 9, 10] and cu.tolist() == [0, 3, 8, 9]
    assert max_len == 5 and used.tolist() == [3, 5, 1] and cu.dtype == torch.int32
    back = pad_input(packed, indices, 3, 5)
    assert torch.equal(back[mask], x[mask]) and back[~mask].eq(0).all()
    back.sum().backward()
    assert torch.equal(x.grad, mask[..., None, None].expand_as(x).float())
    unused = torch.tensor([[0, 0, 0, 1, 0], [0] * 5, [0, 1, 0, 0, 0]], dtype=torch.bool)
    _, indices, cu, _, used = unpad_input(x, mask, unused)
    assert cu.tolist() == [0, 4, 9, 11] and used.tolist() == [3, 5, 1]


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("offsets", [0, 2, "tensor"])
def test_apply_rotary_emb_matches_the_formula(shim, interleaved, offsets):
    from flash_attn.layers.rotary import apply_rotary_emb
    torch.manual_seed(0)
    b, s, h, d, rd, table = 2, 6, 3, 8, 4, 7
    x = torch.randn(b, s, h, d, dtype=torch.float64)
    angle = torch.rand(table, rd // 2, dtype=torch.float64) * 3
    cos, sin = angle.cos(), angle.sin()
    off = torch.tensor([1, 3]) if offsets == "tensor" else offsets
    out = apply_rotary_emb(x, cos, sin, interleaved=interleaved, seqlen_offsets=off)
    ref = x.clone()
    for bi in range(b):
        for t in range(s):
            p = t + (int(off[bi]) if offsets == "tensor" else off)
            for i in range(rd // 2):
                a, c = (2 * i, 2 * i + 1) if interleaved else (i, i + rd // 2)
                co, si = (cos[p, i], sin[p, i]) if p < table else (1.0, 0.0)  # past the table: unrotated
                ref[bi, t, :, a] = x[bi, t, :, a] * co - x[bi, t, :, c] * si
                ref[bi, t, :, c] = x[bi, t, :, a] * si + x[bi, t, :, c] * co
    assert torch.allclose(out, ref, atol=1e-12)
    cu = torch.tensor([0, s, 2 * s], dtype=torch.int32)
    packed = apply_rotary_emb(x.reshape(b * s, h, d), cos, sin, interleaved=interleaved, seqlen_offsets=off,
                              cu_seqlens=cu, max_seqlen=s)
    assert torch.allclose(packed, out.reshape(b * s, h, d), atol=1e-12)
    assert math.isfinite(out.abs().max().item())


@pytest.mark.parametrize("version, call", [
    ("fa2", lambda m, q: m.flash_attn_func(q, q, q, deterministic=True)),
    ("fa2", lambda m, q: m.flash_attn_qkvpacked_func(torch.stack([q, q, q], 2), deterministic=True)),
    ("fa2", lambda m, q: m.flash_attn_varlen_func(q[0], q[0], q[0], None, None, 5, 5, deterministic=True)),
    ("fa3", lambda m, q: m.flash_attn_func(q, q, q, deterministic=True)),
    ("fa3", lambda m, q: m.flash_attn_varlen_func(q[0], q[0], q[0], None, None, 5, 5, deterministic=True)),
])
def test_deterministic_reaches_flashjits_backward(shim, version, call):
    """FlashAttention's deterministic=True asks for a backward that sums dq in a fixed order:
    flashjit's backward has that mode, so the shims pass the flag on, with or without autograd."""
    module = shim[0] if version == "fa2" else shim[1]
    calls = shim[2]
    q = torch.randn(1, 5, 2, 8, requires_grad=True)
    call(module, q)
    with torch.no_grad():
        call(module, q)
    assert [kw.get("deterministic") for _, _, _, kw in calls] == [True, True]


# ---- the tally (fa_compat_plugin) and the runner's modes, on synthetic test files -----------------

ROOT = SHIM.parents[1]
PLUGIN_CASES = '''
import pytest
from flashjit._abi import FlashjitError

def test_passes():
    pass

@pytest.mark.parametrize("variant", ["bf16-dqk96-dv96-vec8", "f16-dqk256-dv256-causal-vec8"])
def test_backward_refuses_a_head_dim(variant):
    raise FlashjitError("unsupported: no backward kernel family serves %s on sm_90a: bwd_sm80 refused: "
                        "q.shape[3] and v.shape[3] (head_dim): the backward takes 64 or 128" % variant)

def test_backward_refuses_deterministic():
    raise FlashjitError("unsupported: deterministic: the backward sums dq with atomics so far")

def test_shim_refuses():
    raise NotImplementedError("flashjit (fa_compat shim): dropout_p=0.17 is not supported")

def test_library_without_backward():
    raise FlashjitError("this libflashjit (ABI 4) has no backward pass: it came with ABI 5")

def test_forward_error():
    raise FlashjitError("invalid_argument: window.right must be 0 or -1 with a causal mask, got 82")

def test_wrong_gradients():
    assert 0.5 <= 0.25, "dq max diff"
'''


def run_plugin(tmp_path, source, env_extra=()):
    import json
    import os
    import subprocess
    (tmp_path / "test_cases.py").write_text(source)
    summary = tmp_path / "summary.md"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SHIM), str(ROOT / "python")] + sys.path),
               FA_COMPAT_SUMMARY=str(summary), **dict(env_extra))
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "fa_compat_plugin", "-p", "no:cacheprovider",
                    "--rootdir", str(tmp_path), "-c", os.devnull, "--tb=line", str(tmp_path / "test_cases.py")],
                   cwd=tmp_path, env=env, capture_output=True, text=True)
    return summary.read_text(), json.loads((tmp_path / "summary.md.json").read_text())


def test_tally_counts_backward_refusals_as_unsupported_by_feature(tmp_path):
    text, data = run_plugin(tmp_path, PLUGIN_CASES, {"FA_COMPAT_MODE": "train"})
    outcomes = {}
    for rec in data["results"].values():
        outcomes.setdefault(rec["function"], set()).add((rec["outcome"], rec["reason"]))
    assert outcomes["test_passes"] == {("passed", "")}
    (head_dim,) = outcomes["test_backward_refuses_a_head_dim"]  # one row for both variants: the feature
    assert head_dim[0] == "unsupported"
    assert head_dim[1] == "FlashjitError (backward): q.shape[3] and v.shape[3] (head_dim): the backward takes 64 or 128"
    assert outcomes["test_backward_refuses_deterministic"] == {
        ("unsupported", "FlashjitError (backward): deterministic: the backward sums dq with atomics so far")}
    assert {o for o, _ in outcomes["test_shim_refuses"]} == {"unsupported"}
    assert {o for o, _ in outcomes["test_library_without_backward"]} == {"failed_backward"}
    assert {o for o, _ in outcomes["test_forward_error"]} == {"failed_other"}
    assert {o for o, _ in outcomes["test_wrong_gradients"]} == {"failed_other"}
    assert text.startswith("mode: train\n")
    assert "- 2 x test_backward_refuses_a_head_dim: `FlashjitError (backward): q.shape[3]" in text


def synthetic_fa_file(functions):
    """A stand-in for FlashAttention's test file: each function parametrized, a forward, then a
    backward statement and a check on the gradient, as FA's tests are written."""
    body = ["import pytest", "import torch", ""]
    for name in functions:
        body += ['@pytest.mark.parametrize("d", [64, 96, 128])', "def %s(d):" % name,
                 "    q = torch.randn(2, d, requires_grad=True)", "    out = q * 2",
                 "    (dq,) = torch.autograd.grad(out, q, torch.ones_like(out))", "    assert dq.eq(2).all()", ""]
    return "\n".join(body)


FORWARD_FA2 = ("test_flash_attn_qkvpacked test_flash_attn_varlen_qkvpacked test_flash_attn_output "
               "test_flash_attn_varlen_output test_flash_attn_causal test_flash_attn_varlen_causal "
               "test_flash_attn_splitkv test_flash_attn_kvcache test_flash_attn_race_condition").split()
TRAIN_FA2 = ("test_flash_attn_qkvpacked test_flash_attn_varlen_qkvpacked test_flash_attn_output "
             "test_flash_attn_varlen_output test_flash_attn_causal test_flash_attn_varlen_causal "
             "test_flash_attn_splitkv test_flash_attn_race_condition test_flash_attn_bwd_overflow "
             "test_flash_attn_bwd_transpose test_flash_attn_bwd_varlen_overflow test_flash_attn_deterministic "
             "test_flash_attn_varlen_deterministic").split()
FORWARD_FA3 = "test_flash_attn_output test_flash_attn_varlen_output test_flash_attn_kvcache " \
              "test_flash_attn_race_condition".split()
TRAIN_FA3 = ["test_flash_attn_output", "test_flash_attn_varlen_output", "test_flash_attn_race_condition"]


def run_runner(tmp_path, mode):
    import os
    import subprocess
    for tag, funcs in (("fa2", FORWARD_FA2 + TRAIN_FA2), ("fa3", FORWARD_FA3)):
        (tmp_path / tag).mkdir(exist_ok=True)
        (tmp_path / tag / "test_flash_attn.py").write_text(synthetic_fa_file(sorted(set(funcs))))
    out = tmp_path / ("out-" + mode)
    env = dict(os.environ, COLLECT_ONLY="1", MODE=mode, STRIDE="1", PYTHON=sys.executable, OUT=str(out),
               FLASHJIT_ROOT=str(ROOT), FA2_TEST=str(tmp_path / "fa2" / "test_flash_attn.py"),
               FA3_TEST=str(tmp_path / "fa3" / "test_flash_attn.py"))
    proc = subprocess.run(["bash", str(ROOT / "bench" / "device_fa_tests.sh")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    return proc, out


@pytest.mark.parametrize("mode, fa2, fa3", [("train", TRAIN_FA2, TRAIN_FA3), ("forward", FORWARD_FA2, FORWARD_FA3)])
def test_runner_modes_collect_their_functions(tmp_path, mode, fa2, fa3):
    """COLLECT_ONLY=1 (no GPU): train collects every gradient-taking function of FA2 and FA3, from
    the file as written; forward collects the forward functions from a forward-only copy."""
    import json
    proc, out = run_runner(tmp_path, mode)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for tag, funcs in (("fa2", fa2), ("fa3", fa3)):
        data = json.loads((out / ("%s_summary.md.json" % tag)).read_text())
        assert list(data["selected"]) == funcs and all(n == 3 for n in data["selected"].values()), tag
        assert (out / ("%s_summary.md" % tag)).read_text().count("mode: %s\n" % mode) == 1
        log = (out / ("%s.log" % tag)).read_text()
        assert ("forward-only copy" in log) == (mode == "forward"), tag
        assert (str(tmp_path / tag / "test_flash_attn.py") in proc.stdout) == (mode != "forward")


def test_runner_refuses_an_unknown_mode(tmp_path):
    proc, _ = run_runner(tmp_path, "backward")
    assert proc.returncode == 2 and "MODE must be forward, train or asis" in proc.stdout
