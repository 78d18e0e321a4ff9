"""A stand-in `flash_attn` package for running FlashAttention-2's test file against flashjit.

Not FlashAttention: every name maps onto flashjit's FlashAttention-compatible API
(flashjit.interface). What flashjit cannot do raises NotImplementedError naming the feature;
nothing computes a different result silently, and no backward pass is faked: gradients run
flashjit's own backward, which refuses what it lacks by name (FlashjitError "unsupported: ...").
Used only by bench/device_fa_tests.sh.
"""
from .flash_attn_interface import (
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)

__all__ = ["flash_attn_func", "flash_attn_kvpacked_func", "flash_attn_qkvpacked_func", "flash_attn_varlen_func",
           "flash_attn_varlen_kvpacked_func", "flash_attn_varlen_qkvpacked_func", "flash_attn_with_kvcache"]
__version__ = "0.0.0+flashjit.fa_compat"
