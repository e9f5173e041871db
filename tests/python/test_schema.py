"""The schema shape rule behind the custom ops' fake implementations: parsing, named and fixed dimensions, batch
broadcasting, symbolic sizes, and the errors for malformed schemas."""

import pytest
import torch
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import kabi
from kabi._base.declarations import op_specs
from kabi.ops._schema import parse_schema

MATMUL = "a: [..., M, K], b: [..., K, N] -> out: [..., M, N]"


def test_every_registry_schema_parses_with_the_registry_input_names():
    for spec in op_specs().values():
        assert parse_schema(spec.schema).input_names == spec.input_names


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
    assert parse_schema(MATMUL).output_shapes("matmul", shapes) == [expected]
    assert torch.matmul(*(torch.empty(shape) for shape in shapes)).shape == expected


@pytest.mark.parametrize(
    "shapes",
    [[(3,), (3,)], [(2, 3), (3,)], [(3,), (3, 4)], [(5, 2, 3), (3,)], [(3,), (5, 3, 4)], [(0,), (0,)], [(0,), (2, 0, 4)]],
)
def test_vectors_are_promoted_and_their_dimension_dropped_as_torch_matmul_does(shapes):
    schema = parse_schema(MATMUL, (("a", "M"), ("b", "N")))
    expected = torch.matmul(*(torch.empty(shape) for shape in shapes)).shape
    assert schema.output_shapes("matmul", shapes) == [tuple(expected)]
    promotion = schema.vector_promotion("matmul", shapes)
    promoted = [promotion.promote_input(i, torch.empty(shape)) for i, shape in enumerate(shapes)]
    full = torch.matmul(*promoted)
    assert promotion.demote_output(0, full).shape == expected
    assert promotion.promote_output(0, torch.empty(expected)).shape == full.shape


def test_matrices_need_no_promotion_and_too_few_dimensions_are_named():
    schema = parse_schema(MATMUL, (("a", "M"), ("b", "N")))
    assert schema.vector_promotion("matmul", [(4, 3), (3, 5)]) is None
    with pytest.raises(kabi.InvalidArgumentError, match=r"matmul: b has shape \[\] \(rank 0\); expected \[\.\.\., K, N\] or a vector"):
        schema.output_shapes("matmul", [(3,), ()])
    with pytest.raises(kabi.InvalidArgumentError, match=r"a has shape \[3\] \(rank 1\); expected \[\.\.\., M, K\] \(rank at least 2\)"):
        parse_schema(MATMUL).output_shapes("matmul", [(3,), (3, 4)])


def test_fixed_sizes_and_unbatched_tensors():
    schema = parse_schema("x: [N, 3], w: [3, H] -> y: [N, H], norm: [N]")
    assert schema.output_shapes("project", [(5, 3), (3, 8)]) == [(5, 8), (5,)]
    with pytest.raises(kabi.InvalidArgumentError, match=r"project: x has shape \[5, 4\]; its dimension -1 must be 3"):
        schema.output_shapes("project", [(5, 4), (3, 8)])
    with pytest.raises(kabi.InvalidArgumentError, match=r"x has shape \[2, 5, 3\] \(rank 3\); expected \[N, 3\] \(rank 2\)"):
        schema.output_shapes("project", [(2, 5, 3), (3, 8)])


def test_symbolic_sizes_propagate():
    shape_env = ShapeEnv()
    batch = shape_env.create_unbacked_symint()
    rows = shape_env.create_unbacked_symint()
    (shape,) = parse_schema(MATMUL).output_shapes("matmul", [(batch, rows, 3), (3, 5)])
    assert shape[0] is batch and shape[1] is rows and shape[2] == 5


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ("a: [M, K]", "expected 'inputs -> outputs'"),
        ("a: [M, K] -> out: [M, Q]", "output out uses Q, which no input names"),
        ("a: [M, K] -> out: [..., M]", "output out has '...' but no input does"),
        ("a: [M, K+1] -> out: [M]", "a has dimension 'K\\+1'"),
        ("a [M] -> out: [M]", "is not of the form 'name: \\[dims\\]'"),
        ("a: [M], a: [M] -> out: [M]", "tensor names must be unique"),
    ],
)
def test_malformed_schemas_are_reported(schema, message):
    with pytest.raises(kabi.InvalidArgumentError, match=message):
        parse_schema(schema)


@pytest.mark.parametrize("vectors", [(("a", "N"),), (("c", "M"),)])
def test_vectors_must_name_a_dimension_of_their_input(vectors):
    with pytest.raises(kabi.InvalidArgumentError, match="vectors names .*, which the schema does not have"):
        parse_schema(MATMUL, vectors)


def test_importing_kabi_leaves_torch_symbolic_shapes_unloaded() -> None:
    # The fake kernels' symbolic-size guards come from a module that pulls in sympy (~0.3 s): kabi imports it only
    # when torch is tracing, never with `import kabi`.
    import subprocess
    import sys

    script = "import sys, torch, kabi; print('torch.fx.experimental.symbolic_shapes' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
