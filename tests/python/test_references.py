"""kabi.ops._references: linear against a float64 computation written out by hand, and its activation vocabulary."""

from __future__ import annotations

import math
import zlib

import pytest
import torch

from kabi.ops._references import ACTIVATIONS, activation_named, linear

# Each activation as its textbook formula, one float64 scalar at a time.
_BY_HAND = {
    "none": lambda v: v,
    "relu": lambda v: max(v, 0.0),
    "gelu": lambda v: 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0))),
    "gelu_tanh": lambda v: 0.5 * v * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3))),
    "silu": lambda v: v / (1.0 + math.exp(-v)),
}


def _by_hand(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, activation: str) -> torch.Tensor:
    rows = x.reshape(-1, x.shape[-1]).tolist()
    offsets = bias.tolist() if bias is not None else [0.0] * w.shape[0]
    result = [[_BY_HAND[activation](sum(a * b for a, b in zip(row, weight)) + offset)
               for weight, offset in zip(w.tolist(), offsets)] for row in rows]
    return torch.tensor(result, dtype=torch.float64).reshape(*x.shape[:-1], w.shape[0])


def test_the_vocabulary_is_the_declared_enum_in_order():
    assert list(ACTIVATIONS) == ["none", "relu", "gelu", "gelu_tanh", "silu"]


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("x_shape", [(7,), (3, 7), (2, 3, 7), (2, 1, 3, 7)], ids=lambda shape: f"x{len(shape)}d")
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no_bias"])
def test_linear_matches_the_hand_computation(activation, x_shape, with_bias):
    generator = torch.Generator().manual_seed(zlib.crc32(repr((activation, x_shape, with_bias)).encode()))
    x = torch.randn(x_shape, dtype=torch.float64, generator=generator) * 2
    w = torch.randn(5, 7, dtype=torch.float64, generator=generator)
    bias = torch.randn(5, dtype=torch.float64, generator=generator) if with_bias else None
    result = linear(x, w, bias, activation)
    assert result.shape == (*x_shape[:-1], 5) and result.dtype == torch.float64
    torch.testing.assert_close(result, _by_hand(x, w, bias, activation), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
def test_in_place_form_equals_the_function(activation):
    values = torch.randn(64, dtype=torch.float64, generator=torch.Generator().manual_seed(5)) * 4
    expected = ACTIVATIONS[activation].function(values)
    overwritten = values.clone()
    assert ACTIVATIONS[activation].in_place(overwritten) is overwritten
    torch.testing.assert_close(overwritten, expected, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["tanh", "GELU", "", None])
def test_unknown_activation_names_the_vocabulary(name):
    with pytest.raises(ValueError, match="none, relu, gelu, gelu_tanh, silu"):
        activation_named(name)
    with pytest.raises(ValueError, match="activation must be one of"):
        linear(torch.ones(2, 3), torch.ones(4, 3), None, name)
