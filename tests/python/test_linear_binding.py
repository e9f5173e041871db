"""The linear op below the op front: the binding's ``_core.select``, ``_core.describe`` and ``_core.launch`` with the
activation attribute (by name and by index) and an absent bias (None), on the CPU plugin's cpu.openblas.linear and
the torch-native kernel's declaration.
"""

from __future__ import annotations

import pytest
import torch

import kabi
from kabi import _core
from kabi._base.tensors import descriptor
from kabi.ops._references import ACTIVATIONS
from _linear_checks import N, assert_matches, make_inputs


def _descriptors(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None) -> list:
    return [descriptor(x), descriptor(w), None if bias is None else descriptor(bias)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("with_bias", [True, False], ids=["bias", "no_bias"])
def test_native_kernel_through_select_and_launch(dtype: torch.dtype, activation: str, with_bias: bool) -> None:
    x, w, bias = make_inputs((2, 3, 37), dtype, with_bias=with_bias, transposed_weight=True)
    out = torch.full((2, 3, N), float("nan"), dtype=dtype)
    selection = _core.select("linear", _descriptors(x, w, bias), [descriptor(out)], force="cpu.openblas.linear",
                             allow_unverified=True, attributes=[activation])
    problem = selection["problem"]
    assert problem["key"].endswith(f"|{N}|37|{activation}")
    assert problem["layouts"][2] == 0 if not with_bias else problem["inputs_present"][2]
    _core.launch("linear", "cpu.openblas.linear", _descriptors(x, w, bias), [descriptor(out)],
                 attributes=[list(ACTIVATIONS).index(activation)])
    assert_matches(out, x, w, bias, activation)


def test_torch_native_kernel_is_a_candidate_and_the_cpu_kernel_is_preferred() -> None:
    x, w, bias = make_inputs((4, 37), torch.float32, with_bias=True, transposed_weight=False)
    selection = _core.select("linear", _descriptors(x, w, bias), allow_unverified=True, attributes=["relu"])
    names = {candidate["name"] for candidate in selection["candidates"]}
    assert {"torch.linear.cpu", "cpu.openblas.linear"} <= names
    assert selection["kernel"]["name"] == "cpu.openblas.linear"


def test_the_binding_refuses_an_unknown_activation_naming_it() -> None:
    x, w, _ = make_inputs((4, 37), torch.float32, with_bias=False, transposed_weight=False)
    with pytest.raises(kabi.InvalidArgumentError, match="activation"):
        _core.describe("linear", _descriptors(x, w, None), attributes=["tanh"])
