"""Every test process compiles into a cache folder of its own (the engine reads
FLASHJIT_CACHE_DIR once, when the package creates it).

Also flashjit's semantics in float64 on any device (`reference_attention`): the GPU tests' oracle,
and, registered as a CPU kernel of torch.ops.flashjit.attention (`cpu_reference_kernel`) or passed
as the SDPA backend's launcher, the stand-in for the GPU kernel that lets the CPU tests run the
integrations' own code end to end against PyTorch's and transformers' own attention."""
import contextlib
import math
import os
import tempfile

import pytest

os.environ["FLASHJIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="flashjit-pytest-")


def _sequences(q, k, v, cu_seqlens_q, cu_seqlens_k, kv_lens, block_table, kv_starts=None):
    """(query rows, keys, values, where the rows go) per sequence, in flashjit's layouts."""
    if cu_seqlens_q is not None:
        cu_q = cu_seqlens_q.tolist()
        batch = len(cu_q) - 1
        rows = [(slice(cu_q[b], cu_q[b + 1]),) for b in range(batch)]
        queries = [q[cu_q[b]:cu_q[b + 1]] for b in range(batch)]
    else:
        batch = q.shape[0]
        rows = [(b,) for b in range(batch)]
        queries = [q[b] for b in range(batch)]
    keys, values = [], []
    for b in range(batch):
        if block_table is not None:  # page pools [pages, page_size, heads, dim]
            pages = block_table[b].long()
            kb = k[pages].flatten(0, 1)
            vb = v[pages].flatten(0, 1)
        elif cu_seqlens_k is not None:
            lo, hi = cu_seqlens_k[b].item(), cu_seqlens_k[b + 1].item()
            kb, vb = k[lo:hi], v[lo:hi]
        else:
            kb, vb = k[b], v[b]
        if kv_lens is not None:
            n = max(0, min(int(kv_lens[b]), kb.shape[0]))
            kb, vb = kb[:n], vb[:n]
        if kv_starts is not None:  # the left padding: key 0 of the sequence is slot kv_starts[b]
            first = max(0, min(int(kv_starts[b]), kb.shape[0]))
            kb, vb = kb[first:], vb[first:]
        keys.append(kb)
        values.append(vb)
    return rows, queries, keys, values


def bottom_right_visible(len_q, len_k, causal=False, window_left=-1, window_right=-1, device=None):
    """[len_q, len_k] bool: which keys each query sees, causal and windows aligned bottom right as
    flashjit and FlashAttention do (query i's diagonal key is i + len_k - len_q); -1 is no limit."""
    # Kept apart from flashjit.transformers' _check_pattern on purpose: the oracle shares no code with what it checks.
    import torch
    i = torch.arange(len_q, device=device)[:, None] + (len_k - len_q)
    j = torch.arange(len_k, device=device)[None, :]
    visible = torch.ones(len_q, len_k, dtype=torch.bool, device=device)
    if causal:
        visible &= j <= i
    if window_left >= 0:
        visible &= j >= i - window_left
    if window_right >= 0:
        visible &= j <= i + window_right
    return visible


def reference_attention(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=0, max_seqlen_k=0, kv_lens=None,
                        block_table=None, alibi_slopes=None, sinks=None, softmax_scale=0.0, causal=False,
                        window_left=-1, window_right=-1, softcap=0.0, return_lse=False, check=False, kv_starts=None):
    """torch.ops.flashjit.attention's semantics in float64: causal and windows aligned bottom right
    (query i sees key i + len_k - len_q), softcap then ALiBi on the scaled scores, sinks in the
    denominator, rows that see no key give zeros and LSE -inf; kv_starts drops each sequence's
    first keys (so positions count from there). Returns (out in q's dtype, LSE fp32)."""
    import torch
    rows, queries, keys, values = _sequences(q, k, v, cu_seqlens_q, cu_seqlens_k, kv_lens, block_table, kv_starts)
    hq, dv = q.shape[-2], v.shape[-1]
    scale = softmax_scale or 1.0 / math.sqrt(q.shape[-1])
    out = torch.zeros(tuple(q.shape[:-1]) + (dv,), dtype=torch.float64, device=q.device)
    lse = torch.full(tuple(q.shape[:-1]), -math.inf, dtype=torch.float64, device=q.device)
    for b, (where, qs, ks, vs) in enumerate(zip(rows, queries, keys, values)):
        len_q, len_k = qs.shape[0], ks.shape[0]
        group = hq // ks.shape[1]
        ks = ks.double().repeat_interleave(group, dim=1)  # [len_k, hq, d]
        vs = vs.double().repeat_interleave(group, dim=1)
        s = torch.einsum("qhd,khd->hqk", qs.double(), ks) * scale
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        i = torch.arange(len_q, device=q.device)[:, None] + (len_k - len_q)  # each row's diagonal key
        j = torch.arange(len_k, device=q.device)[None, :]
        if alibi_slopes is not None:
            slopes = (alibi_slopes if alibi_slopes.dim() == 1 else alibi_slopes[b]).double()
            s = s - slopes[:, None, None] * (i - j).abs()
        visible = bottom_right_visible(len_q, len_k, causal, window_left, window_right, q.device)
        s = s.masked_fill(~visible, -math.inf)
        terms = s if sinks is None else torch.cat([s, sinks.double()[:, None, None].expand(hq, len_q, 1)], dim=-1)
        row_lse = torch.logsumexp(terms, dim=-1)  # [hq, len_q]
        p = torch.exp(s - row_lse[..., None]).nan_to_num(0.0)  # rows with no key: exp(-inf - -inf)
        o = torch.einsum("hqk,khd->qhd", p, vs)
        out[where] = o
        lse[where] = row_lse.transpose(0, 1)
    if cu_seqlens_q is not None:
        lse_out = lse.transpose(0, 1).float()  # [heads, total_q]
    else:
        lse_out = lse.transpose(1, 2).float()  # [batch, heads, seq_q]
    return out.to(q.dtype), (lse_out.contiguous() if return_lse else q.new_empty(0, dtype=torch.float32))


def reference_launch(q, k, v, out, lse, **options):
    """flashjit.ops.launch's contract (writes into out and lse) on the reference."""
    o, l = reference_attention(q, k, v, return_lse=lse is not None, **options)
    out.copy_(o)
    if lse is not None:
        lse.copy_(l)


@pytest.fixture
def cpu_reference_kernel():
    """torch.ops.flashjit.attention (and attention_dense) run the float64 reference on CPU tensors for the test."""
    import torch
    import flashjit.ops  # noqa: F401  (defines the operator)
    lib = torch.library.Library("flashjit", "IMPL", "CPU")
    lib.impl("attention", reference_attention, "CPU")
    lib.impl("attention_dense", lambda q, k, v, *scalars: reference_attention(
        q, k, v, **dict(zip(("softmax_scale", "causal", "window_left", "window_right", "softcap"), scalars)))[0], "CPU")
    yield
    lib._destroy()


@pytest.fixture
def reference():
    """reference_attention: the operator's semantics in float64."""
    return reference_attention


@pytest.fixture
def bottom_right_mask():
    """bottom_right_visible: the keys each query sees, as flashjit aligns causal and windows."""
    return bottom_right_visible


@pytest.fixture
def reference_launcher():
    """reference_launch: flashjit.ops.launch's contract on the reference."""
    return reference_launch


def reference_backward_launch(dout, q, k, v, out, lse, dq, dk, dv, softmax_scale=0.0, causal=False, window_left=-1,
                              window_right=-1, deterministic=False, **unused):
    """flashjit.ops.launch_backward's contract (writes dq, dk, dv) in float64 for dense
    [batch, seq, heads, head_dim] calls without GQA, computed as a flash backward does: from the
    forward's `out` and `lse` (natural log, [batch, heads, seq_q], -inf read as +inf for rows that
    see no key) rather than by recomputing them, so a wrong LSE or output reaching it shows."""
    import torch
    scale = softmax_scale or 1.0 / math.sqrt(q.shape[-1])
    qd, kd, vd, od, dod = (t.double() for t in (q, k, v, out, dout))
    len_q, len_k = q.shape[1], k.shape[1]
    s = torch.einsum("bqhd,bkhd->bhqk", qd, kd) * scale
    visible = bottom_right_visible(len_q, len_k, causal, window_left, window_right, q.device)
    row_lse = lse.double().masked_fill(lse == -math.inf, math.inf)[..., None]
    p = torch.exp(s.masked_fill(~visible, -math.inf) - row_lse)
    dp = torch.einsum("bqhd,bkhd->bhqk", dod, vd)
    delta = (dod * od).sum(-1).transpose(1, 2)[..., None]  # rowsum(dO o O): [batch, heads, seq_q, 1]
    ds = p * (dp - delta)
    dq.copy_(torch.einsum("bhqk,bkhd->bqhd", ds, kd) * scale)
    dk.copy_(torch.einsum("bhqk,bqhd->bkhd", ds, qd) * scale)
    dv.copy_(torch.einsum("bhqk,bqhd->bkhd", p, dod))


@pytest.fixture
def reference_backward_launcher():
    """reference_backward_launch: flashjit.ops.launch_backward's contract in float64."""
    return reference_backward_launch


@contextlib.contextmanager
def sdpa_route_on_cpu(launcher, backward_launcher):
    """flashjit.sdpa active for the CPU dispatch key, `launcher` and `backward_launcher` standing in
    for the kernels; removed afterwards, with any backward route it left behind."""
    import warnings
    from flashjit import sdpa
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the dispatcher warns that a kernel is overridden
        activation = sdpa.Activation("cpu", launcher, backward_launcher)
    yield activation
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        activation.remove()
    while sdpa._lingering_backward_routes:
        sdpa._lingering_backward_routes.pop()._destroy()


@pytest.fixture
def cpu_route(reference_launcher, reference_backward_launcher):
    """sdpa_route_on_cpu with the references (forward and backward) standing in for the kernels."""
    with sdpa_route_on_cpu(reference_launcher, reference_backward_launcher) as activation:
        yield activation


@pytest.fixture
def sdpa_route():
    """sdpa_route_on_cpu, for a test module's own routes."""
    return sdpa_route_on_cpu
