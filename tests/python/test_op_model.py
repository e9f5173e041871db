"""The ABI 2.0 op model through the binding: the schema as the core parsed it (``_core.op_schema``), ops registered
from Python (``_core.register_op``) with attributes, optional inputs and concrete dtypes, calls described with
attributes and an absent optional input, kernel type constraints, and libkabi's errors as kabi's exception classes."""

from __future__ import annotations

import pytest
import torch

import kabi
from kabi import _core
from kabi._base.core_answers import Problem
from kabi._base.declarations import op_spec
from kabi._base.errors import AlreadyExistsError, InvalidArgumentError, NoEligibleKernelError, UnsupportedDtypeError
from kabi._base.tensors import descriptor
from kabi.ops._schema import op_schema

# In the order of their KABI_DTYPE_* bits, as the core lists a set.
MATMUL_DTYPES = (
    "float16", "bfloat16", "float32", "float64", "int8", "int32", "int64", "uint8", "int16", "complex64", "complex128",
)
LINEAR = "test_model_linear"
LINEAR_SCHEMA = (
    "x: [..., K] T, w: [N, K] T, bias?: [N] T, scale: [] float32, "
    "activation: enum(none, relu, gelu) = none, alpha: float = 0.5, fused: bool = false, groups: int = 1 "
    "-> out: [..., N] T"
)
MIXED = "test_model_mixed"


@pytest.fixture(scope="module")
def linear() -> str:
    """A toy op with an optional input, a concrete dtype, and attributes of every type; ops live as long as the
    process, so it is registered once."""
    if LINEAR not in _core.op_list():
        _core.register_op(LINEAR, LINEAR_SCHEMA, "T: float32, float64", "dtype,layout,batch,N,K,activation")
    return LINEAR


@pytest.fixture(scope="module")
def mixed() -> str:
    """A toy op with two type variables."""
    if MIXED not in _core.op_list():
        _core.register_op(MIXED, "a: [N] T, b: [N] U -> out: [N] T", "T: float32, float64; U: float16, float32")
    return MIXED


def test_matmul_schema_as_the_core_parsed_it():
    schema = _core.op_schema("matmul")
    assert schema["name"] == "matmul"
    assert schema["schema"] == "a: [..., M, K] T, b: [..., K, N] T -> out: [..., M, N] T"
    assert schema["dims"] == ("M", "K", "N")
    assert schema["type_variables"] == {"T": MATMUL_DTYPES}
    assert schema["tuning_key"] == "dtype,layout,batch,M:pow2<=4096,N,K"
    assert schema["attributes"] == ()
    a, b = schema["inputs"]
    assert a == {"name": "a", "optional": False, "has_batch": True, "dims": ("M", "K"), "shapes": (("M", "K"),),
                 "type_variable": "T", "dtype": None, "dtypes": MATMUL_DTYPES, "leading_dim_optional": False,
                 "present_with": None, "offsets_of": None}
    assert (b["name"], b["dims"]) == ("b", ("K", "N"))
    (out,) = schema["outputs"]
    assert (out["name"], out["dims"], out["type_variable"], out["has_batch"]) == ("out", ("M", "N"), "T", True)


def test_op_spec_reads_the_types_table():
    spec = op_spec("matmul")
    assert list(spec.type_variables) == ["T"] and set(spec.type_variables["T"]) == set(MATMUL_DTYPES)
    assert spec.dtypes == spec.type_variables["T"]
    assert spec.type_variables_text == _core.op_info("matmul")["type_variables"]
    assert op_schema("matmul").input_names == ("a", "b")


def test_registered_op_model(linear):
    schema = _core.op_schema(linear)
    assert [tensor["name"] for tensor in schema["inputs"]] == ["x", "w", "bias", "scale"]
    bias, scale = schema["inputs"][2], schema["inputs"][3]
    assert bias["optional"] and bias["type_variable"] == "T" and bias["dtypes"] == ("float32", "float64")
    assert (scale["dims"], scale["type_variable"], scale["dtype"]) == ((), None, "float32")
    attributes = {attribute["name"]: attribute for attribute in schema["attributes"]}
    assert attributes["activation"] == {"name": "activation", "type": "enum", "enum_values": ("none", "relu", "gelu"),
                                        "has_default": True, "default": "none", "in_tuning_key": True,
                                        "type_variable": None}
    assert (attributes["alpha"]["type"], attributes["alpha"]["default"]) == ("float", 0.5)
    assert (attributes["fused"]["type"], attributes["fused"]["default"]) == ("bool", False)
    assert (attributes["groups"]["type"], attributes["groups"]["default"], attributes["groups"]["in_tuning_key"]) == (
        "int", 1, False)
    assert op_schema(linear).inputs[2].optional


def _linear_inputs(dtype=torch.float32):
    x, w, bias = torch.randn(3, 4, 8, dtype=dtype), torch.randn(6, 8, dtype=dtype), torch.randn(6, dtype=dtype)
    return x, w, bias, torch.tensor(2.0)


def test_describe_with_attributes_and_an_absent_optional_input(linear):
    x, w, _, scale = _linear_inputs()
    problem = _core.describe(linear, [descriptor(x), descriptor(w), None, descriptor(scale)], (),
                             ["gelu", 0.25, True])
    assert problem["inputs_present"] == (True, True, False, True)
    assert problem["layouts"][2] == 0
    assert problem["attributes"] == ("gelu", 0.25, True, 1)
    assert problem["type_bindings"] == ("float32",) and problem["dtype"] == "float32"
    assert problem["output_shapes"] == ((3, 4, 6),) and problem["output_shape"] == (3, 4, 6)
    assert problem["key"] == "float32|contiguous,contiguous,absent,contiguous|12|6|8|gelu"

    x, w, bias, scale = _linear_inputs(torch.float64)
    problem = _core.describe(linear, [descriptor(x), descriptor(w), descriptor(bias), descriptor(scale)])
    assert problem["inputs_present"] == (True, True, True, True)
    assert problem["attributes"] == ("none", 0.5, False, 1)
    assert Problem.from_core(problem).attributes == ("none", 0.5, False, 1)


def test_errors_map_to_kabi_exceptions(linear):
    x, w, bias, scale = _linear_inputs()
    inputs = [descriptor(x), descriptor(w), None, descriptor(scale)]
    with pytest.raises(InvalidArgumentError, match="attribute activation is 7; expected an index below 3"):
        _core.describe(linear, inputs, (), [7])
    with pytest.raises(InvalidArgumentError, match=r"attribute activation is \"swish\"; expected one of none"):
        _core.describe(linear, inputs, (), ["swish"])
    with pytest.raises(InvalidArgumentError, match="attribute fused takes a bool"):
        _core.describe(linear, inputs, (), ["none", 1.0, 1])
    with pytest.raises(InvalidArgumentError, match="input w is required but was passed absent"):
        _core.describe(linear, [descriptor(x), None, None, descriptor(scale)])
    with pytest.raises(UnsupportedDtypeError, match=r"x is float32 but bias is float64 \(both have type T\)"):
        _core.describe(linear, [descriptor(x), descriptor(w), descriptor(bias.double()), descriptor(scale)])
    with pytest.raises(UnsupportedDtypeError, match="scale is float64; expected float32"):
        _core.describe(linear, [descriptor(x), descriptor(w), None, descriptor(scale.double())])
    with pytest.raises(InvalidArgumentError, match="enum needs its values"):
        _core.register_op("test_model_bad", "x: [N] float32, mode: enum -> out: [N] float32")
    with pytest.raises(InvalidArgumentError, match="must name \"layout\""):
        _core.register_op("test_model_bad", "x: [N] float32, y?: [N] float32 -> out: [N] float32", None, "N")
    with pytest.raises(AlreadyExistsError, match=LINEAR):
        _core.register_op(LINEAR, LINEAR_SCHEMA, "T: float32, float64")


def test_kernel_type_constraints_filter_with_reason(mixed):
    kabi.register_kernel(mixed, lambda a, b, out=None: a, name="test.model.half_b", dtypes=["float32", "float64"],
                         type_constraints={"U": ["float16"]})
    try:
        info = kabi.kernel_info(mixed, "test.model.half_b")
        assert info.type_constraints == "U: float16"
        a = torch.randn(4)
        selection = _core.select(mixed, [descriptor(a), descriptor(a)], allow_unverified=True, allow_none=True)
        (candidate,) = [c for c in selection["candidates"] if c["name"] == "test.model.half_b"]
        assert candidate["reason"] == "dtype of U float32 not in {float16}"
        with pytest.raises(NoEligibleKernelError, match=r"dtype of U float32 not in \{float16\}"):
            _core.select(mixed, [descriptor(a), descriptor(a)], allow_unverified=True)
        selection = _core.select(mixed, [descriptor(a), descriptor(a.half())], allow_unverified=True)
        assert selection["kernel"]["name"] == "test.model.half_b"
        assert selection["problem"]["type_bindings"] == ("float32", "float16")
    finally:
        kabi.unregister_kernel(mixed, "test.model.half_b")
