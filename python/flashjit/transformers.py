"""flashjit as an attention implementation of Hugging Face transformers.

    import flashjit.transformers
    name = flashjit.transformers.register()                    # "fj_attention"
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation=name, dtype=torch.bfloat16)

register() adds an attention function to transformers' AttentionInterface and, under the same name,
a mask function to its AttentionMaskInterface. transformers builds each forward's masks once (per
mask kind: full, sliding) by calling the mask function; ours returns a `VisibleKeys`: the pattern
(causal or not, the sliding window) read from transformers' own mask function, and the padding as
flashjit can run it: nothing (no padding), per-sequence key counts (a static cache's unfilled
slots), or the indices that pack the real tokens into a varlen call. Every layer of that kind
reuses it. Patterns flashjit cannot run (chunked attention, packed sequences, image-token overlays,
custom 4-d masks) raise NotImplementedError naming what was asked, never a different mask.

Served: GQA/MQA, left and right padding, sliding windows, softcap, attention sinks (`s_aux`, cast to
fp32), dynamic, sliding-window and static caches (decode included), bidirectional encoders and
cross-attention over padded batches. Not served: dropout, training beyond the backward's subset (so far
dense fp16/bf16 batches, head dims up to 256, no sinks/varlen: see flashjit.ops),
output_attentions (the weights come back as None). The mask function reads the device once per
forward and mask kind when there is a padding mask (as transformers' own FlashAttention masks do),
so a compiled forward breaks its graph there.

The name has no "flash" in it on purpose: transformers treats an implementation whose name contains
"flash" as one of its FlashAttention kernels (utils.generic.is_flash_attention_requested): it then
imports flash_attn or fetches kernels from the Hub, passes FlashAttention-specific kwargs, and skips
the mask interface. flashjit wants the masks.

transformers is imported on register(), not with this module: flashjit works without it.
"""
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from . import interface
from ._abi import FlashjitError

ATTENTION_NAME = "fj_attention"


@dataclass(frozen=True)
class Packing:
    """The real tokens of a padded batch: (batch, position) pairs of the queries and of the keys
    that are not padding, each sequence one contiguous run, and the varlen call's prefix sums."""
    query_batch: torch.Tensor
    query_pos: torch.Tensor
    key_batch: torch.Tensor
    key_pos: torch.Tensor
    cu_seqlens_q: torch.Tensor
    cu_seqlens_k: torch.Tensor
    max_seqlen_q: int
    max_seqlen_k: int


@dataclass(frozen=True)
class VisibleKeys:
    """What the mask function passes to the attention function for one kind of layer: the
    pattern (window -1: unbounded; causal and windows aligned bottom right, each query's slot being
    its diagonal), the sizes it was built for, and at most one of kv_lens (int32 [batch]: keys in
    use from slot 0, as a static cache fills) and packing (padding)."""
    causal: bool
    window_left: int
    window_right: int
    batch: int
    q_length: int
    kv_length: int
    kv_lens: Optional[torch.Tensor] = None
    packing: Optional[Packing] = None

    # transformers' mask preparation passes a mask of 4 dims on as built: generate builds the masks
    # of a static cache's step ahead of the model, which then hands them back to the mask function.
    ndim = 4


# ---- the pattern of transformers' mask function ---------------------------------------------------

def _closure(fn):
    return dict(zip(fn.__code__.co_freevars, (cell.cell_contents for cell in fn.__closure__ or ())))


def _and_parts(fn):
    """The pieces of an and_masks(...) tree (fn itself when it is not one)."""
    if fn.__qualname__.startswith("and_masks.") and "mask_functions" in _closure(fn):
        return [part for inner in _closure(fn)["mask_functions"] for part in _and_parts(inner)]
    return [fn]


def _describe(fn):
    return getattr(fn, "__qualname__", repr(fn))


def mask_pattern(mask_function):
    """(causal, window_left, window_right) of a transformers mask function built from its causal,
    bidirectional and sliding-window pieces; NotImplementedError for any other piece. The result is
    checked by evaluating the function, so a piece whose meaning changed is refused, not misread."""
    from transformers import masking_utils as mu
    causal, left, right = None, -1, -1
    for part in _and_parts(mask_function):
        name = getattr(part, "__qualname__", "")
        if part is mu.causal_mask_function:
            causal = True
        elif part is mu.bidirectional_mask_function:
            causal = bool(causal)
        elif name.startswith("sliding_window_overlay.") and "sliding_window" in _closure(part):
            width = int(_closure(part)["sliding_window"])  # kv > q - width: the query and width - 1 keys back
            left = width - 1 if left < 0 else min(left, width - 1)
        elif name.startswith("sliding_window_bidirectional_overlay.") and "sliding_window" in _closure(part):
            width = int(_closure(part)["sliding_window"])  # |q - kv| <= width
            left = width if left < 0 else min(left, width)
            right = width if right < 0 else min(right, width)
        else:
            raise NotImplementedError(
                "%s: the mask piece %s (chunked attention, packed sequences, image-token or other overlays) is not "
                "supported; flashjit runs causal or bidirectional attention with sliding windows and padding"
                % (ATTENTION_NAME, _describe(part)))
    if causal is None:
        raise NotImplementedError("%s: the mask %s has no causal or bidirectional base" % (ATTENTION_NAME,
                                                                                           _describe(mask_function)))
    if causal:
        right = 0
    _check_pattern(mask_function, causal, left, right)
    return causal, left, right


def _check_pattern(mask_function, causal, left, right):
    """Evaluates the mask function around two query positions (the pattern only depends on q - kv)
    and compares with what flashjit will run."""
    reach = max(left, right, 0) + 8
    kv = torch.arange(0, 3 * reach + 8)[None, :]
    zero = torch.tensor(0)
    for pos in (reach + 3, 2 * reach + 1):
        q = torch.tensor([[pos]])
        got = torch.broadcast_to(mask_function(zero, zero, q, kv), kv.shape)
        want = torch.ones_like(got)
        if causal:
            want &= kv <= q
        if left >= 0:
            want &= kv >= q - left
        if right >= 0:
            want &= kv <= q + right
        if not torch.equal(got, want):
            raise NotImplementedError("%s: the mask %s does not match the pattern read from it (causal=%s, window "
                                      "%d/%d); refusing rather than computing another mask"
                                      % (ATTENTION_NAME, _describe(mask_function), causal, left, right))


# ---- the mask function -----------------------------------------------------------------------------

def _packing(valid, first_query_slot, q_length):
    """Packing for key slots `valid` ([batch, slots] bool). With first_query_slot the queries are the
    slots from there on (self-attention with a positional pattern): bottom-right alignment after
    packing equals the mask only when each sequence's real tokens are one run (padding before
    and/or after) ending at its last real query, which is checked, with one read back of the device
    along with the lengths. Without it (a pattern blind to positions: bidirectional, cross-attention)
    every query row is computed, against the real keys, as the materialized mask has it."""
    batch, slots = valid.shape
    if first_query_slot is None:
        queries = torch.ones(batch, q_length, dtype=torch.bool, device=valid.device)
        max_q, max_k = q_length, int(valid.sum(1).max())
    else:
        queries = valid[:, first_query_slot:first_query_slot + q_length]
        n_k, n_q = valid.sum(1), queries.sum(1)
        first = valid.int().argmax(1)
        last = slots - 1 - valid.flip(1).int().argmax(1)
        last_query = first_query_slot + q_length - 1 - queries.flip(1).int().argmax(1)
        one_run = (n_k == 0) | (last - first + 1 == n_k)
        ends_with_queries = (n_q == 0) | (last_query == last)
        runs_ok, ends_ok, max_q, max_k = torch.stack(
            [one_run.all().long(), ends_with_queries.all().long(), n_q.max(), n_k.max()]).tolist()
        if not runs_ok:
            raise NotImplementedError("%s: padding inside a sequence (real tokens on both sides of a pad, e.g. a "
                                      "right-padded prompt continued by generate) is not supported: pad on the left"
                                      % ATTENTION_NAME)
        if not ends_ok:
            raise NotImplementedError("%s: padded queries followed by real keys are not supported" % ATTENTION_NAME)
    key_batch, key_pos = valid.nonzero(as_tuple=True)
    query_batch, query_pos = queries.nonzero(as_tuple=True)
    cu = lambda n: F.pad(n.cumsum(0), (1, 0)).to(torch.int32)  # noqa: E731
    return Packing(query_batch, query_pos, key_batch, key_pos, cu(queries.sum(1)), cu(valid.sum(1)), max_q, max_k)


def visible_keys_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, mask_function=None,
                      attention_mask=None, device=None, **kwargs):
    """transformers' mask-interface entry for flashjit. Key slot j of a layer holds position
    kv_offset + j and query i position q_offset + i; attention_mask ([batch, positions], 1 for real
    tokens) marks padding, positions past it being empty (a static cache's unfilled slots)."""
    from transformers import masking_utils as mu
    if isinstance(attention_mask, VisibleKeys):  # built by generate for this step (see VisibleKeys.ndim)
        if (attention_mask.batch, attention_mask.q_length, attention_mask.kv_length) != (batch_size, q_length, kv_length):
            raise FlashjitError("%s: a prepared mask for batch %d, %d queries and %d keys reached a layer of %d, %d and %d"
                                % (ATTENTION_NAME, attention_mask.batch, attention_mask.q_length,
                                   attention_mask.kv_length, batch_size, q_length, kv_length))
        return attention_mask
    causal, left, right = mask_pattern(mask_function or mu.causal_mask_function)
    sizes = dict(causal=causal, window_left=left, window_right=right, batch=batch_size, q_length=q_length,
                 kv_length=kv_length)
    first_query_slot = q_offset - kv_offset  # a 0-d tensor for a static cache
    dense_aligned = isinstance(first_query_slot, int) and first_query_slot + q_length == kv_length
    if attention_mask is None and dense_aligned:
        return VisibleKeys(**sizes)
    if attention_mask is None:
        if not causal:
            if left >= 0 or right >= 0:
                raise NotImplementedError("%s: a bidirectional sliding window over a cache whose slots do not end at the "
                                          "queries is not supported" % ATTENTION_NAME)
            return VisibleKeys(**sizes)  # every slot visible, as the materialized mask has it
        # Causal: the keys in use end at the last query's slot (a static cache's later slots are empty).
        in_use = torch.as_tensor(first_query_slot + q_length, device=device).to(torch.int32)
        return VisibleKeys(**sizes, kv_lens=in_use.reshape(1).expand(batch_size))
    first_query_slot = int(first_query_slot)
    positional = causal or left >= 0 or right >= 0  # else only which keys are real matters
    dense_aligned = first_query_slot + q_length == kv_length
    slots = first_query_slot + q_length if causal else kv_length  # causal: later slots are never visible
    if positional and (first_query_slot < 0 or first_query_slot + q_length > slots):
        raise NotImplementedError("%s: queries at slots %d..%d lie outside the %d key slots"
                                  % (ATTENTION_NAME, first_query_slot, first_query_slot + q_length - 1, slots))
    real = attention_mask.bool()
    if real.shape[1] < kv_offset + slots:
        real = F.pad(real, (0, kv_offset + slots - real.shape[1]))  # past the mask: empty slots
    valid = real[:, kv_offset:kv_offset + slots]
    if bool(valid.all()):  # one read back per mask, as transformers' own flash mask does
        if causal and not dense_aligned:
            return VisibleKeys(**sizes, kv_lens=torch.full((batch_size,), slots, dtype=torch.int32,
                                                           device=valid.device))
        if dense_aligned or not positional:
            return VisibleKeys(**sizes)
        raise NotImplementedError("%s: a bidirectional sliding window over a cache whose slots do not end at the "
                                  "queries is not supported" % ATTENTION_NAME)
    return VisibleKeys(**sizes, packing=_packing(valid, first_query_slot if positional else None, q_length))


# ---- the attention function ------------------------------------------------------------------------

def _visible_keys_without_mask(module, query, key, sliding_window, is_causal):
    """For a model that built no mask: transformers' FlashAttention convention (the module's
    is_causal, the sliding_window argument, the queries at the end of the keys)."""
    causal = getattr(module, "is_causal", True) if is_causal is None else bool(is_causal)
    left = right = -1
    if sliding_window:
        left = sliding_window - 1
        right = 0 if causal else sliding_window - 1
    return VisibleKeys(causal, left, right, query.shape[0], query.shape[2], key.shape[2])


def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, sliding_window=None, softcap=None,
              s_aux=None, is_causal=None, **kwargs):
    """transformers' attention-interface entry: query [batch, heads_q, q_len, dim], key and value
    [batch, heads_kv, kv_len, dim], the mask this module's mask function built. Returns the output
    [batch, q_len, heads_q, dim_v] and None for the weights."""
    if dropout:
        raise NotImplementedError("%s: dropout=%r: flashjit has no attention dropout (evaluate with model.eval())"
                                  % (ATTENTION_NAME, dropout))
    for name in ("position_bias", "cu_seq_lens_q", "cu_seq_lens_k"):
        if kwargs.get(name) is not None:
            raise NotImplementedError("%s: %s (relative position bias / packed sequences) is not supported"
                                      % (ATTENTION_NAME, name))
    visible = attention_mask
    if visible is None:
        visible = _visible_keys_without_mask(module, query, key, sliding_window, is_causal)
    elif not isinstance(visible, VisibleKeys):
        raise NotImplementedError(
            "%s: got a %s attention mask; flashjit reads only the masks its own mask function builds (register() adds "
            "it): a custom 4-d mask needs another attention implementation" % (ATTENTION_NAME, type(visible).__name__))
    batch, _, q_length, _ = query.shape
    if (batch, q_length, key.shape[2]) != (visible.batch, visible.q_length, visible.kv_length):
        raise FlashjitError("%s: the mask was built for batch %d, %d queries and %d keys, the layer has %d, %d and %d"
                            % (ATTENTION_NAME, visible.batch, visible.q_length, visible.kv_length, batch, q_length,
                               key.shape[2]))
    options = dict(softmax_scale=scaling, causal=visible.causal, window_size=(visible.window_left, visible.window_right),
                   softcap=float(softcap or 0.0), sinks=None if s_aux is None else s_aux.float().contiguous())
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))  # flashjit's [batch, seq, heads, dim] views
    if visible.packing is None:
        if visible.kv_lens is None:
            return interface.flash_attn_func(q, k, v, **options), None
        return interface.flash_attn_with_kvcache(q, k, v, cache_seqlens=visible.kv_lens, **options), None
    p = visible.packing
    packed = interface.flash_attn_varlen_func(q[p.query_batch, p.query_pos], k[p.key_batch, p.key_pos],
                                              v[p.key_batch, p.key_pos], p.cu_seqlens_q, p.cu_seqlens_k,
                                              p.max_seqlen_q, p.max_seqlen_k, **options)
    out = packed.new_zeros(batch, q_length, packed.shape[1], packed.shape[2])  # padded queries: zeros
    out[p.query_batch, p.query_pos] = packed
    return out, None


def register(name=ATTENTION_NAME):
    """Adds flashjit to transformers under `name` (attn_implementation=name); returns the name."""
    if "flash" in name.lower():
        raise ValueError("%r: transformers treats names containing 'flash' as its own FlashAttention kernels; pick "
                         "another (default %r)" % (name, ATTENTION_NAME))
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface
    AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, visible_keys_mask)
    return name
