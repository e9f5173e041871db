"""register_kernel / @kernel / unregister_kernel, supports predicates, declarations, and concurrent dispatch while
kernels come and go."""

from __future__ import annotations

import threading

import pytest
import torch

import kabi
from kabi._core import kernel_unregister

pytestmark = pytest.mark.usefixtures("untuned")


def matmul_via_torch(a, b, out=None):
    return torch.matmul(a, b, out=out)


@pytest.fixture
def registered_names():
    """Names registered by a test, unregistered afterwards even if it fails."""
    names: list[str] = []
    yield names
    for name in names:
        try:
            kabi.unregister_kernel("matmul", name)
        except kabi.NotFoundError:
            pass


def test_register_call_and_unregister(registered_names):
    calls = []

    def scaled(a, b, out=None):
        calls.append((a.shape, b.shape))
        return torch.matmul(a, b, out=out)

    info = kabi.register_kernel("matmul", scaled, name="test.reg.scaled", dtypes=["float64"], priority=100)
    registered_names.append("test.reg.scaled")
    assert info.kind == "external" and info.backend == "python" and info.dtypes == ("float64",)
    a, b = torch.randn(3, 4, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64)
    torch.testing.assert_close(kabi.ops.matmul(a, b), a @ b)
    assert calls == [(a.shape, b.shape)]
    # float32 is not declared: the kernel is not eligible there.
    kabi.ops.matmul(a.float(), b.float())
    assert len(calls) == 1
    kabi.unregister_kernel("matmul", "test.reg.scaled")
    kabi.ops.matmul(a, b)
    assert len(calls) == 1
    assert "test.reg.scaled" not in {k.name for k in kabi.kernels("matmul")}


def test_duplicate_name_raises_and_keeps_the_first(registered_names):
    first = lambda a, b, out=None: torch.matmul(a, b, out=out)  # noqa: E731
    kabi.register_kernel("matmul", first, name="test.reg.dup", priority=100)
    registered_names.append("test.reg.dup")
    with pytest.raises(kabi.AlreadyExistsError, match="test.reg.dup"):
        kabi.register_kernel("matmul", matmul_via_torch, name="test.reg.dup")
    with pytest.raises(kabi.AlreadyExistsError, match="cpu.openblas.gemm"):
        kabi.register_kernel("matmul", matmul_via_torch, name="cpu.openblas.gemm")
    assert kabi.explain(kabi.ops.matmul, torch.randn(2, 2), torch.randn(2, 2)).pick == "test.reg.dup"


def test_decorator_registers_and_returns_the_function(registered_names):
    @kabi.kernel("matmul", name="test.reg.decorated", priority=100)
    def decorated(a, b, out=None):
        return torch.matmul(a, b, out=out)

    registered_names.append("test.reg.decorated")
    assert callable(decorated)
    assert kabi.explain(kabi.ops.matmul, torch.randn(2, 3), torch.randn(3, 2)).pick == "test.reg.decorated"


def test_decorator_default_name_is_the_qualified_name(registered_names):
    @kabi.kernel("matmul", dtypes=[torch.float16])
    def half_only(a, b, out=None):
        return torch.matmul(a, b, out=out)

    name = f"{__name__}.test_decorator_default_name_is_the_qualified_name.<locals>.half_only"
    registered_names.append(name)
    assert kabi.kernel_info("matmul", name).dtypes == ("float16",)


def test_unregister_unknown_kernel():
    with pytest.raises(kabi.NotFoundError):
        kabi.unregister_kernel("matmul", "test.reg.never-registered")


def test_register_for_unknown_op():
    with pytest.raises(kabi.NotFoundError, match="conv"):
        kabi.register_kernel("conv", matmul_via_torch, name="test.reg.conv")


@pytest.mark.parametrize(
    "declaration, message",
    [
        (dict(dtypes=["float128"]), "unknown dtype 'float128'"),
        (dict(layouts=["diagonal"]), "unknown layout 'diagonal'"),
        (dict(features=["warp-drive"]), "unknown feature 'warp-drive'"),
        (dict(batch="sometimes"), "batch must be one of"),
        (dict(archs="sm90"), "archs must be"),
        (dict(archs=(90, 80)), "range \\(90, 80\\) is empty"),
        (dict(alignment=-4), "alignment"),
        (dict(device="tpu"), "no device type 'tpu'"),
    ],
)
def test_bad_declarations_name_the_field(declaration, message):
    with pytest.raises(ValueError, match=message):
        kabi.register_kernel("matmul", matmul_via_torch, name="test.reg.bad", **declaration)
    assert "test.reg.bad" not in {k.name for k in kabi.kernels("matmul")}


def test_non_callable_fn_and_empty_name():
    with pytest.raises(TypeError, match="fn must be callable"):
        kabi.register_kernel("matmul", 42, name="test.reg.int")
    with pytest.raises(ValueError, match="non-empty"):
        kabi.register_kernel("matmul", matmul_via_torch, name=" ")


def test_archs_forms(registered_names):
    kabi.register_kernel("matmul", matmul_via_torch, name="test.reg.exact", device="cuda", archs={80, 90})
    kabi.register_kernel("matmul", matmul_via_torch, name="test.reg.range", device="cuda", archs=(80, None))
    registered_names.extend(["test.reg.exact", "test.reg.range"])
    assert kabi.kernel_info("matmul", "test.reg.exact").archs == (80, 90)
    ranged = kabi.kernel_info("matmul", "test.reg.range")
    assert ranged.arch_range == (80, 0) and ranged.archs_text == "80+"


def test_supports_predicate_sees_the_problem_and_can_decline(registered_names):
    seen = []

    def square_only(problem):
        seen.append(problem)
        dims = problem.dims
        return True if dims["M"] == dims["N"] == dims["K"] else f"not square: {dims}"

    kabi.register_kernel("matmul", matmul_via_torch, name="test.reg.square", priority=100, supports=square_only)
    registered_names.append("test.reg.square")
    square = kabi.explain(kabi.ops.matmul, torch.randn(4, 4), torch.randn(4, 4))
    assert square.pick == "test.reg.square"
    problem = seen[-1]
    assert problem.dims == {"M": 4, "K": 4, "N": 4} and problem.dtype == "float32"
    assert problem.layouts == ("contiguous", "contiguous") and problem.output_shape == (4, 4)
    skinny = kabi.explain(kabi.ops.matmul, torch.randn(4, 2), torch.randn(2, 4))
    assert skinny.pick != "test.reg.square"
    (candidate,) = [c for c in skinny.candidates if c.name == "test.reg.square"]
    assert not candidate.eligible and "not square" in candidate.reason


def test_supports_predicate_that_raises_declines_with_the_error(registered_names):
    def broken(problem):
        raise ZeroDivisionError("oops")

    kabi.register_kernel("matmul", matmul_via_torch, name="test.reg.broken", priority=100, supports=broken)
    registered_names.append("test.reg.broken")
    explanation = kabi.explain(kabi.ops.matmul, torch.randn(3, 3), torch.randn(3, 3))
    (candidate,) = [c for c in explanation.candidates if c.name == "test.reg.broken"]
    assert not candidate.eligible and "ZeroDivisionError: oops" in candidate.reason
    assert explanation.pick == "cpu.openblas.gemm"


def test_python_kernel_receives_out(registered_names):
    received = []

    def writes_out(a, b, out=None):
        received.append(out)
        return torch.matmul(a, b, out=out)

    kabi.register_kernel("matmul", writes_out, name="test.reg.out", priority=100)
    registered_names.append("test.reg.out")
    a, b = torch.randn(3, 2), torch.randn(2, 5)
    out = torch.empty(3, 5)
    assert kabi.ops.matmul(a, b, out=out) is out
    assert received == [out]
    torch.testing.assert_close(out, a @ b)


def test_external_kernel_without_python_implementation_is_reported():
    """A kernel registered through the binding alone has no Python code here: running it names the kernel."""
    from kabi import _core

    _core.kernel_register_external(
        op="matmul", name="test.reg.orphan", backend="elsewhere", device_type=1, arch_min=0, arch_max=0, archs=[],
        priority=100, required_features=0, dtypes=sum(_core.DTYPES.values()), type_constraints=None,
        layouts=sum(_core.LAYOUTS.values()), input_layouts=[],
        alignment=0, batch_mode=2, supports=None, fingerprint=None,
    )
    try:
        with pytest.raises(kabi.UnavailableError, match="test.reg.orphan"):
            kabi.ops.matmul(torch.randn(2, 7), torch.randn(7, 2))
    finally:
        kernel_unregister("matmul", "test.reg.orphan")


def test_concurrent_dispatch_while_kernels_come_and_go():
    """8 threads call kabi.ops.matmul on several problems while another registers and unregisters kernels."""
    generator = torch.Generator().manual_seed(3)
    problems = [
        (torch.randn(m, k, generator=generator), torch.randn(k, n, generator=generator))
        for m, k, n in [(4, 4, 4), (9, 3, 5), (16, 8, 2), (1, 32, 7)]
    ]
    expected = [a.double() @ b.double() for a, b in problems]
    stop = threading.Event()
    failures: list[BaseException] = []

    def caller():
        try:
            while not stop.is_set():
                for (a, b), reference in zip(problems, expected):
                    result = kabi.ops.matmul(a, b)
                    torch.testing.assert_close(result.double(), reference, rtol=1e-4, atol=1e-4)
        except BaseException as error:
            failures.append(error)
            stop.set()

    def registrar():
        try:
            for round_index in range(60):
                name = f"test.reg.churn.{round_index % 3}"
                kabi.register_kernel("matmul", matmul_via_torch, name=name, priority=50 + round_index)
                kabi.unregister_kernel("matmul", name)
        except BaseException as error:
            failures.append(error)
        finally:
            stop.set()

    threads = [threading.Thread(target=caller) for _ in range(8)] + [threading.Thread(target=registrar)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert failures == []
    assert not {k.name for k in kabi.kernels("matmul")} & {f"test.reg.churn.{i}" for i in range(3)}
