"""flashjit from Python through ctypes, on PyTorch tensors' data pointers: nothing to compile.

    import torch, flashjit_ctypes as fj
    lib = fj.load("build/libflashjit.so")
    o = torch.empty_like(q)
    fj.forward(lib, q, k, v, o, causal=True)   # q, k, v, o: [B, S, H, D] views (any strides)
"""
import ctypes
import os


class Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int32), ("reserved", ctypes.c_int32),
                ("shape", ctypes.c_int64 * 4), ("stride", ctypes.c_int64 * 4)]


class Lse(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("shape", ctypes.c_int64 * 3), ("stride", ctypes.c_int64 * 3)]


class Args(ctypes.Structure):
    _fields_ = [("q", Tensor), ("k", Tensor), ("v", Tensor), ("o", Tensor), ("lse", ctypes.POINTER(Lse)),
                ("mask", ctypes.c_int32), ("fp32_math", ctypes.c_int32), ("softmax_scale", ctypes.c_float),
                ("reserved", ctypes.c_int32)]


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


def make_args(q, k, v, o, causal=False, lse=None, scale=0.0, tf32=False):
    a = Args(tensor(q), tensor(k), tensor(v), tensor(o))
    a.mask = 1 if causal else 0
    a.fp32_math = 1 if tf32 else 0
    a.softmax_scale = scale
    if lse is not None:  # [B, Hq, Sq] float32
        l = Lse()
        l.data = lse.data_ptr()
        for i in range(3):
            l.shape[i] = lse.shape[i]
            l.stride[i] = lse.stride(i)
        a._lse_keepalive = l
        a.lse = ctypes.pointer(l)
    return a


def forward_args(lib, args, stream=0):
    if lib.flashjit_forward(lib.engine, ctypes.byref(args), ctypes.c_void_p(stream)) != 0:
        raise FlashjitError(lib.flashjit_last_error().decode())


def forward(lib, q, k, v, o, causal=False, lse=None, scale=0.0, tf32=False, stream=None):
    import torch
    s = stream if stream is not None else torch.cuda.current_stream().cuda_stream
    forward_args(lib, make_args(q, k, v, o, causal, lse, scale, tf32), s)
