"""The per-call device arrays are declared once, in engine/include/flashjit/device_arrays.h; the C++
side is generated from that list, the Python binding is written out by hand. These tests hold the
binding to the list: every array reaches the C ABI struct, the ctypes mirror, the operator's schema,
the Python kernel and the C++ kernel under its own name, with its own element type and extent."""
import inspect
import re
from pathlib import Path

import pytest
import torch

from flashjit import _abi, ops

ROOT = Path(__file__).resolve().parents[2]
ROW = re.compile(r"ROW\(X,\s*(float|int),\s*(\w+),\s*(batch|heads_q),")


def _rows():
    text = (ROOT / "engine/include/flashjit/device_arrays.h").read_text()
    body = text[text.index("#define FLASHJIT_DEVICE_ARRAYS(ROW, X)"):text.index("#define FLASHJIT_DEVICE_ARRAY_CALL")]
    return ROW.findall(body)


ROWS = _rows()
FIELDS = [field for _, field, _ in ROWS]


def test_the_list_parses():
    # The regex must see every row, or the checks below would pass on a shorter list.
    text = (ROOT / "engine/include/flashjit/device_arrays.h").read_text()
    assert len(ROWS) == text.count("  ROW(X, ") >= 3
    assert {"sinks", "kv_lens", "kv_starts"} <= set(FIELDS)


@pytest.mark.parametrize("elem,field,extent", ROWS)
def test_c_abi_struct_has_the_field(elem, field, extent):
    header = (ROOT / "engine/include/flashjit/flashjit.h").read_text()
    struct = header[header.index("typedef struct flashjit_attention_args_v2"):]
    struct = struct[:struct.index("} flashjit_attention_args_v2;")]
    c_type = {"float": "float", "int": "int32_t"}[elem]
    assert re.search(rf"const {c_type}\* {field};", struct), f"flashjit_attention_args_v2 lacks const {c_type}* {field}"


@pytest.mark.parametrize("field", FIELDS)
def test_ctypes_mirror_has_the_field(field):
    names = [name for name, _ in _abi.ArgsV2._fields_]
    assert field in names
    assert dict(_abi.ArgsV2._fields_)[field] is _abi.ctypes.c_void_p


@pytest.mark.parametrize("field", FIELDS)
def test_operator_schema_takes_the_field(field):
    assert f"Tensor? {field}" in ops._SCHEMA
    assert field in inspect.signature(ops.call).parameters


@pytest.mark.parametrize("field", FIELDS)
def test_python_kernel_passes_the_field(field):
    assert field in inspect.signature(_abi.make_args_v2).parameters


@pytest.mark.parametrize("elem,field,extent", ROWS)
def test_cpp_kernel_fills_and_checks_the_field(elem, field, extent):
    source = (ROOT / "torch_op/flashjit_torch_op.cpp").read_text()
    c_type = {"float": "float", "int": "int32_t"}[elem]
    assert f"args.{field} = static_cast<const {c_type}*>({field}->data_ptr());" in source
    dtype = {"float": "f32", "int": "i32"}[elem]
    size = {"batch": "batch", "heads_q": "hq"}[extent]
    assert f'check_side("{field}", {field}, q_device, {dtype}, {{{size}}});' in source


@pytest.mark.parametrize("elem,field,extent", ROWS)
def test_python_checks_the_field(elem, field, extent):
    # The operator's Python kernel and the Python-side checks refuse a wrong dtype or extent by name.
    source = inspect.getsource(ops._check_inputs)
    dtype = {"float": "torch.float32", "int": "torch.int32"}[elem]
    size = {"batch": "batch", "heads_q": "hq"}[extent]
    assert f'_check_side("{field}", {field}, q.device, {dtype}, ({size},))' in source
    assert (field in ops._INT32_ARRAYS) == (elem == "int")
    with pytest.raises(_abi.FlashjitError, match=f"{field} must be"):
        wrong = torch.zeros(3, dtype=torch.float64)
        ops._check_side(field, wrong, wrong.device, getattr(torch, dtype.split(".")[1]), (3,))
