"""flashjit.transformers without a GPU: the registration, the mask patterns it reads, and tiny
randomly initialised models (configs built here, nothing downloaded) run end to end on CPU with the
float64 reference as torch.ops.flashjit.attention's CPU kernel, against transformers' own "sdpa" or
"eager" attention: logits at the real tokens and greedy generation, with padding, sliding windows,
static caches, softcap and sinks. What flashjit cannot run must raise. The GPU run is
tests/python/gpu/test_sdpa_transformers_gpu.py."""
import copy
import os
import subprocess
import sys

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install transformers)")
from transformers import AutoModelForCausalLM  # noqa: E402
from transformers import masking_utils as mu  # noqa: E402

import flashjit.transformers as fjt  # noqa: E402

NAME = fjt.register()


def test_import_needs_no_transformers():
    code = "import sys, flashjit.transformers; print('transformers' in sys.modules)"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=env).stdout.split() == ["False"]


def test_register_adds_the_function_and_its_mask_under_a_name_without_flash():
    from transformers import AttentionInterface
    from transformers.utils.generic import is_flash_attention_requested
    assert NAME == "fj_attention"
    assert fjt.register() == NAME  # again: a GPU test before this one re-registers the name with a wrapper
    assert AttentionInterface()[NAME] is fjt.attention
    assert mu.ALL_MASK_ATTENTION_FUNCTIONS[NAME] is fjt.visible_keys_mask
    assert not is_flash_attention_requested(requested_attention_implementation=NAME)
    with pytest.raises(ValueError, match="flash"):
        fjt.register("flashjit_attention")


@pytest.mark.parametrize("make, pattern", [
    (lambda: mu.causal_mask_function, (True, -1, 0)),
    (lambda: mu.bidirectional_mask_function, (False, -1, -1)),
    (lambda: mu.sliding_window_causal_mask_function(5), (True, 4, 0)),
    (lambda: mu.sliding_window_bidirectional_mask_function(3), (False, 3, 3)),
    (lambda: mu.and_masks(mu.sliding_window_causal_mask_function(9), mu.sliding_window_overlay(4)), (True, 3, 0)),
])
def test_mask_patterns_read_from_transformers(make, pattern):
    assert fjt.mask_pattern(make()) == pattern


@pytest.mark.parametrize("make, needle", [
    (lambda: mu.chunked_causal_mask_function(8, torch.zeros(2, dtype=torch.long)), "chunked_overlay"),
    (lambda: mu.and_masks(mu.causal_mask_function, mu.packed_sequence_mask_function(torch.zeros(1, 8, dtype=torch.long))),
     "packed_sequence_mask_function"),
    (lambda: mu.or_masks(mu.causal_mask_function, mu.bidirectional_mask_function), "or_mask"),
    (lambda: (lambda b, h, q, kv: kv <= q), "<lambda>"),
])
def test_other_mask_patterns_are_refused_by_name(make, needle):
    with pytest.raises(NotImplementedError, match=needle):
        fjt.mask_pattern(make())


def test_a_piece_whose_meaning_changed_is_refused():
    def causal_mask_function(batch_idx, head_idx, q_idx, kv_idx):  # top-left diagonal shifted by one
        return kv_idx < q_idx
    with pytest.MonkeyPatch.context() as m:
        m.setattr(mu, "causal_mask_function", causal_mask_function)
        with pytest.raises(NotImplementedError, match="does not match"):
            fjt.mask_pattern(causal_mask_function)


# ---- tiny models end to end ---------------------------------------------------------------------

def models(config, implementations, seed=0):
    """One randomly initialised model per attention implementation, sharing weights (scaled up
    from transformers' 0.02 so attention is far from uniform). Each model gets its own config:
    transformers records the implementation on it."""
    torch.manual_seed(seed)
    first = AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation=implementations[0])
    with torch.no_grad():
        for name, p in first.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.15)
            elif "sinks" in name:
                p.normal_(0.0, 1.0)
    out = {implementations[0]: first.eval()}
    for impl in implementations[1:]:
        m = AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation=impl)
        m.load_state_dict(first.state_dict())
        out[impl] = m.eval()
    return out


def tiny(config_class, **fields):
    """A config_class config of a tiny decoder: 2 layers of 4 attention heads, hidden size 64, MLP
    width 128, a vocabulary of 128 (padded_batch's token ids) and 256 positions; `fields` add to
    these or replace them."""
    sizes = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 max_position_embeddings=256)
    return config_class(**{**sizes, **fields})


def llama(**extra):
    return tiny(transformers.LlamaConfig, num_key_value_heads=2, **extra)


def padded_batch(lengths, total, left=True, seed=1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 128, (len(lengths), total), generator=g)
    mask = torch.zeros(len(lengths), total, dtype=torch.long)
    for b, n in enumerate(lengths):
        if left:
            mask[b, total - n:] = 1
        else:
            mask[b, :n] = 1
    return ids, mask


def assert_same_logits(ms, ids, mask, reference, atol=2e-5):
    with torch.no_grad():
        want = ms[reference](ids, attention_mask=mask).logits
        got = ms[NAME](ids, attention_mask=mask).logits
    real = mask.bool() if mask is not None else torch.ones(ids.shape, dtype=torch.bool)
    torch.testing.assert_close(got[real], want[real], atol=atol, rtol=1e-4)


def assert_same_generation(ms, ids, mask, reference, **kwargs):
    args = dict(max_new_tokens=8, do_sample=False, pad_token_id=0, **kwargs)
    want = ms[reference].generate(ids, attention_mask=mask, **args)
    got = ms[NAME].generate(ids, attention_mask=mask, **args)
    assert torch.equal(got, want)


def assert_same_logits_and_generation(config, reference, lengths):
    """flashjit's model against `reference`'s, sharing weights, on a left-padded batch as wide as its
    longest sequence: logits, then greedy generation. Returns the models."""
    ms = models(config, [reference, NAME])
    ids, mask = padded_batch(lengths, max(lengths))
    assert_same_logits(ms, ids, mask, reference)
    assert_same_generation(ms, ids, mask, reference)
    return ms


@pytest.mark.parametrize("lengths, left", [((12, 12), True), ((12, 7, 1), True), ((12, 5), False)])
def test_llama_logits_match_sdpa(cpu_reference_kernel, lengths, left):
    ms = models(llama(), ["sdpa", NAME])
    ids, mask = padded_batch(lengths, 12, left=left)
    assert_same_logits(ms, ids, mask, "sdpa")


@pytest.mark.parametrize("cache", [None, "static"])
def test_llama_greedy_generation_matches_sdpa(cpu_reference_kernel, cache):
    ms = models(llama(), ["sdpa", NAME])
    ids, mask = padded_batch((10, 6, 3), 10)
    assert_same_generation(ms, ids, mask, "sdpa", cache_implementation=cache)


def test_sliding_window_logits_and_generation_match_sdpa(cpu_reference_kernel):
    config = tiny(transformers.MistralConfig, num_key_value_heads=1, sliding_window=5)
    assert_same_logits_and_generation(config, "sdpa", (16, 9))


def test_softcap_and_alternating_windows_match_eager(cpu_reference_kernel):
    config = tiny(transformers.Gemma2Config, num_key_value_heads=2, head_dim=16, sliding_window=4,
                  attn_logit_softcapping=2.0, query_pre_attn_scalar=16)
    assert_same_logits_and_generation(config, "eager", (12, 8))


def test_sinks_match_eager(cpu_reference_kernel):
    config = tiny(transformers.GptOssConfig, intermediate_size=64, num_key_value_heads=2, head_dim=16,
                  num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
                  layer_types=["sliding_attention", "full_attention"])
    ms = assert_same_logits_and_generation(config, "eager", (10, 7))
    assert ms[NAME].model.layers[0].self_attn.sinks.abs().sum() > 0  # the sinks were in play


def test_what_flashjit_cannot_run_raises(cpu_reference_kernel):
    ms = models(llama(attention_dropout=0.1), [NAME])
    model = ms[NAME]
    ids = torch.randint(3, 128, (1, 10))
    with torch.no_grad():
        with pytest.raises(NotImplementedError, match="packed_sequence"):  # position ids restarting: packed sequences
            model(ids, position_ids=torch.tensor([[0, 1, 2, 3, 0, 1, 2, 0, 1, 2]]), use_cache=False)
        with pytest.raises(NotImplementedError, match="custom 4-d mask"):
            model(ids, attention_mask=torch.zeros(1, 1, 10, 10))
        model.train()
        with pytest.raises(NotImplementedError, match="dropout"):
            model(ids)
        model.eval()
    ids, mask = padded_batch((10, 6), 10, left=False)  # right padding continued by generate: a pad mid-sequence
    with pytest.raises(NotImplementedError, match="padding inside a sequence"):
        model.generate(ids, attention_mask=mask, max_new_tokens=2, do_sample=False, pad_token_id=0)


def test_static_cache_without_padding_matches_sdpa(cpu_reference_kernel):
    """A static cache's unfilled slots: kv_lens from the mask (generate) and from the cache's own
    length (a forward with no mask at all)."""
    config = llama()
    ms = models(config, ["sdpa", NAME])
    ids = torch.randint(3, 128, (2, 9), generator=torch.Generator().manual_seed(3))
    assert_same_generation(ms, ids, torch.ones_like(ids), "sdpa", cache_implementation="static")
    logits = {}
    with torch.no_grad():
        for impl, model in ms.items():
            cache = transformers.StaticCache(config=model.config, max_cache_len=32)
            model(ids[:, :6], past_key_values=cache)  # prefill, then two tokens against the cache
            logits[impl] = model(ids[:, 6:8], past_key_values=cache).logits
    torch.testing.assert_close(logits[NAME], logits["sdpa"], atol=2e-5, rtol=1e-4)


def test_encoder_decoder_padding_and_cross_attention_match_sdpa(cpu_reference_kernel):
    """Bidirectional encoder self-attention and cross-attention over a padded encoder batch: every
    query row against the real keys (no positions involved), the decoder causal."""
    config = transformers.BartConfig(vocab_size=128, d_model=64, encoder_layers=2, decoder_layers=2,
                                     encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                                     decoder_ffn_dim=128, max_position_embeddings=64, pad_token_id=1,
                                     decoder_start_token_id=2, forced_eos_token_id=None)
    torch.manual_seed(0)
    ms = {}
    for impl in ("sdpa", NAME):
        m = transformers.BartForConditionalGeneration(copy.deepcopy(config))
        if ms:
            m.load_state_dict(ms["sdpa"].state_dict())
        else:
            with torch.no_grad():
                for p in m.parameters():
                    if p.dim() >= 2:
                        p.normal_(0.0, 0.15)
        m.set_attn_implementation(impl)
        ms[impl] = m.eval()
    ids, mask = padded_batch((12, 5), 12, left=False)
    decoder_ids = torch.randint(3, 128, (2, 7), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        want = ms["sdpa"](ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
        got = ms[NAME](ids, attention_mask=mask, decoder_input_ids=decoder_ids).logits
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    args = dict(max_new_tokens=6, do_sample=False, num_beams=1)
    assert torch.equal(ms[NAME].generate(ids, attention_mask=mask, **args),
                       ms["sdpa"].generate(ids, attention_mask=mask, **args))


@pytest.mark.parametrize("kv_lens", [False, True])
def test_the_attention_traces_to_the_operator_with_fullgraph(kv_lens):
    """torch.compile(fullgraph=True) of a layer's attention call on fake CUDA tensors: one
    flashjit operator, no graph break (the mask function's read back happens before, once)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def layer(q, k, v, lens):
        visible = fjt.VisibleKeys(True, 7, 0, 2, 4, 16, kv_lens=lens if kv_lens else None)
        return fjt.attention(None, q, k, v, visible, scaling=0.125, softcap=30.0)[0]

    torch._dynamo.reset()
    with FakeTensorMode(allow_non_fake_inputs=True):
        q = torch.empty(2, 8, 4, 64, dtype=torch.bfloat16, device="cuda")
        k = torch.empty(2, 2, 16, 64, dtype=torch.bfloat16, device="cuda")
        lens = torch.empty(2, dtype=torch.int32, device="cuda")
        out = torch.compile(layer, backend=backend, fullgraph=True)(q, k, k, lens)
    assert out.shape == (2, 4, 8, 64)
    targets = [str(n.target) for n in graphs[0].graph.nodes]
    assert targets.count("flashjit.attention") + targets.count("flashjit.attention_dense") == 1, targets
