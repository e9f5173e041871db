"""kabi.ops.matmul has torch.matmul's semantics: every OpInfo sample of torch's matmul-like ops (op_db's ``matmul``,
``mm``, ``bmm``, ``__rmatmul__`` and the ``linalg.matmul`` alias), on every dtype the OpInfo lists for the CPU,
called through kabi, gives torch's result, requires_grad and gradients: the same shapes and dtypes, and values
within the op's gate (integers exactly). A failure names the op, dtype and sample."""

from __future__ import annotations

import warnings

import pytest
import torch

# PyTorch's OpInfo database imports expecttest; the test extra installs it (so CI runs these tests), and a machine
# without it (the GPU image) skips this CPU-only module instead of failing to collect it.
pytest.importorskip("expecttest", reason="torch's OpInfo database needs expecttest (pip install kabi[test])")

with warnings.catch_warnings():
    # torch.testing warns that it cannot derandomize tests without hypothesis, which these tests do not use.
    warnings.simplefilter("ignore", ImportWarning)
    from torch.testing._internal.common_methods_invocations import op_db  # needs expecttest (the test extra)

import kabi
from kabi._base.declarations import op_spec
from kabi._selection.correctness import check_output, reference_output

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
    torch.manual_seed(0)  # OpInfo draws its sample values at random: the same samples on every run
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


def _assert_matches(actual, exact, dtype, what):
    """``actual`` is ``exact`` (computed in the widest dtype of its kind) within matmul's gate for ``dtype``:
    integers exactly, floating and complex within the op's declared tolerance, as any kernel kabi picks must be."""
    note = check_output(actual, exact, op_spec("matmul").tolerance[str(dtype).removeprefix("torch.")], dtype)
    assert note is None, f"{what}: {note}"


def _widened(tensors):
    return [t.detach().to(_WIDEST[t.dtype.is_complex]).requires_grad_(t.requires_grad) for t in tensors]


_WIDEST = {False: torch.float64, True: torch.complex128}


@pytest.mark.parametrize(("name", "sample"), _cases())
def test_opinfo_sample_matches_torch(name, sample, untuned):
    torch.manual_seed(0)
    a, b = _operands(name, sample)
    expected_a, expected_b = _leaves(a, b)
    expected = torch.matmul(expected_a, expected_b)
    kabi_a, kabi_b = _leaves(a, b)
    actual = kabi.ops.matmul(kabi_a, kabi_b)

    assert (actual.shape, actual.dtype, actual.requires_grad) == (expected.shape, expected.dtype, expected.requires_grad)
    _assert_matches(actual, reference_output(torch.matmul, [a.detach(), b.detach()]), expected.dtype, "result")
    if not expected.requires_grad:
        return
    grad = torch.randn_like(expected)
    differentiated = [index for index, t in enumerate((a, b)) if t.requires_grad]
    actual_grads = torch.autograd.grad(actual, [(kabi_a, kabi_b)[i] for i in differentiated], grad)
    expected_grads = torch.autograd.grad(expected, [(expected_a, expected_b)[i] for i in differentiated], grad)
    # torch's gradients in the widest dtype, on the same values: what kabi's are gated against.
    wide = _widened((a, b))
    exact_grads = torch.autograd.grad(torch.matmul(*wide), [wide[i] for i in differentiated], grad.to(wide[0].dtype))
    for index, actual_grad, expected_grad, exact_grad in zip(differentiated, actual_grads, expected_grads, exact_grads):
        assert (actual_grad.shape, actual_grad.dtype) == (expected_grad.shape, expected_grad.dtype)
        _assert_matches(actual_grad, exact_grad, expected_grad.dtype, f"gradient of {'ab'[index]}")
