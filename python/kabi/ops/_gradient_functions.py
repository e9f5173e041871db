"""The functions a gradient declared in an op's TOML may call besides kabi ops (``[gradient]``, read by
``kabi._base.declarations``, whose ``GRADIENT_FUNCTIONS`` names exactly these).

Each is written with differentiable torch operations and, for products, kabi's own ``torch.ops.kabi.matmul``, so a
gradient stays differentiable (double backward) and traceable by torch.compile.

- ``sum_to(tensor, shape)``: ``tensor`` summed over the dimensions an input of ``shape`` was broadcast along.
- ``rows(tensor)``: ``tensor`` as a matrix of rows, its leading dimensions flattened: ``[..., K] -> [rows, K]``.
- ``matmul_summed(left, right, shape)``: ``sum_to(matmul(left, right), shape)``, with the batch folded into the
  product's inner dimension when ``shape`` has no batch (one kernel call, and one rounding in float16 or bfloat16).
- ``grouped_weight_grad(x, grad, offs)``: grouped_mm's weight gradient, ``x[rows of g]^T @ grad[rows of g]`` for
  each group g (``x^T @ grad`` per group in the 3-D form, ``offs`` None).
- ``activation_grad(activation, grad, pre_activation)``: ``grad`` times the derivative of ``linear``'s activation
  (a name of ``kabi.ops._references.ACTIVATIONS``) at ``pre_activation``.

Example::

    >>> grad = torch.randn(2, 4, 5)
    >>> rows(grad).shape, sum_to(grad, (4, 5)).shape
    (torch.Size([8, 5]), torch.Size([4, 5]))
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import torch

from ._references import ACTIVATIONS, group_bounds

__all__ = ["FUNCTIONS", "activation_grad", "grouped_weight_grad", "matmul_summed", "rows", "sum_to"]

# Sizes are spelled out rather than inferred (-1) throughout: a reshape cannot infer a size next to a zero-size
# dimension.


def sum_to(tensor: torch.Tensor, shape: Sequence[Any]) -> torch.Tensor:
    """``tensor`` summed over the dimensions that broadcasting an input of ``shape`` added or stretched."""
    return tensor.sum_to_size(shape)


def rows(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` [..., K] as a matrix [rows, K]: its leading dimensions flattened (a vector is one row)."""
    return tensor.reshape(math.prod(tensor.shape[:-1]), tensor.shape[-1])


def matmul_summed(left: torch.Tensor, right: torch.Tensor, shape: Sequence[Any]) -> torch.Tensor:
    """``left @ right`` (through kabi) summed to ``shape``, the shape of the input whose gradient it is.

    When that input has no batch (a batch of one counts as none) and both factors have the same batch, the sum over
    the batch is the product of the factors laid side by side: ``sum_i left[i] @ right[i] == [left[0] ... left[n]]
    @ [right[0]; ...; right[n]]``, one product with an inner dimension n times longer.
    """
    matmul = torch.ops.kabi.matmul.default
    batch = math.prod(left.shape[:-2])
    if math.prod(shape[:-2]) == 1 and left.dim() > 2 and right.dim() > 2 and batch == math.prod(right.shape[:-2]):
        inner = batch * left.shape[-1]
        side_by_side = left.movedim(-2, 0).reshape(left.shape[-2], inner)
        stacked = right.reshape(inner, right.shape[-1])
        return matmul(side_by_side, stacked).reshape(shape)
    return matmul(left, right).sum_to_size(shape)


def grouped_weight_grad(x: torch.Tensor, grad: torch.Tensor, offs: torch.Tensor | None) -> torch.Tensor:
    """The gradient of grouped_mm's weight [E, K, N]: per group, the group's rows of ``x`` transposed times the same
    rows of ``grad``; a group without rows gets zeros. On a GPU the 2-D form is torch's grouped product over the
    rows (``F.grouped_mm`` of two 2-D operands with the offsets): one call that never reads the offsets on the host.
    On the CPU the offsets are host memory, and a product per group serves every dtype."""
    if offs is None:
        return torch.ops.kabi.matmul.default(x.mT, grad)
    if x.device.type != "cpu":
        return torch.nn.functional.grouped_mm(x.mT.contiguous(), grad, offs=offs)
    return torch.stack([torch.ops.kabi.matmul.default(x[start:end].mT, grad[start:end])
                        for start, end in group_bounds(offs, x.shape[0])])


_SQRT_HALF = math.sqrt(0.5)
_INVERSE_SQRT_TWO_PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_TWO_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_TANH_CUBIC = 0.044715


def _relu_slope(x: torch.Tensor) -> torch.Tensor:
    return (x > 0).to(x.dtype)


def _gelu_slope(x: torch.Tensor) -> torch.Tensor:
    # d/dx x * Phi(x) = Phi(x) + x * phi(x); phi underflows to 0 where x * phi(x) vanishes anyway.
    return 0.5 * (1.0 + torch.erf(x * _SQRT_HALF)) + x * torch.exp(-0.5 * x * x) * _INVERSE_SQRT_TWO_PI


def _gelu_tanh_slope(x: torch.Tensor) -> torch.Tensor:
    # y = x/2 (1 + tanh u), u = sqrt(2/pi) (x + c x^3): y' = (1 + tanh u)/2 + x/2 (1 - tanh^2 u) u'.
    tanh = torch.tanh(_SQRT_TWO_OVER_PI * (x + _GELU_TANH_CUBIC * x * x * x))
    inner_slope = _SQRT_TWO_OVER_PI * (1.0 + 3.0 * _GELU_TANH_CUBIC * x * x)
    return 0.5 * (1.0 + tanh) + 0.5 * x * (1.0 - tanh * tanh) * inner_slope


def _silu_slope(x: torch.Tensor) -> torch.Tensor:
    # d/dx x * sigmoid(x) = sigmoid(x) (1 + x (1 - sigmoid(x))); torch's sigmoid saturates without overflow.
    sigmoid = torch.sigmoid(x)
    return sigmoid * (1.0 + x * (1.0 - sigmoid))


# The derivative of each activation but "none" (whose gradient is grad itself), keyed as ACTIVATIONS.
_SLOPES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": _relu_slope,
    "gelu": _gelu_slope,
    "gelu_tanh": _gelu_tanh_slope,
    "silu": _silu_slope,
}
# Half-precision pre-activations are widened for the derivative: erf, exp and tanh lose most of their digits there.
_WIDENED = {torch.float16: torch.float32, torch.bfloat16: torch.float32}


def activation_grad(activation: str, grad: torch.Tensor, pre_activation: torch.Tensor) -> torch.Tensor:
    """``grad * activation'(pre_activation)``, in ``grad``'s dtype; ``activation`` is a name of ``ACTIVATIONS``.

    Example::

        >>> x, grad = torch.randn(3), torch.ones(3)
        >>> torch.equal(activation_grad("relu", grad, x), (x > 0).float())
        True
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}; got {activation!r}")
    if activation == "none":
        return grad
    compute_dtype = _WIDENED.get(pre_activation.dtype, pre_activation.dtype)
    slope = _SLOPES[activation](pre_activation.to(compute_dtype))
    return (grad.to(compute_dtype) * slope).to(grad.dtype)


# By the name a gradient expression calls it (kabi._base.gradient_declarations.GRADIENT_FUNCTIONS).
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "activation_grad": activation_grad,
    "grouped_weight_grad": grouped_weight_grad,
    "matmul_summed": matmul_summed,
    "rows": rows,
    "sum_to": sum_to,
}
