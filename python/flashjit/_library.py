"""The library behind the package: found, loaded once per process with one engine, freed at exit.

The wheel carries libflashjit.so beside this file; FLASHJIT_LIB names another build. The library
opens the CUDA driver (libcuda.so.1, installed with the driver) and NVRTC at run time. NVRTC comes
from the CUDA toolkit where the loader finds it, else from the NVIDIA wheels a CUDA build of
PyTorch installs (site-packages/nvidia/.../libnvrtc.so.13 or .12): a plain PyTorch environment
needs no toolkit. FLASHJIT_NVRTC_PATH, when set, is used as it is.
"""
import ctypes
import glob
import os
import sys
import threading

from . import _abi

_lock = threading.Lock()
_lib = None
_NVRTC_SONAMES = ("libnvrtc.so.13", "libnvrtc.so.12")


def library_path():
    """The libflashjit.so this package loads."""
    return os.environ.get("FLASHJIT_LIB") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "libflashjit.so")


def _loadable(name):
    try:
        ctypes.CDLL(name)
        return True
    except OSError:
        return False


def nvrtc_from_wheels():
    """libnvrtc from the NVIDIA wheels on sys.path (newest CUDA first), or None."""
    for soname in _NVRTC_SONAMES:
        for root in sys.path:
            hits = sorted(glob.glob(os.path.join(root, "nvidia", "*", "lib", soname)) +
                          glob.glob(os.path.join(root, "nvidia", "*", "*", "lib", soname)))
            if hits:
                return hits[0]
    return None


def _point_at_nvrtc():
    """Sets FLASHJIT_NVRTC_PATH to a wheel's NVRTC when the system has none (before the first compile)."""
    if os.environ.get("FLASHJIT_NVRTC_PATH") or any(_loadable(n) for n in _NVRTC_SONAMES):
        return
    path = nvrtc_from_wheels()
    if path:
        os.environ["FLASHJIT_NVRTC_PATH"] = path


def get():
    """The loaded library (ctypes.CDLL with .engine), loaded on first use."""
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                path = library_path()
                if not os.path.exists(path):
                    raise _abi.FlashjitError("libflashjit.so not found at %s (set FLASHJIT_LIB to a build of it)" % path)
                _point_at_nvrtc()
                lib = _abi.load(path)
                import atexit
                atexit.register(lib.flashjit_engine_destroy, lib.engine)
                _lib = lib
    return _lib


def version():
    """The library's version and the NVRTC it loads ("flashjit 0.1.0 (NVRTC 13.0)")."""
    return get().flashjit_version().decode()


def set_sm_margin(sm_margin: int):
    """Leaves `sm_margin` SMs of the GPU to other kernels in every later flashjit call (as
    FlashAttention-3's sm_margin, for NCCL's kernels beside a ring's attention): persistent grids
    and split-KV counts size to the rest; results do not change. 0 gives the whole GPU back.
    FLASHJIT_SM_MARGIN sets it when the library loads. A call already captured in a CUDA graph
    keeps the grid it was captured with."""
    from . import _abi
    _abi.set_sm_margin(get(), sm_margin)
