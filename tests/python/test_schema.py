"""The schema shape rule behind the custom ops' fake implementations, on the schema as the core parsed it: named
dimensions, several outputs, optional inputs, batch broadcasting, symbolic sizes, and the core's errors for malformed
schemas."""

import pytest
import torch
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import kabi
from kabi import _core
from kabi._base.declarations import op_specs
from kabi.ops._schema import op_schema

PROJECT = "test_schema_project"


@pytest.fixture(scope="module")
def project() -> str:
    """An op with two outputs, no batch and an optional input; ops live as long as the process."""
    if PROJECT not in _core.op_list():
        _core.register_op(PROJECT, "x: [N, C] T, w: [C, H] T, shift?: [H] T -> y: [N, H] T, norm: [N] T",
                          "T: float32")
    return PROJECT


def test_every_registry_op_has_its_schema_in_the_core():
    for spec in op_specs().values():
        parsed = _core.op_schema(spec.name)
        assert parsed["schema"] == spec.schema
        assert op_schema(spec.name).input_names == tuple(tensor["name"] for tensor in parsed["inputs"])


@pytest.mark.parametrize(
    ("shapes", "expected"),
    [
        ([(4, 3), (3, 5)], (4, 5)),
        ([(2, 1, 4, 3), (6, 3, 5)], (2, 6, 4, 5)),
        ([(4, 3), (7, 3, 5)], (7, 4, 5)),
        ([(1, 4, 3), (3, 5)], (1, 4, 5)),
        ([(0, 4, 3), (1, 3, 5)], (0, 4, 5)),
    ],
)
def test_output_shape_follows_torch_matmul(shapes, expected):
    assert op_schema("matmul").output_shapes("matmul", shapes) == [expected]
    assert torch.matmul(*(torch.empty(shape) for shape in shapes)).shape == expected


@pytest.mark.parametrize(
    "shapes",
    [[(3,), (3,)], [(2, 3), (3,)], [(3,), (3, 4)], [(5, 2, 3), (3,)], [(3,), (5, 3, 4)], [(0,), (0,)], [(0,), (2, 0, 4)]],
)
def test_vectors_are_promoted_and_their_dimension_dropped_as_torch_matmul_does(shapes):
    schema = op_schema("matmul", (("a", "M"), ("b", "N")))
    expected = torch.matmul(*(torch.empty(shape) for shape in shapes)).shape
    assert schema.output_shapes("matmul", shapes) == [tuple(expected)]
    promotion = schema.vector_promotion("matmul", shapes)
    promoted = [promotion.promote_input(i, torch.empty(shape)) for i, shape in enumerate(shapes)]
    full = torch.matmul(*promoted)
    assert promotion.demote_output(0, full).shape == expected
    assert promotion.promote_output(0, torch.empty(expected)).shape == full.shape


def test_matrices_need_no_promotion_and_too_few_dimensions_are_named():
    schema = op_schema("matmul", (("a", "M"), ("b", "N")))
    assert schema.vector_promotion("matmul", [(4, 3), (3, 5)]) is None
    with pytest.raises(kabi.InvalidArgumentError, match=r"matmul: b has shape \[\] \(rank 0\); expected \[\.\.\., K, N\] or a vector"):
        schema.output_shapes("matmul", [(3,), ()])
    with pytest.raises(kabi.InvalidArgumentError, match=r"a has shape \[3\] \(rank 1\); expected \[\.\.\., M, K\] \(rank at least 2\)"):
        op_schema("matmul").output_shapes("matmul", [(3,), (3, 4)])


def test_several_outputs_unbatched_tensors_and_optional_inputs(project):
    schema = op_schema(project)
    assert [pattern.optional for pattern in schema.inputs] == [False, False, True]
    assert schema.output_shapes(project, [(5, 3), (3, 8), None]) == [(5, 8), (5,)]
    assert schema.output_shapes(project, [(5, 3), (3, 8), (8,)]) == [(5, 8), (5,)]
    with pytest.raises(kabi.InvalidArgumentError, match=r"shift has shape \[4\] but w has shape \[3, 8\]"):
        schema.output_shapes(project, [(5, 3), (3, 8), (4,)])
    with pytest.raises(kabi.InvalidArgumentError,
                       match=r"x has shape \[2, 5, 3\] \(rank 3\); expected \[N, C\] \(rank 2\)"):
        schema.output_shapes(project, [(2, 5, 3), (3, 8), None])
    with pytest.raises(kabi.InvalidArgumentError, match="input w is required but was passed absent"):
        schema.output_shapes(project, [(5, 3), None, None])


def test_symbolic_sizes_propagate():
    shape_env = ShapeEnv()
    batch = shape_env.create_unbacked_symint()
    rows = shape_env.create_unbacked_symint()
    (shape,) = op_schema("matmul").output_shapes("matmul", [(batch, rows, 3), (3, 5)])
    assert shape[0] is batch and shape[1] is rows and shape[2] == 5


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ("a: [M, K] float32", "expected '->' between inputs and outputs"),
        ("a: [M, K] float32 -> out: [M, Q] float32", "output out: dimension Q is not defined by any input"),
        ("a: [M, K] float32 -> out: [..., M] float32", "output out has \"...\" but no input does"),
        ("a: [M, K+1] float32 -> out: [M] float32", "a: \"K\\+1\" is not a dimension name"),
        ("a [M] float32 -> out: [M] float32", "expected 'name: \\[dims\\] dtype' or 'name: type'"),
        ("a: [M] float32, a: [M] float32 -> out: [M] float32", "the name \"a\" appears twice"),
        ("a: [M] -> out: [M] float32", "a: expected a type variable or dtype after its dimensions"),
    ],
)
def test_malformed_schemas_are_reported_by_the_core(schema, message):
    with pytest.raises(kabi.InvalidArgumentError, match=message):
        _core.register_op("test_schema_malformed", schema)


@pytest.mark.parametrize("vectors", [(("a", "N"),), (("c", "M"),)])
def test_vectors_must_name_a_dimension_of_their_input(vectors):
    with pytest.raises(kabi.InvalidArgumentError, match="vectors names .*, which the schema does not have"):
        op_schema("matmul", vectors)


def test_importing_kabi_leaves_torch_symbolic_shapes_unloaded() -> None:
    # The fake kernels' symbolic-size guards come from a module that pulls in sympy (~0.3 s): kabi imports it only
    # when torch is tracing, never with `import kabi`.
    import subprocess
    import sys

    script = "import sys, torch, kabi; print('torch.fx.experimental.symbolic_shapes' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
