"""The ctypes binding of the C ABI, for scripts that put python/ on sys.path (README, bench/):
the same module as flashjit._abi, which the pip package uses. Needs no torch to import."""
from flashjit._abi import *  # noqa: F401,F403
from flashjit._abi import ABI_VERSION, CHECK_METADATA, FlashjitError, forward, forward_args, load, make_args, make_args_v2, tensor  # noqa: F401
