"""``kabi.explain`` says what the call will do: tune (and which kernels it measures), or gate the heuristic's pick
once, or run a tuned pick; every candidate row has a reason. Every test runs on its own temporary tuning cache."""

from __future__ import annotations

import torch

import kabi
from kabi import cache
from kabi.cli import main

QUICK_TUNING = {"warmup": 1, "repeat": 2, "min_time_s": 0.0}


def _reasons(explanation):
    return {row[0]: (row[5], row[7]) for row in explanation._rows()}


def test_an_untuned_problem_says_the_call_will_tune_and_marks_the_pick_provisional(cache_dir):
    a, b = torch.randn(17, 9), torch.randn(9, 5)
    with kabi.tuning("first-call"):
        explanation = kabi.explain(kabi.ops.matmul, a, b)
    assert explanation.provisional
    assert explanation.plan.startswith("will tune: measures cpu.openblas.gemm, torch.matmul.cpu on the first call")
    lines = str(explanation).splitlines()
    assert lines[1].startswith(f"pick: {explanation.pick} (provisional; heuristic: ")
    assert lines[2] == f"plan: {explanation.plan}"
    reasons = _reasons(explanation)
    assert reasons[explanation.pick][1].startswith("provisional: heuristic: ")
    assert all(reason for _, reason in reasons.values())
    with kabi.tuning("first-call", **QUICK_TUNING):
        kabi.ops.matmul(a, b)
    tuned = kabi.explain(kabi.ops.matmul, a, b)
    assert tuned.pick_reason == "tuned" and not tuned.provisional
    assert tuned.plan == f"runs {tuned.pick}, the tuned pick"
    (other,) = [name for name, (verdict, _) in _reasons(tuned).items() if verdict == "eligible"]
    # Measured in full and slower, or cut by the screen.
    assert _reasons(tuned)[other][1].startswith(("eligible, not picked: slower (",
                                                 "eligible, not picked: screened out ("))


def test_with_tuning_off_explain_names_the_kernel_that_will_be_gated_then_the_verified_pick(cache_dir):
    a, b = torch.randn(15, 9), torch.randn(9, 5)
    with kabi.tuning("off"):
        before = kabi.explain(kabi.ops.matmul, a, b)
        assert not before.provisional
        assert before.plan.startswith(f"will not tune (tuning is off (KABI_TUNE=off or kabi.tuning('off'))): runs the "
                                      f"heuristic's pick {before.pick}, after gating it once")
        assert _reasons(before)["torch.matmul.cpu"][1] == "eligible, not picked: no verdict yet (not gated on this problem)"
        kabi.ops.matmul(a, b)
        after = kabi.explain(kabi.ops.matmul, a, b)
    assert after.pick == before.pick and "passed the correctness gate on this problem" in after.reason
    assert after.plan == f"will not tune (tuning is off (KABI_TUNE=off or kabi.tuning('off'))): runs the heuristic's pick {after.pick}"
    kabi.verify(kabi.ops.matmul, a, b)
    reasons = _reasons(kabi.explain(kabi.ops.matmul, a, b))
    assert "eligible, not picked: passed the gate, untimed" in [reason for _, reason in reasons.values()]


def test_kabi_explain_tune_tunes_then_explains_the_tuned_pick(cache_dir, capsys):
    assert main(["explain", "matmul", "--shape", "12x6x4", "--dtype", "float32", "--device", "cpu", "--tune"]) == 0
    output = capsys.readouterr().out
    assert "tuned: fastest of " in output and "the tuned pick" in output
    timed = [record for record in cache.show("matmul") if not record.gate_only]
    assert {record.kernel for record in timed} == {"cpu.openblas.gemm", "torch.matmul.cpu"}
    assert len({record.problem for record in timed}) == 1
