"""flashjit: fused attention kernels generated at run time (NVRTC), for PyTorch.

    import flashjit
    out = flashjit.flash_attn_func(q, k, v, causal=True)   # FlashAttention's API and layouts

The operator behind it is torch.ops.flashjit.attention (flashjit.ops): torch.compile, CUDA
graphs and torch.export see it as one op. Importing this package loads neither torch nor the
library: both load on first use. flashjit.sdpa (the flash backend of PyTorch's SDPA, activated on
request) and flashjit.transformers (an attention implementation for transformers) load when
imported.
"""
from ._abi import FlashjitError

__version__ = "0.1.0"
__all__ = ["FlashjitError", "flash_attn_combine", "flash_attn_func", "flash_attn_varlen_func", "flash_attn_with_kvcache",
           "library_path", "merge_attention", "precompile", "set_sm_margin", "version"]

_LAZY = {"flash_attn_func": "interface", "flash_attn_varlen_func": "interface", "flash_attn_with_kvcache": "interface",
         "library_path": "_library", "version": "_library", "set_sm_margin": "_library", "precompile": "warmup", "ops": None, "interface": None,
         "warmup": None, "sdpa": None, "transformers": None, "merge_attention": "merge", "flash_attn_combine": "merge",
         "merge": None}


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError("module 'flashjit' has no attribute %r" % name)
    import importlib
    module = importlib.import_module("." + (_LAZY[name] or name), __name__)
    value = module if _LAZY[name] is None else getattr(module, name)
    globals()[name] = value
    return value
