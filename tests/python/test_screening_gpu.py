"""The screen on a GPU: CUDA-graph timing captures each candidate once and replays it in every round, and a first
call of a host-bound bf16 problem tunes with the screen in both modes, its pick measured in full."""

import math

import pytest
import torch

import kabi
from kabi._selection import measure, tuner
from kabi._selection.measure import CandidateTimer, fastest
from kabi._selection.tuning_policy import TuningSettings
from kabi.ops import _stats

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_graph_timing_captures_each_candidate_once_and_cuts_the_slow_one(monkeypatch):
    captures = []
    real_capture = measure.capture_calls

    def counting_capture(fn, device, **budget):
        captures.append(fn)
        return real_capture(fn, device, **budget)

    monkeypatch.setattr(measure, "capture_calls", counting_capture)
    a = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(512, 512, device="cuda", dtype=torch.bfloat16)

    def slow(x, y):
        result = torch.matmul(x, y)
        for _ in range(20):
            result = torch.matmul(x, y)
        return result

    candidates = [("mm", torch.matmul), ("mm-again", lambda x, y: torch.mm(x, y)), ("slow", slow)]
    settings = TuningSettings(warmup=1, repeat=5, min_time_s=0.01)
    results = {result.kernel: result for result in CandidateTimer(
        candidates, lambda: [a, b], settings, cuda_graph=True).screen_and_measure([name for name, _ in candidates])}
    assert len(captures) == 3, "one capture per candidate, replayed by the screen and every round"
    assert results["slow"].screened and math.isfinite(results["slow"].time_us)
    winner = fastest(results.values())
    assert winner.kernel in ("mm", "mm-again")
    assert len(winner.rounds_us) == settings.repeat, "the pick is measured in full"
    # Its twin runs the same cuBLAS kernel, so it is measured in full too, unless its rounds came out clearly
    # slower (a tiny kernel's timing can differ by output placement): then it is cut, saying so, and never wins.
    twin = results["mm-again" if winner.kernel == "mm" else "mm"]
    assert len(twin.rounds_us) == settings.repeat or (twin.screened and twin.note.startswith("cut after")), twin


def test_a_first_call_of_a_host_bound_problem_screens_in_both_modes(cache_dir):
    a = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    before = _stats.stats()
    with kabi.tuning("first-call"):
        torch.testing.assert_close(kabi.ops.matmul(a, w.t()), a @ w.t(), rtol=2e-2, atol=2e-1)
    after = _stats.stats()
    explanation = kabi.explain(kabi.ops.matmul, a, w.t())
    report = tuner.last_report("matmul", explanation.device, explanation.problem_key)
    assert report.pick is not None and not report.measurement(report.pick).screened
    assert after.tuning_runs == before.tuning_runs + 1
    print(f"tuned in {report.seconds:.3f} s: {after.candidates_benchmarked - before.candidates_benchmarked} "
          f"candidates timed, {after.candidates_screened_out - before.candidates_screened_out} screened out\n{report}")
    if report.graph_measurements:
        graph_pick = fastest(report.graph_measurements)
        assert graph_pick is not None and graph_pick.kernel == report.graph_pick
