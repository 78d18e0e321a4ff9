"""flashjit from Python through ctypes, on PyTorch tensors' data pointers: nothing to compile.

    import torch, flashjit_ctypes as fj
    lib = fj.load("build/libflashjit.so")
    o = torch.empty_like(q)
    fj.forward(lib, q, k, v, o, causal=True)   # q, k, v, o: [B, S, H, D] views (any strides)

    # A ragged batch packed along the sequence axis ([1, total, H, D]), sliding window, softcap,
    # ALiBi, sinks, per-sequence cache lengths, paged caches: flashjit_attention_args_v2.
    fj.forward(lib, q, k, v, o, causal=True, varlen=(cu_q, cu_k, max_q, max_k), window=(1024, 0))

Calls go through flashjit_forward_v2 (ABI version 2; version 3 adds flags, for the checked
mode; version 4 a caller-owned workspace). Against an older library (ABI 1) the v1 entry point is used, and only the options it has
are accepted. The pip package (flashjit) calls through this module too.
"""
import ctypes
import os
import struct


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("reserved", ctypes.c_int32),
                ("shape", ctypes.c_int64 * 4), ("stride", ctypes.c_int64 * 4)]


class Lse(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("shape", ctypes.c_int64 * 3), ("stride", ctypes.c_int64 * 3)]


class Args(ctypes.Structure):
    """flashjit_attention_args (ABI version 1)."""
    _fields_ = [("q", Tensor), ("k", Tensor), ("v", Tensor), ("o", Tensor), ("lse", ctypes.POINTER(Lse)),
                ("mask", ctypes.c_int32), ("fp32_math", ctypes.c_int32), ("softmax_scale", ctypes.c_float),
                ("reserved", ctypes.c_int32)]


class Varlen(ctypes.Structure):
    _fields_ = [("cu_seqlens_q", ctypes.c_void_p), ("cu_seqlens_k", ctypes.c_void_p), ("batch", ctypes.c_int64),
                ("max_seqlen_q", ctypes.c_int64), ("max_seqlen_k", ctypes.c_int64)]


class Window(ctypes.Structure):
    _fields_ = [("left", ctypes.c_int64), ("right", ctypes.c_int64)]


class Alibi(ctypes.Structure):
    _fields_ = [("slopes", ctypes.c_void_p), ("batch_stride", ctypes.c_int64)]


class PagedKv(ctypes.Structure):
    _fields_ = [("block_table", ctypes.c_void_p), ("table_stride", ctypes.c_int64), ("max_pages", ctypes.c_int64)]


class ArgsV2(ctypes.Structure):
    """flashjit_attention_args_v2: starts with its own size, so the library can grow it."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("abi_version", ctypes.c_uint32),
                ("q", Tensor), ("k", Tensor), ("v", Tensor), ("o", Tensor), ("lse", ctypes.POINTER(Lse)),
                ("mask", ctypes.c_int32), ("fp32_math", ctypes.c_int32), ("softmax_scale", ctypes.c_float),
                ("softcap", ctypes.c_float), ("varlen", ctypes.POINTER(Varlen)), ("window", ctypes.POINTER(Window)),
                ("alibi", ctypes.POINTER(Alibi)), ("sinks", ctypes.c_void_p), ("kv_lens", ctypes.c_void_p),
                ("paged", ctypes.POINTER(PagedKv)), ("flags", ctypes.c_uint32), ("sm_margin", ctypes.c_uint32),
                ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_uint64), ("kv_starts", ctypes.c_void_p)]


class BackwardArgsV1(ctypes.Structure):
    """flashjit_backward_args_v1 (ABI version 5): size-prefixed like ArgsV2, pointing at the
    forward's ArgsV2."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("abi_version", ctypes.c_uint32),
                ("forward", ctypes.POINTER(ArgsV2)), ("dout", Tensor), ("dq", Tensor), ("dk", Tensor), ("dv", Tensor),
                ("dsinks", ctypes.c_void_p), ("flags", ctypes.c_uint32), ("reserved", ctypes.c_uint32),
                ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_uint64)]


ABI_VERSION = 7
CHECK_METADATA = 1  # flashjit_attention_args_v2.flags
DETERMINISTIC = 1  # flashjit_backward_args_v1.flags
_DTYPES = {"torch.float16": 0, "torch.bfloat16": 1, "torch.float32": 2}


class FlashjitError(RuntimeError):
    pass


def load(path=None):
    path = path or os.environ.get("FLASHJIT_LIB", "libflashjit.so")
    lib = ctypes.CDLL(path)
    lib.flashjit_last_error.restype = ctypes.c_char_p
    lib.flashjit_version.restype = ctypes.c_char_p
    lib.flashjit_args_size.restype = ctypes.c_uint64
    lib.flashjit_engine_create.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.flashjit_engine_destroy.argtypes = [ctypes.c_void_p]
    lib.flashjit_forward.argtypes = [ctypes.c_void_p, ctypes.POINTER(Args), ctypes.c_void_p]
    if lib.flashjit_args_size() != ctypes.sizeof(Args):
        raise FlashjitError("flashjit_attention_args layout mismatch: library %d bytes, binding %d"
                            % (lib.flashjit_args_size(), ctypes.sizeof(Args)))
    lib.abi = lib.flashjit_abi_version()
    if lib.abi >= 2:
        lib.flashjit_forward_v2.argtypes = [ctypes.c_void_p, ctypes.POINTER(ArgsV2), ctypes.c_void_p]
        lib.flashjit_args_v2_size.restype = ctypes.c_uint64
        if lib.abi >= 4:
            lib.flashjit_workspace_size_v2.argtypes = [ctypes.c_void_p, ctypes.POINTER(ArgsV2), ctypes.c_void_p,
                                                       ctypes.POINTER(ctypes.c_uint64)]
        if lib.abi >= 5:
            bwd = ctypes.POINTER(BackwardArgsV1)
            lib.flashjit_backward_v1.argtypes = [ctypes.c_void_p, bwd, ctypes.c_void_p]
            lib.flashjit_backward_workspace_size_v1.argtypes = [ctypes.c_void_p, bwd, ctypes.c_void_p,
                                                                ctypes.POINTER(ctypes.c_uint64)]
            lib.flashjit_precompile_backward_v1.argtypes = [ctypes.c_void_p, bwd, ctypes.c_char_p, ctypes.c_char_p,
                                                            ctypes.c_uint64]
            lib.flashjit_backward_args_v1_size.restype = ctypes.c_uint64
            if lib.flashjit_backward_args_v1_size() < ctypes.sizeof(BackwardArgsV1):
                raise FlashjitError("flashjit_backward_args_v1 is %d bytes in the library, %d here: update the library"
                                    % (lib.flashjit_backward_args_v1_size(), ctypes.sizeof(BackwardArgsV1)))
        if lib.abi >= 6:
            lib.flashjit_engine_set_sm_margin.argtypes = [ctypes.c_void_p, ctypes.c_int32]
        if lib.flashjit_args_v2_size() < ctypes.sizeof(ArgsV2):
            raise FlashjitError("flashjit_attention_args_v2 is %d bytes in the library, %d here: update the library"
                                % (lib.flashjit_args_v2_size(), ctypes.sizeof(ArgsV2)))
    engine = ctypes.c_void_p()
    if lib.flashjit_engine_create(ctypes.byref(engine)) != 0:
        raise FlashjitError(lib.flashjit_last_error().decode())
    lib.engine = engine
    return lib


def tensor(t):
    """A [B, S, H, D] torch tensor (any strides) as a flashjit_tensor."""
    if t.dim() != 4:
        raise ValueError("expected a 4-d [batch, seq, heads, head_dim] view")
    x = Tensor()
    x.data = t.data_ptr()
    x.dtype = _DTYPES[str(t.dtype)]
    for i in range(4):
        x.shape[i] = t.shape[i]
        x.stride[i] = t.stride(i)
    return x


def _lse(lse):
    l = Lse()
    l.data = lse.data_ptr()
    for i in range(3):
        l.shape[i] = lse.shape[i]
        l.stride[i] = lse.stride(i)
    return l


def make_args(q, k, v, o, causal=False, lse=None, scale=0.0, tf32=False):
    """Version 1 arguments (no varlen, window, softcap, ALiBi or sinks)."""
    a = Args(tensor(q), tensor(k), tensor(v), tensor(o))
    a.mask = 1 if causal else 0
    a.fp32_math = 1 if tf32 else 0
    a.softmax_scale = scale
    if lse is not None:  # [B, Hq, Sq] float32
        a._keep = _lse(lse)
        a.lse = ctypes.pointer(a._keep)
    return a


def _scalars(ctype, base=0):
    """(offset, struct code) of each scalar inside a ctypes Structure, in field order; pointers
    are 8-byte addresses."""
    codes = {ctypes.c_uint32: "I", ctypes.c_int32: "i", ctypes.c_int64: "q", ctypes.c_float: "f"}
    out = []
    for name, t in ctype._fields_:
        offset = base + getattr(ctype, name).offset
        if issubclass(t, ctypes.Structure):
            out += _scalars(t, offset)
        elif issubclass(t, ctypes.Array):
            out += [(offset + i * ctypes.sizeof(t._type_), codes[t._type_]) for i in range(t._length_)]
        else:
            out.append((offset, codes.get(t, "Q")))
    return out


def _packed_layout(parts):
    """One buffer holding `parts` (ctypes Structures) one after the other, 8-byte aligned: their
    offsets, and a struct.Struct that writes every scalar of all of them in one call."""
    offsets, scalars, end = [], [], 0
    for part in parts:
        offsets.append(end)
        scalars += _scalars(part, end)
        end += -(-ctypes.sizeof(part) // 8) * 8
    fmt, at = "<", 0
    for offset, code in scalars:
        fmt += "%dx%s" % (offset - at, code) if offset > at else code
        at = offset + struct.calcsize(code)
    fmt += "%dx" % (end - at) if end > at else ""
    return offsets, struct.Struct(fmt)


# ArgsV2 and the option structs its pointers point at, packed into one buffer per call: one
# struct.pack_into instead of a ctypes attribute write per field (a third of the host time).
_V2_PARTS = (ArgsV2, Lse, Varlen, Window, Alibi, PagedKv)
_V2_OFFSETS, _V2_STRUCT = _packed_layout(_V2_PARTS)
_V2_BUFFER = ctypes.c_char * _V2_STRUCT.size


def _tensor_scalars(t):
    """flashjit_tensor's scalars (data, dtype, reserved, shape, stride) of a 4-d view."""
    if t.dim() != 4:
        raise ValueError("expected a 4-d [batch, seq, heads, head_dim] view")
    return (t.data_ptr(), _DTYPES[str(t.dtype)], 0) + tuple(t.shape) + tuple(t.stride())


def make_args_v2(q, k, v, o, causal=False, lse=None, scale=0.0, tf32=False, varlen=None, window=None,
                 softcap=0.0, alibi_slopes=None, sinks=None, kv_lens=None, block_table=None, check=False,
                 kv_starts=None):
    """Version 2 arguments.

    varlen:       (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k), int32 device tensors of
                  batch + 1 prefix sums (cu_seqlens_k None with block_table); q, k, v, o are
                  then [1, total, H, D]
    window:       (left, right) keys before / after the diagonal, -1 for unbounded
    softcap:      > 0: scores become softcap * tanh(score / softcap)
    alibi_slopes: float32 device tensor [Hq] or [B, Hq]
    sinks:        float32 device tensor [Hq] of logits joining each row's softmax denominator
    kv_lens:      int32 device tensor [B]: keys each sequence uses of its cache (cache_seqlens)
    kv_starts:    int32 device tensor [B]: each sequence's first key in its cache (cache_leftpad):
                  it uses keys [kv_starts[b], kv_lens[b])
    block_table:  int32 device tensor [B, max_pages]: k and v are then page pools
                  [num_pages, page_size, Hkv, D] (needs kv_lens)
    check:        checked mode: the library reads back cu_seqlens, kv_lens and the block table and
                  raises on a bad entry (naming the array and index) instead of clamping it on the
                  device; costs one synchronization (FLASHJIT_CHECK=1 turns it on for every call)
    Returns an ArgsV2 over a buffer that also holds the option structs it points at.
    """
    buf = _V2_BUFFER()
    base = ctypes.addressof(buf)
    _, at_lse, at_varlen, at_window, at_alibi, at_paged = (base + offset for offset in _V2_OFFSETS)
    lse_fields, varlen_fields, window_fields, alibi_fields, paged_fields = (0,) * 7, (0,) * 5, (0, 0), (0, 0), (0,) * 3
    if lse is not None:
        lse_fields = (lse.data_ptr(),) + tuple(lse.shape) + tuple(lse.stride())
    if varlen is not None:
        cu_q, cu_k, max_q, max_k = varlen
        varlen_fields = (cu_q.data_ptr(), 0 if cu_k is None else cu_k.data_ptr(), cu_q.numel() - 1, max_q, max_k)
    if window is not None:
        window_fields = (window[0], window[1])
    if alibi_slopes is not None:
        alibi_fields = (alibi_slopes.data_ptr(), alibi_slopes.stride(0) if alibi_slopes.dim() == 2 else 0)
    if block_table is not None:
        paged_fields = (block_table.data_ptr(), block_table.stride(0), block_table.shape[1])
    _V2_STRUCT.pack_into(
        buf, 0, ctypes.sizeof(ArgsV2), ABI_VERSION,
        *_tensor_scalars(q), *_tensor_scalars(k), *_tensor_scalars(v), *_tensor_scalars(o),
        at_lse if lse is not None else 0, 1 if causal else 0, 1 if tf32 else 0, scale, softcap,
        at_varlen if varlen is not None else 0, at_window if window is not None else 0,
        at_alibi if alibi_slopes is not None else 0, 0 if sinks is None else sinks.data_ptr(),
        0 if kv_lens is None else kv_lens.data_ptr(), at_paged if block_table is not None else 0,
        CHECK_METADATA if check else 0, 0, 0, 0, 0 if kv_starts is None else kv_starts.data_ptr(),
        *lse_fields, *varlen_fields, *window_fields, *alibi_fields, *paged_fields)
    return ArgsV2.from_buffer(buf)


def set_sm_margin(lib, sm_margin):
    """The engine's default sm_margin (ABI version 6)."""
    if lib.abi < 6:
        raise FlashjitError("sm_margin needs libflashjit ABI version 6 or newer, this one is %d: update the library"
                            % lib.abi)
    if lib.flashjit_engine_set_sm_margin(lib.engine, int(sm_margin)) != 0:
        raise FlashjitError(lib.flashjit_last_error().decode())


def workspace_size(lib, args, stream=0):
    """Bytes of workspace a call with these arguments takes (args.workspace / workspace_bytes)."""
    size = ctypes.c_uint64()
    if lib.flashjit_workspace_size_v2(lib.engine, ctypes.byref(args), ctypes.c_void_p(stream), ctypes.byref(size)) != 0:
        raise FlashjitError(lib.flashjit_last_error().decode())
    return size.value


# BackwardArgsV1 packed with one struct.pack_into, as ArgsV2 is; the forward's ArgsV2 (from
# make_args_v2) keeps its own buffer, which the backward's struct points at.
_BWD_OFFSETS, _BWD_STRUCT = _packed_layout((BackwardArgsV1,))
_BWD_BUFFER = ctypes.c_char * _BWD_STRUCT.size


def make_backward_args_v1(forward, dout, dq, dk, dv, deterministic=False, dsinks=None):
    """flashjit_backward_args_v1 for the forward's arguments `forward` (an ArgsV2 from make_args_v2,
    with its o and lse) and the 4-d [B, S, H, D] views dout (o's shape), dq, dk, dv (q's, k's,
    v's shapes); dsinks: fp32 [heads_q] for the sinks' gradient (with the forward's sinks). The
    returned struct keeps `forward` alive."""
    buf = _BWD_BUFFER()
    _BWD_STRUCT.pack_into(buf, 0, ctypes.sizeof(BackwardArgsV1), ABI_VERSION, ctypes.addressof(forward),
                          *_tensor_scalars(dout), *_tensor_scalars(dq), *_tensor_scalars(dk), *_tensor_scalars(dv),
                          0 if dsinks is None else dsinks.data_ptr(), DETERMINISTIC if deterministic else 0, 0, 0, 0)
    args = BackwardArgsV1.from_buffer(buf)
    args._forward = forward
    return args


def _need_backward(lib):
    if getattr(lib, "abi", 1) < 5:
        raise FlashjitError("this libflashjit (ABI %d) has no backward pass: it came with ABI 5" % getattr(lib, "abi", 1))


def backward_workspace_size(lib, args, stream=0):
    """Bytes of workspace a backward call with these arguments takes."""
    _need_backward(lib)
    size = ctypes.c_uint64()
    if lib.flashjit_backward_workspace_size_v1(lib.engine, ctypes.byref(args), ctypes.c_void_p(stream),
                                               ctypes.byref(size)) != 0:
        raise FlashjitError(lib.flashjit_last_error().decode())
    return size.value


def backward_args(lib, args, stream=0):
    """Runs prepared backward arguments (make_backward_args_v1): writes dq, dk, dv."""
    _need_backward(lib)
    if lib.flashjit_backward_v1(lib.engine, ctypes.byref(args), ctypes.c_void_p(stream)) != 0:
        raise FlashjitError(lib.flashjit_last_error().decode())


def precompile_backward(lib, args, arch):
    """Compiles the backward kernel `args` would use for `arch` (no GPU needed); its name."""
    _need_backward(lib)
    name = ctypes.create_string_buffer(512)
    if lib.flashjit_precompile_backward_v1(lib.engine, ctypes.byref(args), arch.encode(), name, len(name)) != 0:
        raise FlashjitError(lib.flashjit_last_error().decode())
    return name.value.decode()


def forward_args(lib, args, stream=0):
    """Runs prepared arguments (make_args or make_args_v2): the cheapest call per step."""
    if isinstance(args, ArgsV2):
        rc = lib.flashjit_forward_v2(lib.engine, ctypes.byref(args), ctypes.c_void_p(stream))
    else:
        rc = lib.flashjit_forward(lib.engine, ctypes.byref(args), ctypes.c_void_p(stream))
    if rc != 0:
        raise FlashjitError(lib.flashjit_last_error().decode())


def forward(lib, q, k, v, o, causal=False, lse=None, scale=0.0, tf32=False, stream=None, **v2_options):
    """One attention call on the current PyTorch stream. v2_options: varlen, window, softcap,
    alibi_slopes, sinks, kv_lens, block_table (see make_args_v2)."""
    import torch
    s = stream if stream is not None else torch.cuda.current_stream().cuda_stream
    if getattr(lib, "abi", 1) >= 2:
        forward_args(lib, make_args_v2(q, k, v, o, causal, lse, scale, tf32, **v2_options), s)
    elif any(x is not None and x != 0.0 for x in v2_options.values()):
        raise FlashjitError("this libflashjit (ABI 1) has no %s" % ", ".join(sorted(v2_options)))
    else:
        forward_args(lib, make_args(q, k, v, o, causal, lse, scale, tf32), s)
