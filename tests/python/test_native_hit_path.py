"""The hit path launches a native decision itself (csrc/python/front.cpp): no Python frame between the call and
the kernel. A decision stored with a Python implementation that raises proves which path ran: the native launch
never calls it, and every case the native launch cannot take (an ``out`` of other strides, inputs read through
``facts``) falls back to it."""

from __future__ import annotations

import pytest
import torch

import kabi
from kabi import _core
from kabi.ops import _scopes
from kabi.ops._front import front_of

pytestmark = [
    pytest.mark.usefixtures("untuned"),
    pytest.mark.skipif(not _core.dlpack_exchange_available(torch.Tensor),
                       reason="this torch has no DLPack C exchange API: the hit path reads no data pointers"),
]

NATIVE_GEMM = "cpu.openblas.gemm"  # the built-in CPU plugin's kernel (scipy-openblas32 is a dependency)


class PythonPathTaken(Exception):
    """Raised by the stand-in Python implementation: the call did not take the native launch."""


def _python_path(*inputs, out=None):
    raise PythonPathTaken


def _native_decision(a: torch.Tensor, b: torch.Tensor, when_capturing: tuple | None = None):
    """Under kabi.use(matmul=cpu.openblas.gemm): make the decision by a call, then store it again with the Python
    implementation replaced by one that raises, keeping its native launch (and ``when_capturing`` as the pick for
    calls being captured in a CUDA graph). Returns the table."""
    table = front_of(kabi.ops.matmul).cache
    table.clear()
    kabi.ops.matmul(a, b)
    scope = _scopes.active_scope()
    implementation, outputs, kernel = table.find((a, b), (), scope)
    assert kernel == NATIVE_GEMM
    assert isinstance(implementation.prepared, _core.PreparedLaunch)
    table.clear()
    stored = table.store((a, b), (), scope, _python_path, outputs, kernel, table.begin_miss(),
                         native=implementation.prepared, allocate_output=implementation.allocate_output,
                         when_capturing=when_capturing)
    assert stored
    table.reset_counts()
    return table


def test_a_native_decision_runs_without_its_python_implementation():
    a, b = torch.randn(7, 5), torch.randn(5, 3)
    with kabi.use(matmul=NATIVE_GEMM):
        table = _native_decision(a, b)
        for _ in range(3):
            fresh_a, fresh_b = torch.randn(7, 5), torch.randn(5, 3)
            result = kabi.ops.matmul(fresh_a, fresh_b)
            torch.testing.assert_close(result, fresh_a @ fresh_b)
        out = torch.full((7, 3), float("nan"))
        assert kabi.ops.matmul(a, b, out=out) is out
        torch.testing.assert_close(out, a @ b)
    assert table.hits == 4


class CapturingPickTaken(Exception):
    """Raised by a stand-in pick for calls being captured in a CUDA graph: the call ran it."""


def _capturing_pick(*inputs, out=None):
    raise CapturingPickTaken


def test_a_decision_with_a_pick_for_captured_calls_launches_its_own_pick_natively_outside_capture():
    """A decision whose pick differs for captured calls asks the core how each call runs: a CPU call is never
    captured, so it launches the decision's own native pick, still with no Python frame."""
    a, b = torch.randn(6, 4), torch.randn(4, 5)
    with kabi.use(matmul=NATIVE_GEMM):
        table = _native_decision(a, b, when_capturing=(_capturing_pick, "test.capturing", None, None))
        fresh_a, fresh_b = torch.randn(6, 4), torch.randn(4, 5)
        torch.testing.assert_close(kabi.ops.matmul(fresh_a, fresh_b), fresh_a @ fresh_b)
        scope = _scopes.active_scope()
        assert table.find((a, b), (), scope, capturing=True)[::2] == (_capturing_pick, "test.capturing")
        assert table.find((a, b), (), scope)[2] == NATIVE_GEMM
    assert table.hits == 1


def test_a_python_pick_beside_a_native_pick_for_captured_calls_runs_outside_capture():
    """The other way round: the pick for captured calls is the native launch, and a CPU call runs the decision's own
    Python pick, called directly."""
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    ran = []

    def eager_pick(x, y, out=None):
        ran.append("eager")
        return x @ y

    with kabi.use(matmul=NATIVE_GEMM):
        table = front_of(kabi.ops.matmul).cache
        table.clear()
        kabi.ops.matmul(a, b)
        scope = _scopes.active_scope()
        implementation, outputs, kernel = table.find((a, b), (), scope)
        table.clear()
        assert table.store((a, b), (), scope, eager_pick, outputs, "test.eager", table.begin_miss(),
                           when_capturing=(_python_path, kernel, implementation.prepared,
                                           implementation.allocate_output))
        fresh_a, fresh_b = torch.randn(3, 4), torch.randn(4, 2)
        torch.testing.assert_close(kabi.ops.matmul(fresh_a, fresh_b), fresh_a @ fresh_b)
    assert ran == ["eager"]


def test_a_pick_for_captured_calls_is_refused_in_a_malformed_form():
    a, b = torch.randn(2, 3), torch.randn(3, 2)
    table = front_of(kabi.ops.matmul).cache
    outputs = ((0, (2, 2), (2, 1), 2, 32, 1, 0),)
    with pytest.raises(ValueError, match="when_capturing must be"):
        table.store((a, b), (), None, _python_path, outputs, "test", table.begin_miss(),
                    when_capturing=(_capturing_pick, "test.capturing"))


def test_what_the_native_launch_cannot_take_runs_the_python_implementation():
    a, b = torch.randn(4, 6), torch.randn(6, 2)
    with kabi.use(matmul=NATIVE_GEMM):
        _native_decision(a, b)
        # out has the decision's shape, dtype and device but not its strides: only Python copies into it.
        with pytest.raises(kabi.KernelFailedError, match="PythonPathTaken"):
            kabi.ops.matmul(a, b, out=torch.empty(2, 4).t())

        class Tagged(torch.Tensor):
            pass

        # A subclass is keyed through facts; its data pointer is not read there.
        with pytest.raises(kabi.KernelFailedError, match="PythonPathTaken"):
            kabi.ops.matmul(a.as_subclass(Tagged), b)


def test_real_native_decisions_are_launched_from_the_hit_path_and_stay_correct():
    a, b = torch.randn(9, 4), torch.randn(4, 6)
    table = front_of(kabi.ops.matmul).cache
    table.clear()
    table.reset_counts()
    with kabi.use(matmul=NATIVE_GEMM):
        for _ in range(4):
            fresh_a, fresh_b = torch.randn(9, 4), torch.randn(4, 6)
            torch.testing.assert_close(kabi.ops.matmul(fresh_a, fresh_b), fresh_a @ fresh_b)
        implementation, _, _ = table.find((a, b), (), _scopes.active_scope())
    assert (table.hits, table.misses) == (3, 1)
    assert implementation.prepared.kernel == NATIVE_GEMM


def test_grad_inputs_keep_the_differentiable_python_path():
    a = torch.randn(5, 4, requires_grad=True)
    b = torch.randn(4, 3)
    results = []
    with kabi.use(matmul=NATIVE_GEMM):
        for _ in range(2):
            results.append(kabi.ops.matmul(a, b))
        implementation, _, _ = front_of(kabi.ops.matmul).cache.find((a, b), (), _scopes.active_scope())
    assert not hasattr(implementation, "prepared")
    for result in results:  # the gradient's own matmuls are not forced
        result.sum().backward()
    torch.testing.assert_close(a.grad, 2 * torch.ones(5, 3) @ b.T)
