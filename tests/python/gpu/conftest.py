"""What the GPU test files share. tiny_block.py (the training tests' transformer block) is
registered as the module flashjit_tests_tiny_block: CI's pytest (--import-mode=importlib, run from
outside the checkout) puts no test folder on sys.path, and torch.compile re-imports a traced
class's module by name, so loading it by path alone is not enough."""
import importlib.util
import os
import sys

_NAME = "flashjit_tests_tiny_block"
if _NAME not in sys.modules:
    _spec = importlib.util.spec_from_file_location(_NAME, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                                       "tiny_block.py"))
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[_NAME] = _module
    _spec.loader.exec_module(_module)
