"""kabi.ops.matmul has torch.matmul's semantics: every OpInfo sample of torch's matmul-like ops (op_db's ``matmul``,
``mm``, ``bmm``, ``__rmatmul__`` and the ``linalg.matmul`` alias), on every dtype the OpInfo lists for the CPU,
called through kabi, gives torch's result, requires_grad and gradients. A failure names the op, dtype and sample."""

from __future__ import annotations

import warnings

import pytest
import torch

with warnings.catch_warnings():
    # torch.testing warns that it cannot derandomize tests without hypothesis, which these tests do not use.
    warnings.simplefilter("ignore", ImportWarning)
    from torch.testing._internal.common_methods_invocations import op_db  # needs expecttest (the test extra)

import kabi
from _front_isolation import untuned  # noqa: F401  (fixture)

_OP_NAMES = ("matmul", "mm", "bmm", "__rmatmul__", "linalg.matmul")


def _opinfos():
    """(name, OpInfo) for each op above; an alias (linalg.matmul) brings the samples of the OpInfo it names."""
    found, names = [], set()
    for opinfo in op_db:
        for name in (opinfo.name, *(alias.name for alias in opinfo.aliases)):
            if name in _OP_NAMES:
                names.add(name)
                variant = f".{opinfo.variant_test_name}" if opinfo.variant_test_name else ""
                found.append((name + variant, opinfo))
    assert names == set(_OP_NAMES), f"op_db lacks {set(_OP_NAMES) - names}"
    return found


def _cases():
    cases = []
    for name, opinfo in _opinfos():
        for dtype in sorted(opinfo.supported_dtypes("cpu"), key=str):
            requires_grad = opinfo.supports_autograd and (dtype.is_floating_point or dtype.is_complex)
            samples = list(opinfo.sample_inputs("cpu", dtype, requires_grad=requires_grad))
            for index, sample in enumerate(samples):
                shapes = "@".join(str(list(t.shape)) for t in (sample.input, *sample.args))
                case_id = f"{name}-{str(dtype).removeprefix('torch.')}-{index}:{shapes}"
                cases.append(pytest.param(name, sample, id=case_id))
    return cases


def _operands(name, sample):
    """The (a, b) of ``a @ b`` a sample stands for: __rmatmul__(input, other) is other @ input."""
    assert not sample.kwargs, f"{name}: unexpected keyword arguments {sample.kwargs}"
    (other,) = sample.args
    return (other, sample.input) if name.startswith("__rmatmul__") else (sample.input, other)


def _leaves(a, b):
    """Fresh leaves with the sample's values, so torch's and kabi's graphs do not share gradients."""
    return tuple(t.detach().clone().requires_grad_(t.requires_grad) for t in (a, b))


@pytest.mark.parametrize(("name", "sample"), _cases())
def test_opinfo_sample_matches_torch(name, sample, untuned):
    a, b = _operands(name, sample)
    expected_a, expected_b = _leaves(a, b)
    expected = torch.matmul(expected_a, expected_b)
    kabi_a, kabi_b = _leaves(a, b)
    actual = kabi.ops.matmul(kabi_a, kabi_b)

    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    assert actual.requires_grad == expected.requires_grad
    exact = not (expected.dtype.is_floating_point or expected.dtype.is_complex)
    torch.testing.assert_close(actual, expected, rtol=0 if exact else None, atol=0 if exact else None)
    if not expected.requires_grad:
        return
    grad = torch.randn_like(expected)
    inputs = [t for t in (expected_a, expected_b) if t.requires_grad]
    expected_grads = torch.autograd.grad(expected, inputs, grad)
    actual_grads = torch.autograd.grad(actual, [t for t in (kabi_a, kabi_b) if t.requires_grad], grad)
    for actual_grad, expected_grad in zip(actual_grads, expected_grads):
        assert actual_grad.shape == expected_grad.shape
        torch.testing.assert_close(actual_grad, expected_grad)
