"""kabi.explain: the record's content, its plain-text and rich renderings."""

from __future__ import annotations

import dataclasses
import io

import pytest
import torch

import kabi

pytestmark = pytest.mark.usefixtures("untuned")


def test_record_fields():
    a, b = torch.randn(64, 32), torch.randn(32, 16)
    explanation = kabi.explain(kabi.ops.matmul, a, b)
    assert explanation.op == "matmul" and explanation.device == "cpu"
    assert explanation.pick == "cpu.openblas.gemm" and explanation.pick_reason == "heuristic"
    assert explanation.reason
    assert explanation.problem.dims == {"M": 64, "K": 32, "N": 16}
    assert explanation.problem_key == explanation.problem.key and "float32" in explanation.problem_key
    names = [c.name for c in explanation.candidates]
    assert {"cpu.openblas.gemm", "torch.matmul.cpu"} <= set(names)
    assert "torch.matmul.cuda" not in names  # only the problem's device type
    assert [c.name for c in explanation.candidates if c.picked] == ["cpu.openblas.gemm"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        explanation.pick = "x"


def test_accepts_an_op_name_and_does_not_run_anything(monkeypatch):
    calls = []
    kabi.register_kernel("matmul", lambda a, b, out=None: calls.append(1), name="test.explain.spy", priority=100)
    try:
        assert kabi.explain("matmul", torch.randn(2, 2), torch.randn(2, 2)).pick == "test.explain.spy"
        assert calls == []
    finally:
        kabi.unregister_kernel("matmul", "test.explain.spy")


def test_rejections_carry_reasons():
    half = torch.randn(4, 4, dtype=torch.float16)
    explanation = kabi.explain(kabi.ops.matmul, half, half)
    (gemm,) = [c for c in explanation.candidates if c.name == "cpu.openblas.gemm"]
    assert not gemm.eligible and "float16" in gemm.reason
    assert explanation.pick == "torch.matmul.cpu"


def test_no_eligible_kernel_returns_a_record_with_every_rejection():
    half = torch.randn(4, 4, dtype=torch.float16)
    with kabi.use(matmul="cpu"):
        explanation = kabi.explain(kabi.ops.matmul, half, half)
    assert explanation.pick is None and explanation.forced == "cpu"
    assert "cpu.openblas.gemm" in explanation.error
    assert "no eligible kernel" in str(explanation)


def test_validation_errors_raise_as_the_call_would():
    with pytest.raises(kabi.InvalidArgumentError):
        kabi.explain(kabi.ops.matmul, torch.randn(2, 3), torch.randn(2, 3))


def test_plain_text_rendering():
    text = str(kabi.explain(kabi.ops.matmul, torch.randn(8, 4), torch.randn(4, 2)))
    lines = text.splitlines()
    assert lines[0].startswith("matmul on cpu, problem ")
    assert lines[1].startswith("pick: cpu.openblas.gemm (")
    assert lines[2].startswith("plan: ")
    assert "kernel" in lines[3] and "verdict" in lines[3]
    assert any("torch.matmul.cpu" in line and "eligible" in line for line in lines[4:])


def test_rich_rendering():
    from rich.console import Console

    console = Console(file=io.StringIO(), width=160, color_system=None)
    console.print(kabi.explain(kabi.ops.matmul, torch.randn(8, 4), torch.randn(4, 2)))
    output = console.file.getvalue()
    assert "cpu.openblas.gemm" in output and "torch.matmul.cpu" in output and "pick:" in output
