"""kabi._core: the status -> exception table, descriptors, selection records, prepared native launches."""

from __future__ import annotations

import pytest
import torch

import kabi
from kabi import _core
from kabi._base.errors import STATUS_EXCEPTIONS, StaleDecisionError
from kabi._base.tensors import descriptor, meta_descriptor

pytestmark = pytest.mark.usefixtures("untuned")


def test_every_status_has_one_exception_class():
    names = {_core.status_name(status) for status in range(1, 12)}
    assert names == set(STATUS_EXCEPTIONS)
    assert len(set(STATUS_EXCEPTIONS.values())) == len(STATUS_EXCEPTIONS)


@pytest.mark.parametrize(
    "call, expected",
    [
        (lambda: _core.op_info("no-such-op"), kabi.NotFoundError),
        (lambda: _core.kernel_unregister("matmul", "no-such-kernel"), kabi.NotFoundError),
        (lambda: _core.describe("matmul", [meta_descriptor((2, 3), torch.float32, torch.device("cpu"))]), kabi.InvalidArgumentError),
        (lambda: _core.plugin_load("/nonexistent/libnothing.so"), kabi.KabiError),
        (lambda: _core.describe("matmul", [("not", "a", "descriptor")]), kabi.InvalidArgumentError),
    ],
)
def test_core_failures_raise_the_mapped_class_with_the_core_message(call, expected):
    with pytest.raises(expected) as error:
        call()
    assert str(error.value)


def test_descriptor_of_a_transposed_view():
    tensor = torch.randn(4, 6).t()
    pointer, shape, strides, code, bits, device_type, device_index = descriptor(tensor)
    assert (pointer, shape, strides) == (tensor.data_ptr(), (6, 4), (1, 6))
    assert (code, bits, device_type, device_index) == (2, 32, 1, 0)


def test_describe_returns_the_problem():
    a = meta_descriptor((3, 5, 7), torch.float64, torch.device("cpu"))
    b = meta_descriptor((7, 2), torch.float64, torch.device("cpu"))
    problem = _core.describe("matmul", [a, b])
    assert problem["dims"] == {"M": 5, "K": 7, "N": 2}
    assert problem["batch_shape"] == (3,) and problem["batch_size"] == 3
    assert problem["output_shape"] == (3, 5, 2) and problem["dtype"] == "float64"


def test_select_returns_kernel_reason_and_candidates():
    a = meta_descriptor((8, 8), torch.float32, torch.device("cpu"))
    selection = _core.select("matmul", [a, a], allow_unverified=True)  # selection mechanics, not the gate
    assert selection["kernel"]["name"] == "cpu.openblas.gemm"
    assert selection["pick_reason"] == "heuristic" and selection["reason"]
    assert {c["name"] for c in selection["candidates"]} >= {"cpu.openblas.gemm", "torch.matmul.cpu"}


def test_select_runs_each_candidates_filters_once_however_many_candidates(registered):
    """The binding asks the core once, with room for every kernel of the op: a second selection to make room would
    run every supports predicate again."""
    calls = []
    for index in range(40):
        registered(torch.matmul, f"test.binding.many{index}", supports=lambda problem, index=index: calls.append(index) or True)
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    raw = _core.select("matmul", [descriptor(a), descriptor(b)], allow_unverified=True)
    assert len(raw["candidates"]) > 40
    assert sorted(calls) == list(range(40))


def test_select_can_leave_out_the_rejected_candidates():
    """What a call and its tuning read (the eligible candidates and the pick) without a record of every rejected
    kernel, which a GPU's hundreds of dtype- and layout-specific kernels make most of a selection."""
    kabi.register_kernel("matmul", torch.matmul, name="test.binding.float16_only", dtypes=["float16"])
    try:
        a = meta_descriptor((8, 8), torch.float32, torch.device("cpu"))
        every = _core.select("matmul", [a, a], allow_unverified=True)
        wanted = _core.select("matmul", [a, a], allow_unverified=True, with_rejected=False)
    finally:
        kabi.unregister_kernel("matmul", "test.binding.float16_only")
    rejected = {c["name"] for c in every["candidates"] if not c["eligible"]}
    assert "test.binding.float16_only" in rejected
    assert [c for c in every["candidates"] if c["eligible"]] == wanted["candidates"]
    assert wanted["kernel"] == every["kernel"] and wanted["reason"] == every["reason"]


def test_prepared_launch_computes_and_reads_each_calls_pointers():
    a, b = torch.randn(5, 3), torch.randn(3, 4)
    prepared = _core.PreparedLaunch(
        "matmul", "cpu.openblas.gemm", [descriptor(a), descriptor(b)], [meta_descriptor((5, 4), torch.float32, torch.device("cpu"))]
    )
    for _ in range(2):
        a, b, out = torch.randn(5, 3), torch.randn(3, 4), torch.empty(5, 4)
        prepared(a, b, out)
        torch.testing.assert_close(out, a @ b)
    with pytest.raises(kabi.InvalidArgumentError, match="takes 3 tensors"):
        prepared(a, b)


def test_prepared_launch_refuses_to_run_after_the_kernel_table_changed():
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    prepared = _core.PreparedLaunch(
        "matmul", "cpu.openblas.gemm", [descriptor(a), descriptor(b)], [meta_descriptor((2, 2), torch.float32, torch.device("cpu"))]
    )
    kabi.register_kernel("matmul", torch.matmul, name="test.binding.bump", dtypes=["float16"])
    try:
        with pytest.raises(StaleDecisionError):
            prepared(a, b, torch.empty(2, 2))
    finally:
        kabi.unregister_kernel("matmul", "test.binding.bump")


def test_a_stale_native_launcher_selects_again():
    from kabi.ops._front import front_of

    front = front_of(kabi.ops.matmul)
    a, b = torch.randn(4, 3), torch.randn(3, 2)
    selection = front.select((a, b))
    launcher = front.implementation(selection, (a, b))
    kabi.register_kernel("matmul", torch.matmul, name="test.binding.bump2", dtypes=["float16"])
    try:
        torch.testing.assert_close(launcher(a, b), a @ b)
    finally:
        kabi.unregister_kernel("matmul", "test.binding.bump2")


def test_launching_an_external_kernel_in_the_core_is_unavailable():
    a = descriptor(torch.randn(2, 2))
    with pytest.raises(kabi.UnavailableError, match="torch.matmul.cpu"):
        _core.launch("matmul", "torch.matmul.cpu", [a, a], [descriptor(torch.empty(2, 2))])


def test_registry_generation_moves_with_registrations():
    before = _core.registry_generation()
    kabi.register_kernel("matmul", torch.matmul, name="test.binding.generation", dtypes=["float16"])
    kabi.unregister_kernel("matmul", "test.binding.generation")
    assert _core.registry_generation() >= before + 2
