"""The references of ops that no single torch function computes, and the vocabularies they define.

An op's declaration names its reference as ``"module:attribute"`` (``reference = "kabi.ops._references:linear"``);
the correctness gate calls it on the candidates' inputs widened to float64 and compares every candidate with it.

``ACTIVATIONS`` is the one Python vocabulary of ``linear``'s ``activation`` attribute: its order is the order of
the op's ``enum(none, relu, gelu, gelu_tanh, silu)``, so an enum index from the core is a position in it, and the
torch-native kernel, the Triton launcher and the tests all read it from here.

``group_bounds`` is the one reading of grouped_mm's offsets as row ranges (the reference and the per-group kernels
share it).

Example::

    >>> y = linear(x, w, bias, activation="gelu_tanh")  # F.gelu(F.linear(x, w, bias), approximate="tanh")
    >>> group_bounds(torch.tensor([2, 2, 5]), rows=5)
    [(0, 2), (2, 2), (2, 5)]
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import torch
import torch.nn.functional as F


_WIDENS_ITS_OWN_INPUTS = "_kabi_widens_its_own_inputs"

__all__ = ["ACTIVATIONS", "Activation", "activation_named", "group_bounds", "grouped_mm", "linear", "scaled_mm",
           "takes_inputs_as_given", "widened", "widens_its_own_inputs", "widest_dtype"]


def widest_dtype(dtype: torch.dtype) -> torch.dtype:
    """The widest dtype of ``dtype``'s kind (complex128, float64, int64), in which the references compute."""
    if dtype.is_complex:
        return torch.complex128
    return torch.float64 if dtype.is_floating_point else torch.int64


def widened(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` in :func:`widest_dtype`: the values it holds, exactly."""
    return tensor.to(widest_dtype(tensor.dtype))


def widens_its_own_inputs(reference: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a reference that widens its inputs itself, piece by piece, so that the correctness gate passes them as
    they are rather than widened whole. For ops whose operands are too large to widen at once: DeepSeek-V3's
    grouped_mm experts (gate_up, 256 x 7168 x 4096 bfloat16, 15 GB) take 60 GB in float64, where one expert at a
    time takes 235 MB."""
    setattr(reference, _WIDENS_ITS_OWN_INPUTS, True)
    return reference


def takes_inputs_as_given(reference: Callable[..., Any]) -> bool:
    """Whether ``reference`` is marked :func:`widens_its_own_inputs`."""
    return getattr(reference, _WIDENS_ITS_OWN_INPUTS, False) is True


def _identity(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


class Activation(NamedTuple):
    """One activation: ``function`` returns a new tensor; ``in_place`` overwrites its argument and returns it, for
    kernels that own the tensor and need no autograd record of the values it held."""

    function: Callable[[torch.Tensor], torch.Tensor]
    in_place: Callable[[torch.Tensor], torch.Tensor]


ACTIVATIONS: dict[str, Activation] = {
    "none": Activation(_identity, _identity),
    "relu": Activation(torch.relu, torch.relu_),
    # gelu is the exact, erf form; gelu_tanh is torch's tanh approximation of it.
    "gelu": Activation(F.gelu, torch.ops.aten.gelu_),
    "gelu_tanh": Activation(functools.partial(F.gelu, approximate="tanh"),
                            functools.partial(torch.ops.aten.gelu_, approximate="tanh")),
    "silu": Activation(F.silu, functools.partial(F.silu, inplace=True)),
}


def activation_named(name: str) -> Activation:
    """The activation called ``name``; ``ValueError`` naming the vocabulary for any other name."""
    try:
        return ACTIVATIONS[name]
    except (KeyError, TypeError):
        raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}; got {name!r}") from None


def linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None,
           activation: str = "none") -> torch.Tensor:
    """``activation(x @ w^T + bias)``: ``F.linear`` followed by the activation, x of shape [..., K], w [N, K],
    bias [N] or None; the result is [..., N]."""
    return activation_named(activation).function(F.linear(x, w, bias))


def group_bounds(offs: torch.Tensor, rows: int) -> list[tuple[int, int]]:
    """Each group's rows ``(start, end)`` from grouped_mm's cumulative end offsets, read on the host and clamped as
    every kernel clamps them (into [previous end, rows]), so no offsets address a row outside ``x``."""
    bounds, start = [], 0
    for end in offs.tolist():
        end = min(max(end, start), rows)
        bounds.append((start, end))
        start = end
    return bounds


@widens_its_own_inputs
def grouped_mm(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor | None = None) -> torch.Tensor:
    """One product per group: ``x[E, M, K] @ w[E, K, N]``, or, with ``offs``, ``x[rows of g] @ w[g]`` for each group
    g of the rows of ``x[T, K]``, rows past the last offset zero. Each group's operands are widened (to float64 for
    floating-point ones) as it is multiplied, so the reference needs memory for one expert's weight, not all."""
    rows = x.shape[-2]
    out = torch.zeros(*x.shape[:-1], w.shape[-1], dtype=widest_dtype(x.dtype), device=x.device)
    bounds = group_bounds(offs, rows) if offs is not None else [(0, rows)] * w.shape[0]
    for group, (start, end) in enumerate(bounds):
        rows_of_group = x[group] if offs is None else x[start:end]
        destination = out[group] if offs is None else out[start:end]
        destination.copy_(widened(rows_of_group) @ widened(w[group]))
    return out


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
              bias: torch.Tensor | None = None, out_dtype: str = "bfloat16",
              use_fast_accum: bool = False) -> torch.Tensor:
    """``(scale_a * a) @ (scale_b * b) + bias`` for a [M, K], b [K, N], scale_a [] or [M, 1], scale_b [] or [1, N],
    bias [N] or None, in the dtype of its inputs (the gate passes them widened to float64, which holds FP8 values
    exactly); out_dtype is the dtype the kernels round to, which the gate checks on its own, and use_fast_accum
    what a kernel may do on the way, not what the exact product is."""
    product = (a * scale_a) @ (b * scale_b)
    return product if bias is None else product + bias
