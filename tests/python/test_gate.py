"""The correctness gate under every policy: with tuning off, or a forced kernel, the pick is gated once before use.

Every test runs on its own temporary tuning cache.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch

import kabi
from kabi import cache
from kabi._selection import gate as _gate


def _plus_one(a, b, out=None):
    return torch.matmul(a, b) + 1


def _times_two(a, b, out=None):
    return torch.matmul(a, b) * 2


def _verdicts(problem_key=None):
    return {
        record.kernel: ("passed" if record.gate_only else "failed" if math.isinf(record.time_us) else "timed", record.note)
        for record in cache.show("matmul")
        if problem_key is None or record.problem == problem_key
    }


def test_with_tuning_off_a_wrong_high_priority_kernel_is_gated_out_and_the_next_pick_is_gated(cache_dir, registered):
    registered(_plus_one, "test.plus_one", priority=100)
    a, b = torch.randn(16, 8), torch.randn(8, 4)
    with kabi.tuning("off"):
        result = kabi.ops.matmul(a, b)
    torch.testing.assert_close(result, a @ b)
    verdicts = _verdicts()
    assert verdicts.pop("test.plus_one")[0] == "failed"
    ((passed, (verdict, _)),) = verdicts.items()
    assert verdict == "passed" and passed in ("cpu.openblas.gemm", "torch.matmul.cpu")
    with kabi.tuning("off"):
        explanation = kabi.explain(kabi.ops.matmul, a, b)
    assert explanation.pick == passed
    rows = {candidate.name: candidate for candidate in explanation.candidates}
    assert not rows["test.plus_one"].eligible
    assert rows["test.plus_one"].reason.startswith("failed the correctness gate on this problem: wrong result")


_LATER_PROCESS = """
import torch, kabi
kabi.register_kernel("matmul", lambda a, b, out=None: torch.matmul(a, b) + 1, name="test.plus_one",
                     dtypes=["float32"], priority=100)
a, b = torch.randn(12, 8), torch.randn(8, 4)
torch.testing.assert_close(kabi.ops.matmul(a, b), a @ b)
print(kabi.stats().gate_failures)
"""


def test_verdicts_are_reused_by_later_processes_without_gating_again(tmp_path):
    environment = {**os.environ, "KABI_CACHE_DIR": str(tmp_path), "KABI_TUNE": "off"}
    run = lambda: subprocess.run([sys.executable, "-c", _LATER_PROCESS], env=environment, capture_output=True,
                                 text=True, check=True).stdout.strip()
    assert run() == "1"
    cache.set_directory(tmp_path)
    try:
        recorded = cache.show("matmul")
        assert run() == "0"
        assert cache.show("matmul") == recorded
    finally:
        cache.set_directory(None)


def test_when_every_candidate_fails_the_gate_the_call_names_each_failure(cache_dir, registered):
    registered(_plus_one, "test.plus_one", backend="test", priority=100)
    registered(_times_two, "test.times_two", backend="test", priority=50)
    a, b = torch.randn(10, 6), torch.randn(6, 3)
    with kabi.tuning("off"), kabi.use(matmul="test"):
        with pytest.raises(kabi.NoEligibleKernelError) as error:
            kabi.ops.matmul(a, b)
    message = str(error.value)
    assert "test.plus_one: failed the correctness gate on this problem: wrong result" in message
    assert "test.times_two: failed the correctness gate on this problem: wrong result" in message
    assert {kernel: verdict for kernel, (verdict, _) in _verdicts().items()} == {
        "test.plus_one": "failed", "test.times_two": "failed"}


def test_forcing_a_kernel_that_failed_the_gate_raises_unless_allowed(cache_dir, registered):
    registered(_plus_one, "test.plus_one", priority=100)
    a, b = torch.randn(9, 5), torch.randn(5, 2)
    with kabi.tuning("off"):
        kabi.ops.matmul(a, b)
    with kabi.use(matmul="test.plus_one"):
        with pytest.raises(kabi.NoEligibleKernelError, match="test.plus_one: failed the correctness gate on this problem: "
                                                             "wrong result.*allow_failed_gate=True"):
            kabi.ops.matmul(a, b)
    with kabi.use(matmul="test.plus_one", allow_failed_gate=True):
        torch.testing.assert_close(kabi.ops.matmul(a, b), a @ b + 1)
        explanation = kabi.explain(kabi.ops.matmul, a, b)
    assert explanation.pick == "test.plus_one"
    assert "failed the correctness gate on this problem, allowed by allow_failed_gate" in explanation.reason
    with pytest.raises(kabi.ArgumentTypeError, match="allow_failed_gate must be True, False or None"):
        with kabi.use(allow_failed_gate="yes"):
            pass


def test_a_forced_kernel_without_a_verdict_is_gated_once(cache_dir, registered):
    registered(_plus_one, "test.plus_one", priority=0)
    a, b = torch.randn(7, 5), torch.randn(5, 2)
    with kabi.tuning("first-call"), kabi.use(matmul="test.plus_one"):
        with pytest.raises(kabi.NoEligibleKernelError, match="test.plus_one: failed the correctness gate"):
            kabi.ops.matmul(a, b)
    assert _verdicts() == {"test.plus_one": ("failed", _verdicts()["test.plus_one"][1])}


def test_while_the_gate_cannot_run_an_unverified_problem_fails_and_a_verified_one_runs(cache_dir, monkeypatch):
    a, b = torch.randn(6, 4), torch.randn(4, 2)
    monkeypatch.setattr(_gate, "measurement_blocked_reason", lambda inputs: "a CUDA graph is being captured")
    with kabi.tuning("off"):
        with pytest.raises(kabi.NoEligibleKernelError, match="call the op once with these shapes before capturing"):
            kabi.ops.matmul(a, b)
    monkeypatch.undo()
    with kabi.tuning("off"):
        kabi.ops.matmul(a, b)
    monkeypatch.setattr(_gate, "measurement_blocked_reason", lambda inputs: "a CUDA graph is being captured")
    with kabi.tuning("off"):  # requires_grad: a decision-cache miss on the same, now verified, problem
        torch.testing.assert_close(kabi.ops.matmul(a.requires_grad_(), b), a @ b)


def _raises_index_error(a, b, out=None):
    raise IndexError("row 3 out of range")


def test_a_python_kernel_raising_a_foreign_exception_surfaces_as_kernel_failed_error(cache_dir, registered):
    registered(_raises_index_error, "test.index_error", priority=0)
    a, b = torch.randn(5, 3), torch.randn(3, 2)
    with kabi.use(matmul="test.index_error", allow_failed_gate=True):
        with pytest.raises(kabi.KernelFailedError, match="kernel matmul/test.index_error failed: IndexError: row 3") as error:
            kabi.ops.matmul(a, b)
    assert isinstance(error.value.__cause__, IndexError)
    assert isinstance(error.value, RuntimeError) and kabi.KernelError is kabi.KernelFailedError
    assert _verdicts()["test.index_error"] == ("failed", "raised IndexError: row 3 out of range")


def test_verify_records_a_verdict_for_every_eligible_kernel_and_c_selection_then_succeeds(cache_dir, registered):
    registered(_plus_one, "test.plus_one", priority=100)
    a, b = torch.randn(11, 7), torch.randn(7, 5)
    report = kabi.verify(kabi.ops.matmul, a, b)
    outcomes = {verdict.kernel: verdict.passed for verdict in report.verdicts}
    assert outcomes == {"cpu.openblas.gemm": True, "torch.matmul.cpu": True, "test.plus_one": False}
    assert report.passed
    assert [line.split()[:3] for line in str(report).splitlines() if "test.plus_one" in line] == [
        ["test.plus_one", "failed:", "wrong"]]
    assert {kernel: verdict for kernel, (verdict, _) in _verdicts().items()} == {
        "cpu.openblas.gemm": "passed", "torch.matmul.cpu": "passed", "test.plus_one": "failed"}
    # What a C caller gets: strict selection (no allow_unverified) now has a verified pick.
    descriptors = [kabi._base.tensors.descriptor(t, name, "matmul") for t, name in zip((a, b), ("a", "b"))]
    raw = kabi._core.select("matmul", [(0, *d[1:]) for d in descriptors])
    assert raw["verified"] and raw["kernel"]["name"] in ("cpu.openblas.gemm", "torch.matmul.cpu")


def test_strict_selection_refuses_an_unverified_problem_naming_the_remedy(cache_dir):
    a, b = torch.randn(13, 7), torch.randn(7, 5)
    descriptors = [kabi._base.tensors.descriptor(t, name, "matmul") for t, name in zip((a, b), ("a", "b"))]
    with pytest.raises(kabi.NoEligibleKernelError, match="no eligible kernel has passed the correctness gate.*kabi verify matmul"):
        kabi._core.select("matmul", [(0, *d[1:]) for d in descriptors])


def test_kabi_verify_prints_the_verdicts_and_exits_by_whether_a_kernel_passed(tmp_path, capsys):
    from kabi.cli import main

    cache.set_directory(tmp_path)
    try:
        assert main(["verify", "matmul", "--shape", "9x4x6", "--shape", "3x5x7", "--device", "cpu"]) == 0
        output = capsys.readouterr().out
        assert "M=9,N=4,K=6 float32 on cpu" in output and "M=3,N=5,K=7 float32 on cpu" in output
        assert "cpu.openblas.gemm" in output and "passed" in output
        assert len([r for r in cache.show("matmul") if r.gate_only]) == 4
        capsys.readouterr()
        assert main(["verify", "matmul", "--suite", "nope"]) == 2
        assert capsys.readouterr().err.startswith("error: --suite: matmul has no suite 'nope'")
    finally:
        cache.set_directory(None)


@pytest.mark.parametrize(
    "raised",
    [RuntimeError("lost the device"), kabi.InvalidArgumentError("matmul: a is odd"), KeyboardInterrupt()],
    ids=["foreign", "kabi", "interrupt"],
)
def test_a_kernel_raising_on_a_hit_surfaces_as_it_does_on_the_first_call(cache_dir, registered, raised):
    """A foreign exception becomes KernelFailedError naming the kernel, with the original chained, on the miss
    path and on every hit path (in C, with and without out=) alike; kabi's errors and KeyboardInterrupt pass unchanged."""
    a, b = torch.randn(6, 4), torch.randn(4, 3)

    def fails_on_the_callers_data(x, y, out=None):
        if x.data_ptr() == a.data_ptr():
            raise raised
        return torch.matmul(x, y, out=out)  # the gate's own inputs: it passes

    registered(fails_on_the_callers_data, "test.fails_later", priority=100)
    table = kabi.ops._front.front_of("matmul").cache
    with kabi.tuning("off"):
        for out in (None, None, None, torch.empty(6, 3)):  # a miss, hits, a hit with out=
            hits = table.hits
            with pytest.raises(type(raised)) as caught:
                kabi.ops.matmul(a, b, out=out)
            if isinstance(raised, kabi.KabiError) or not isinstance(raised, Exception):
                assert caught.value is raised
            else:
                assert str(caught.value) == "kernel matmul/test.fails_later failed: RuntimeError: lost the device"
                assert isinstance(caught.value, kabi.KernelFailedError)
                assert caught.value.__cause__ is raised and caught.value.__context__ is raised
        assert table.hits == hits + 1, "the last call should have been a hit"
    assert _verdicts()["test.fails_later"][0] == "passed"


def _aligned_only(a, b, out=None):
    assert a.data_ptr() % 64 == 0 and b.data_ptr() % 64 == 0
    return torch.matmul(a, b, out=out)


def test_the_fresh_selection_of_a_call_its_decision_refuses_gates_its_pick(cache_dir, registered):
    """A decision whose kernel refuses this call's pointers (alignment) hands the call to a selection with the
    pointers (OpFront.fresh_call): its pick, a wrong kernel without a verdict, is gated out before it serves."""
    registered(_aligned_only, "test.aligned_only", alignment=64, priority=200)
    registered(_plus_one, "test.plus_one", priority=100)
    storage = torch.randn(2 * 64 + 16)
    b = torch.randn(8, 8)
    while b.data_ptr() % 64:
        b = torch.randn(8, 8)
    offset = next(i for i in range(16) if (storage.data_ptr() + 4 * i) % 64)
    misaligned = storage[offset : offset + 64].view(8, 8)
    with kabi.tuning("off"):
        torch.testing.assert_close(kabi.ops.matmul(b, b), b @ b)
        assert set(_verdicts()) == {"test.aligned_only"}
        torch.testing.assert_close(kabi.ops.matmul(misaligned, b), misaligned @ b)
    verdicts = _verdicts()
    assert verdicts.pop("test.aligned_only")[0] == "passed"
    assert verdicts.pop("test.plus_one")[0] == "failed"
    ((_, (verdict, _)),) = verdicts.items()
    assert verdict == "passed"
