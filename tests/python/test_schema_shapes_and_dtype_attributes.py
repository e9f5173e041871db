"""Two parts of the op model that scaled_mm brought, on ops of their own: an input of several declared shapes with a
literal 1 ("s: [] | [M, 1] float32", picked by the call's rank), and an attribute typed by a type variable
("out_dtype: U = float32"), whose value binds the variable that types an output. The core parses and checks both;
Python's shape rule and dtype binding (the fake implementations under torch.compile) read the parsed form."""

import pytest
import torch

import kabi
from kabi import _core
from kabi._base.tensors import descriptor
from kabi.ops._schema import op_schema

OP = "test_schema_scaled_rows"


@pytest.fixture(scope="module")
def op() -> str:
    """Rows of x scaled per row or per tensor, written in the dtype out_dtype chooses; ops live as long as the
    process."""
    if OP not in _core.op_list():
        _core.register_op(OP, "x: [M, K] T, s: [] | [M, 1] float32, out_dtype: U = float32 -> y: [M, K] U, "
                              "norm: [M, 1] U", "T: float16, float32; U: float16, float32")
    return OP


def test_the_core_reports_every_shape_and_the_bound_variable(op):
    parsed = _core.op_schema(op)
    scale = parsed["inputs"][1]
    assert scale["dims"] == () and scale["shapes"] == ((), ("M", "1"))
    assert parsed["outputs"][1]["dims"] == ("M", "1")
    (out_dtype,) = parsed["attributes"]
    assert out_dtype["type"] == "enum" and out_dtype["type_variable"] == "U"
    assert out_dtype["enum_values"] == ("float16", "float32") and out_dtype["default"] == "float32"


@pytest.mark.parametrize("scale_shape", [(), (5, 1)])
def test_the_shape_rule_picks_the_shape_by_rank(op, scale_shape):
    assert op_schema(op).output_shapes(op, [(5, 3), scale_shape]) == [(5, 3), (5, 1)]


@pytest.mark.parametrize(("scale_shape", "message"), [
    ((5,), r"s has shape \[5\] \(rank 1\); expected \[\] or \[M, 1\] \(rank 0 or 2\)"),
    ((5, 2), r"s has shape \[5, 2\]; expected \[\] or \[M, 1\]: its dimension -1 must be 1"),
    ((4, 1), r"s's dimension M \(-2\) must be 5"),
])
def test_the_shape_rule_names_a_shape_that_fits_none(op, scale_shape, message):
    with pytest.raises(kabi.InvalidArgumentError, match=message):
        op_schema(op).output_shapes(op, [(5, 3), scale_shape])


def test_the_attribute_binds_its_variable_for_fake_tensors(op):
    schema = op_schema(op)
    assert schema.bind_dtypes(op, ["float16", "float32"], {"out_dtype": "float16"}) == {"U": "float16",
                                                                                       "T": "float16"}
    assert schema.bind_dtypes(op, ["float32", "float32"]) == {"U": "float32", "T": "float32"}
    assert schema.output_dtypes(["float32", "float16"]) == ("float16", "float16")


def test_the_core_binds_the_output_dtype_from_the_attribute(op):
    x = descriptor(torch.randn(5, 3, dtype=torch.float16))
    for scale, shape_in_key in ((torch.tensor(2.0), "[]"), (torch.ones(5, 1), "[M,1]")):
        for index, out_dtype in enumerate(("float16", "float32")):
            problem = _core.describe(op, [x, descriptor(scale)], attributes=[index])
            assert problem["type_bindings"] == ("float16", out_dtype)
            assert problem["output_shapes"] == ((5, 3), (5, 1))
            assert problem["key"] == f"float16,{out_dtype}|contiguous,contiguous{shape_in_key}|1|5|3|{out_dtype}"


def test_an_output_of_another_dtype_than_the_attribute_is_refused(op):
    inputs = [descriptor(torch.randn(5, 3)), descriptor(torch.tensor(2.0))]
    outputs = [descriptor(torch.empty(5, 3, dtype=torch.float16)), descriptor(torch.empty(5, 1, dtype=torch.float16))]
    with pytest.raises(kabi.UnsupportedDtypeError, match="y is float16 but out_dtype is float32"):
        _core.describe(op, inputs, outputs)
    assert _core.describe(op, inputs, outputs, attributes=[0])["type_bindings"] == ("float32", "float16")


@pytest.mark.parametrize(
    ("schema", "types", "message"),
    [
        ("x: [M] T -> y: [M] | [] T", "T: float32", "output y has several shapes"),
        ("x: [M] T, s: [M] | [K] float32 -> y: [M] T", "T: float32", "s: two of its shapes have rank 1"),
        ("x: [..., M] | [] T -> y: [M] T", "T: float32", "x: a tensor with several shapes cannot have"),
        ("x: [M] T, s: [] | [Q] float32 -> y: [Q] T", "T: float32",
         "output y: dimension Q is defined only by optional inputs or inputs of several shapes"),
        ("x: [M] T, o: V = float32 -> y: [M] T", "T: float32",
         "attribute o: \"V\" is not int, float, bool, enum\\(...\\) or a type variable \\(T\\)"),
        ("x: [M] T, o: U = float64 -> y: [M] U", "T: float32; U: float16, float32",
         "attribute o: default \"float64\" is not one of its values \\(float16, float32\\)"),
        ("x: [M] T, b?: [M] U -> y: [M] U", "T: float32; U: float16",
         "type variable U types an output but no required input or attribute"),
    ],
)
def test_malformed_declarations_are_reported_by_the_core(schema, types, message):
    with pytest.raises(kabi.InvalidArgumentError, match=message):
        _core.register_op("test_schema_malformed_shapes", schema, types)
