"""flashjit.sdpa and flashjit.transformers on a GPU (run on the device; skipped without CUDA).

SDPA: with "FLASHJIT" active, F.scaled_dot_product_attention's flash calls run flashjit (the
routed-call counter moves by the number of calls) and land within twice the error of aten's own
flash kernel against a float64 reference, on the same inputs; varlen through aten's
_flash_attention_forward; torch.compile's output stride checks; restore gives aten's kernel back.
The backward through SDPA: test_sdpa_backward_gpu.py. transformers: tiny randomly initialised
models (configs built here, no download) with attn_implementation="fj_attention" against "sdpa"
(or "eager" where sdpa lacks softcap or sinks): logits at the real tokens in bf16, greedy
generation in fp32, with left padding, sliding windows and static caches."""
import copy
import warnings

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the device runs this file)")

if torch.cuda.is_available():
    from torch.nn import attention as nn_attention
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from flashjit import sdpa


@pytest.fixture
def flashjit_sdpa():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the dispatcher warns that aten's kernels are overridden
        nn_attention.activate_flash_attention_impl(sdpa.IMPL_NAME)
    yield
    nn_attention.restore_flash_attention_impl()


def sdpa_flash(q, k, v, **kwargs):
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):  # the flash backend or an error, never a silent other one
        return F.scaled_dot_product_attention(q, k, v, **kwargs)


CASES = [(torch.float16, 2, 8, 8, 256, 256, 64, False), (torch.bfloat16, 2, 8, 8, 512, 512, 128, True),
         (torch.bfloat16, 3, 16, 4, 333, 333, 128, True), (torch.float16, 1, 8, 2, 1, 700, 64, False),
         (torch.bfloat16, 2, 4, 4, 128, 128, 256, True)]


@pytest.mark.parametrize("dtype, b, hq, hkv, sq, sk, d, causal", CASES)
def test_sdpa_flash_runs_flashjit_within_aten_flash_error(dtype, b, hq, hkv, sq, sk, d, causal):
    torch.manual_seed(0)
    q = torch.randn(b, sq, hq, d, device="cuda", dtype=dtype).transpose(1, 2)  # projections viewed per head
    k, v = (torch.randn(b, hkv, sk, d, device="cuda", dtype=dtype) for _ in range(2))
    options = dict(is_causal=causal, scale=0.7 / d ** 0.5, enable_gqa=hq != hkv)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), **options)
    aten_error = (sdpa_flash(q, k, v, **options).double() - want).abs().max().item()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nn_attention.activate_flash_attention_impl(sdpa.IMPL_NAME)
    try:
        before = sdpa.routed_calls()
        out = sdpa_flash(q, k, v, **options)
        torch.cuda.synchronize()
        assert sdpa.routed_calls() == before + 1
    finally:
        nn_attention.restore_flash_attention_impl()
    error = (out.double() - want).abs().max().item()
    assert error <= 2 * aten_error + 1e-3, (error, aten_error)
    assert out.shape == q.shape and out.stride() == torch.empty_like(q).stride()
    before = sdpa.routed_calls()
    sdpa_flash(q, k, v, **options)  # restored: aten's kernel again
    assert sdpa.routed_calls() == before


def test_varlen_flash_forward_and_window(flashjit_sdpa, reference):
    torch.manual_seed(1)
    lens = [37, 300, 1, 128]
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
    q, k, v = (torch.randn(sum(lens), h, 64, device="cuda", dtype=torch.bfloat16) for h in (8, 2, 2))
    before = sdpa.routed_calls("_flash_attention_forward")
    out, lse, *_ = torch.ops.aten._flash_attention_forward(q, k, v, cu, cu, max(lens), max(lens), 0.0, True, False,
                                                           window_size_left=32, window_size_right=0)
    assert sdpa.routed_calls("_flash_attention_forward") == before + 1
    want, want_lse = reference(q, k, v, cu, cu, max(lens), max(lens), causal=True, window_left=32, window_right=0,
                               return_lse=True)
    torch.testing.assert_close(out.float(), want.float(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse, want_lse, atol=1e-3, rtol=1e-3)


def test_torch_compile_checks_flashjit_outputs(flashjit_sdpa):
    q, k, v = (torch.randn(2, 256, 8, 64, device="cuda", dtype=torch.float16).transpose(1, 2) for _ in range(3))
    compiled = torch.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True) * 2)
    before = sdpa.routed_calls()
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        got = compiled(q, k, v)  # inductor's generated code asserts the meta function's strides
    assert sdpa.routed_calls() > before
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), is_causal=True) * 2
    assert (got.double() - want).abs().max().item() < 1e-2


# ---- transformers ----------------------------------------------------------------------------------

def tiny_models(config_name, implementations, dtype, **config):
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    import flashjit.transformers as fjt
    name = fjt.register()
    calls = [0]

    def counted(*args, **kwargs):
        calls[0] += 1
        return fjt.attention(*args, **kwargs)
    transformers.AttentionInterface.register(name, counted)
    base = getattr(transformers, config_name)(vocab_size=256, hidden_size=128, intermediate_size=256,
                                              num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=2,
                                              max_position_embeddings=512, **config)
    torch.manual_seed(0)
    models = {}
    for impl in [name] + implementations:
        m = transformers.AutoModelForCausalLM.from_config(copy.deepcopy(base), attn_implementation=impl)
        if models:
            m.load_state_dict(models[name].state_dict())
        else:
            with torch.no_grad():
                for pname, p in m.named_parameters():
                    if p.dim() >= 2:
                        p.normal_(0.0, 0.1)
                    elif "sinks" in pname:
                        p.normal_(0.0, 1.0)
        models[impl] = m.to("cuda", dtype).eval()
    return models, name, calls


def left_padded(lengths, total):
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(3, 256, (len(lengths), total), generator=g)
    mask = torch.zeros(len(lengths), total, dtype=torch.long)
    for b, n in enumerate(lengths):
        mask[b, total - n:] = 1
    return ids.cuda(), mask.cuda()


MODELS = [("LlamaConfig", "sdpa", {}), ("MistralConfig", "sdpa", {"sliding_window": 24}),
          ("Gemma2Config", "eager", {"head_dim": 16, "sliding_window": 24, "attn_logit_softcapping": 20.0,
                                     "query_pre_attn_scalar": 16}),
          # Every expert on every token: in bf16 a last-bit change of the router logits may swap a
          # top-k expert, which moves that token's logits by far more than attention's error.
          ("GptOssConfig", "eager", {"head_dim": 16, "num_local_experts": 2, "num_experts_per_tok": 2,
                                     "sliding_window": 24, "layer_types": ["sliding_attention", "full_attention"]})]


@pytest.mark.parametrize("config_name, reference_impl, config", MODELS)
def test_transformers_logits_match_in_bf16(config_name, reference_impl, config):
    models, name, calls = tiny_models(config_name, [reference_impl], torch.bfloat16, **config)
    ids, mask = left_padded((64, 40, 7), 64)
    with torch.no_grad():
        want = models[reference_impl](ids, attention_mask=mask).logits.float()
        got = models[name](ids, attention_mask=mask).logits.float()
    assert calls[0] > 0
    real = mask.bool()
    scale = want[real].abs().max().item()
    assert (got[real] - want[real]).abs().max().item() <= 0.03 * scale


@pytest.mark.parametrize("cache", [None, "static"])
@pytest.mark.parametrize("config_name, reference_impl, config", MODELS)
def test_transformers_greedy_generation_matches_in_fp32(config_name, reference_impl, config, cache):
    models, name, calls = tiny_models(config_name, [reference_impl], torch.float32, **config)
    for lengths in ((30, 30), (30, 17, 4)):
        ids, mask = left_padded(lengths, 30)
        args = dict(max_new_tokens=12, do_sample=False, pad_token_id=0, cache_implementation=cache)
        want = models[reference_impl].generate(ids, attention_mask=mask, **args)
        got = models[name].generate(ids, attention_mask=mask, **args)
        assert torch.equal(got, want), lengths
    assert calls[0] > 0
