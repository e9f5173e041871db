"""kabi.backends.torch_native.linear against the op's float64 reference, judged as the correctness gate judges a
candidate (kabi._selection.correctness) with the op's declared tolerances."""

from __future__ import annotations

import pytest
import torch
from _linear_cases import LINEAR_CASES, make_inputs, tolerances

from kabi._base.declarations import Tolerance
from kabi._selection.correctness import check_output, reference_output
from kabi.backends.torch_native import linear
from kabi.ops import _references
from kabi.ops._references import ACTIVATIONS

_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_TOLERANCES = {name: Tolerance(**values) for name, values in tolerances().items()}


def _verdict(output: torch.Tensor, x, w, bias, activation: str) -> str | None:
    reference = reference_output(_references.linear, [x, w, bias, activation])
    return check_output(output, reference, _TOLERANCES[str(x.dtype).removeprefix("torch.")], expected_dtype=x.dtype)


@pytest.mark.parametrize("case", LINEAR_CASES, ids=lambda case: case.name)
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("dtype", _DTYPES, ids=lambda dtype: str(dtype).removeprefix("torch."))
def test_matches_the_reference(case, activation, dtype):
    x, w, bias = make_inputs(case, dtype, seed=len(case.x_shape) * 131 + case.n)
    output = linear(x, w, bias, activation)
    assert output.shape == (*case.x_shape[:-1], case.n)
    assert _verdict(output, x, w, bias, activation) is None


@pytest.mark.parametrize("case", LINEAR_CASES[:4], ids=lambda case: case.name)
@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_writes_into_out(case, activation):
    x, w, bias = make_inputs(case, torch.float32, seed=7)
    out = torch.full((*case.x_shape[:-1], case.n), float("nan"))
    assert linear(x, w, bias, activation, out=out) is out
    assert _verdict(out, x, w, bias, activation) is None


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_the_activation_in_place_touches_only_the_product(activation):
    x, w, bias = make_inputs(LINEAR_CASES[2], torch.float64, seed=11)
    originals = [tensor.clone() for tensor in (x, w, bias)]
    linear(x, w, bias, activation)
    for tensor, original in zip((x, w, bias), originals):
        assert torch.equal(tensor, original)


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_autograd_differentiates_through_the_activation(activation):
    inputs = make_inputs(LINEAR_CASES[2], torch.float64, seed=13)
    leaves = [tensor.clone().requires_grad_() for tensor in inputs]
    reference_leaves = [tensor.clone().requires_grad_() for tensor in inputs]
    output = linear(*leaves, activation)
    expected = _references.linear(*reference_leaves, activation)
    torch.testing.assert_close(output, expected)
    output.sum().backward()
    expected.sum().backward()
    for leaf, reference_leaf in zip(leaves, reference_leaves):
        torch.testing.assert_close(leaf.grad, reference_leaf.grad)


def test_unknown_activation_is_refused():
    x, w, bias = make_inputs(LINEAR_CASES[0], torch.float32, seed=3)
    with pytest.raises(ValueError, match="activation must be one of none, relu, gelu, gelu_tanh, silu"):
        linear(x, w, bias, "swish")
