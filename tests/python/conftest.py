"""Every test process compiles into a cache folder of its own (the engine reads
FLASHJIT_CACHE_DIR once, when the package creates it)."""
import os
import tempfile

os.environ["FLASHJIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="flashjit-pytest-")
