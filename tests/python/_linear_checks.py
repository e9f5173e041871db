"""Shared by test_linear.py and test_linear_binding.py (and the Triton worker test_linear.py starts): fresh inputs of
the linear op and the check of an output against F.linear and the activation, judged by the op's gate check with the
tolerances of registry/ops/linear.toml."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from kabi._base.declarations import op_spec
from kabi._selection.correctness import check_output
from kabi.ops._references import ACTIVATIONS

# N off every tile size.
N = 29
TOLERANCE = op_spec("linear").tolerance
ACTIVATION_FUNCTIONS = {
    "none": lambda value: value,
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": functools.partial(F.gelu, approximate="tanh"),
    "silu": F.silu,
}
assert tuple(ACTIVATION_FUNCTIONS) == tuple(ACTIVATIONS)


def expected(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, activation: str) -> torch.Tensor:
    """F.linear and the activation in float64 on the same (rounded) inputs."""
    double_bias = None if bias is None else bias.double()
    return ACTIVATION_FUNCTIONS[activation](F.linear(x.double(), w.double(), double_bias))


def make_inputs(x_shape: tuple, dtype: torch.dtype, *, with_bias: bool, transposed_weight: bool) -> tuple:
    """Fresh x [..., K], w [N, K] (a .t() view of a [K, N] tensor when transposed_weight), bias [N] or None."""
    k = x_shape[-1]
    x = torch.randn(x_shape).to(dtype)
    w = torch.randn(k, N).to(dtype).t() if transposed_weight else torch.randn(N, k).to(dtype)
    bias = torch.randn(N).to(dtype) if with_bias else None
    return x, w, bias


def assert_matches(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None,
                   activation: str) -> None:
    assert out.shape == (*x.shape[:-1], N) and out.dtype == x.dtype
    verdict = check_output(out, expected(x, w, bias, activation), TOLERANCE[str(x.dtype).removeprefix("torch.")],
                           expected_dtype=x.dtype)
    assert verdict is None, verdict
