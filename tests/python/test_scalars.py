"""The per-call scalars are declared once, in engine/include/flashjit/scalars.h; the C++ side is
generated from that list, while the C ABI struct's member and the Python binding are written out by
hand. These tests hold them to the list: every scalar reaches the C ABI struct, the ctypes mirror,
make_args_v2, the operators' schemas and Python kernels and the C++ kernel under its own name and
type, 0 meaning unset everywhere (test_device_arrays.py does the same for the device arrays)."""
import inspect
import re
from pathlib import Path

import pytest
import torch

from flashjit import _abi, ops

ROOT = Path(__file__).resolve().parents[2]
SCALARS_H = ROOT / "engine/include/flashjit/scalars.h"
# ROW(X, type, field, rule, constant, tag, typical, backward, ...)
ROW = re.compile(r'ROW\(X,\s*(float),\s*(\w+),\s*\w+,\s*"\w+",\s*"\w+",\s*[^,]+,\s*([01]),')
C_TYPES = {"float": "float"}
CTYPES = {"float": _abi.ctypes.c_float}
SCHEMA_TYPES = {"float": "float"}  # the operator schema's type (a Python float, a C++ double)


def _rows():
    text = SCALARS_H.read_text()
    body = text[text.index("#define FLASHJIT_SCALARS(ROW, X)"):text.index("#define FLASHJIT_SCALAR_CALL")]
    body = body.replace("\\\n", " ")  # one line per macro, as the preprocessor sees it
    return [(kind, field, backward == "1") for kind, field, backward in ROW.findall(body)]


ROWS = _rows()
FIELDS = [field for _, field, _ in ROWS]


def test_the_list_parses():
    # The regex must see every row, or the checks below would pass on a shorter list.
    assert len(ROWS) == SCALARS_H.read_text().count("  ROW(X, ") >= 1
    assert "softcap" in FIELDS


@pytest.mark.parametrize("kind,field,backward", ROWS)
def test_c_abi_struct_has_the_field(kind, field, backward):
    header = (ROOT / "engine/include/flashjit/flashjit.h").read_text()
    struct = header[header.index("typedef struct flashjit_attention_args_v2"):]
    struct = struct[:struct.index("} flashjit_attention_args_v2;")]
    assert re.search(rf"\b{C_TYPES[kind]} {field};", struct), f"flashjit_attention_args_v2 lacks {kind} {field}"


@pytest.mark.parametrize("kind,field,backward", ROWS)
def test_ctypes_mirror_carries_the_field(kind, field, backward):
    assert dict(_abi.ArgsV2._fields_)[field] is CTYPES[kind]
    assert inspect.signature(_abi.make_args_v2).parameters[field].default == 0  # unset, as the C ABI's 0
    t = torch.zeros(1, 4, 2, 8, dtype=torch.float16)
    assert getattr(_abi.make_args_v2(t, t, t, t), field) == 0
    assert getattr(_abi.make_args_v2(t, t, t, t, **{field: 2.5}), field) == 2.5


@pytest.mark.parametrize("kind,field,backward", ROWS)
def test_operator_schemas_take_the_field(kind, field, backward):
    typed = f"{SCHEMA_TYPES[kind]} {field}"
    assert typed in ops._SCHEMA
    assert (typed in ops._TRAIN_SCHEMA) == backward and (typed in ops._BACKWARD_SCHEMA) == backward
    for function in (ops.call, ops.attention, ops.launch, ops.c_args):
        assert field in inspect.signature(function).parameters, function.__name__


@pytest.mark.parametrize("kind,field,backward", ROWS)
def test_call_never_drops_the_field(kind, field, backward):
    # call() takes the dense operator where no side array is given: a scalar rides it (its schema
    # names it) or keeps calls that set it off that route.
    call_source = inspect.getsource(ops.call)
    assert f"{SCHEMA_TYPES[kind]} {field}" in ops._DENSE_SCHEMA or re.search(rf"\b{field} == 0", call_source)
    # Under autograd a call that sets it either trains (the backward's support check keys on it) or,
    # where the backward does not apply it, is refused in call() before attention_train drops it.
    guard = inspect.getsource(ops._warn_if_backward_unsupported) if backward else call_source
    assert f"{field} != 0.0" in guard


@pytest.mark.parametrize("kind,field,backward", ROWS)
def test_cpp_kernel_fills_the_field(kind, field, backward):
    source = (ROOT / "torch_op/flashjit_torch_op.cpp").read_text()
    assert f"args.{field} = static_cast<{C_TYPES[kind]}>({field});" in source
    assert re.search(rf"double {field},", source), f"the C++ kernel does not take {field}"
