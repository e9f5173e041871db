"""The screen before the full measurement: a clearly slow candidate is cut after one round and keeps a screened time
that is persisted but never wins; the fastest is never cut; fixed costs (the reference, the gate, CUDA-graph
captures) are paid once per candidate; noisy clear losers are persisted; a warm process measures only what lacks a
record, with the recorded pick.

The candidates run on the fake clock of tests/python/test_measure.py, so every time is exact.
"""

import dataclasses
import math

import pytest
import torch

import kabi
from kabi import _core
from kabi._base.decision_cache import invalidate_all
from kabi._base.tensors import descriptor
from kabi._selection import measure, tuner
from kabi._selection.bench import BenchResult
from kabi._selection.measure import (SAMPLES_PER_ROUND, CandidateMeasurement, CandidateTimer, fastest,
                                     measure_candidates, select_finalists, settle_noisy)
from kabi._selection.tuning_policy import TuningSettings, current_settings, tuning
from kabi.ops import _stats

from test_measure import FLOAT32, _alternating_rounds, _inputs, _steady, _tune_only

SETTINGS = TuningSettings(warmup=1, repeat=7, min_time_s=0.0, max_spread=0.25)
SCREENED = _core.TUNING_RECORD_SCREENED


def _timed(clock, durations):
    """Candidates on the fake clock, each with its own steady duration, and the call log of each."""
    logs = {name: [] for name in durations}
    return [(name, clock.kernel(_steady(us), logs[name])) for name, us in durations.items()], logs


def test_the_screen_cuts_a_clearly_slow_candidate_after_one_round(clock):
    candidates, logs = _timed(clock, {"fast": 100, "close": 104, "slow": 300})
    results = {result.kernel: result for result in
               measure_candidates(candidates, _inputs, torch.matmul, FLOAT32, SETTINGS)}
    slow = results["slow"]
    assert slow.screened and slow.passed and not slow.contends and slow.time_us == 300
    assert slow.note == "screened out: 300.00 us in the screen, more than 25% behind the fastest (100.00 us)"
    # The gate's call, then one round: a warm-up call and SAMPLES_PER_ROUND samples; nothing more.
    assert len(logs["slow"]) == 1 + 1 + SAMPLES_PER_ROUND
    for name, us in (("fast", 100), ("close", 104)):
        assert not results[name].screened and results[name].time_us == us
        assert len(results[name].rounds_us) == SETTINGS.repeat
        assert len(logs[name]) == 1 + (1 + SAMPLES_PER_ROUND) * (1 + SETTINGS.repeat)
    assert fastest(results.values()).kernel == "fast"


def test_the_fastest_is_never_cut_even_when_its_screen_is_hit_by_load(clock):
    """A burst during the fastest candidate's screen slows it by 20%, inside the margin: it is still measured in
    full, and wins."""
    calls = {"count": 0}

    def winner_duration(index):
        calls["count"] += 1
        return 120 if 2 <= calls["count"] <= 1 + 1 + SAMPLES_PER_ROUND else 100  # its screen's calls

    candidates = [("winner", clock.kernel(winner_duration))] + [
        (f"other{index}", clock.kernel(_steady(us))) for index, us in enumerate((110, 118, 400, 900))]
    results = {result.kernel: result for result in
               measure_candidates(candidates, _inputs, torch.matmul, FLOAT32, SETTINGS)}
    assert not results["winner"].screened and results["winner"].time_us == 100
    assert fastest(results.values()).kernel == "winner"
    # 400 and 900 us are cut by the screen; 110 and 118 us, finalists, once their rounds clearly lose.
    assert {name: result.note.split(":")[0] for name, result in results.items() if result.screened} == {
        "other0": "cut after 3 rounds", "other1": "cut after 3 rounds", "other2": "screened out",
        "other3": "screened out"}


def test_a_finalist_that_clearly_lost_stops_after_three_rounds_and_keeps_a_screened_time(clock):
    """Within the screen's 25% all three are finalists; after three rounds the 110 us candidate's fastest round is
    more than 5% behind the slowest of the 100 us one, so it is measured no further; 104 us is not that far behind,
    and is measured in full."""
    candidates, logs = _timed(clock, {"fast": 100, "close": 104, "loser": 110})
    cut_before = _stats.stats().candidates_cut
    results = {result.kernel: result for result in
               measure_candidates(candidates, _inputs, torch.matmul, FLOAT32, SETTINGS)}
    assert _stats.stats().candidates_cut == cut_before + 1
    loser = results["loser"]
    assert loser.screened and loser.passed and not loser.contends and loser.rounds_us == (110, 110, 110)
    assert loser.note == ("cut after 3 rounds: its fastest round (110.00 us) is more than 5% behind the slowest of "
                          "fast (100.00 us)")
    per_round = 1 + SAMPLES_PER_ROUND
    # The gate's call, the screen's round, then 3 of the 7 rounds.
    assert len(logs["loser"]) == 1 + per_round + 3 * per_round
    for name in ("fast", "close"):
        assert not results[name].screened and len(results[name].rounds_us) == SETTINGS.repeat
        assert len(logs[name]) == 1 + per_round * (1 + SETTINGS.repeat)
    assert fastest(results.values()).kernel == "fast"


def test_a_noisy_finalist_is_not_cut_and_neither_is_one_behind_a_noisy_leader(clock):
    """Noisy rounds say too little either way: the noisy candidate is measured in full (and again), and the clean
    one behind the noisy leader too."""
    noisy_leader = _alternating_rounds(clock, 100, 160)
    candidates = [("noisy", noisy_leader), ("clean", clock.kernel(_steady(120)))]
    results = {result.kernel: result for result in
               measure_candidates(candidates, _inputs, torch.matmul, FLOAT32, SETTINGS)}
    assert results["noisy"].noisy and not results["noisy"].screened
    assert not results["clean"].screened and len(results["clean"].rounds_us) == SETTINGS.repeat


def test_a_screened_time_never_wins_even_when_it_is_the_least():
    screens = [CandidateMeasurement("a", 100.0, screened=True), CandidateMeasurement("b", 130.0, screened=True),
               CandidateMeasurement("c", math.inf, "wrong result")]
    finalists, cut = select_finalists(screens, 0.25)
    assert finalists == ["a"] and set(cut) == {"b", "c"} and cut["b"].screened and cut["c"] is screens[2]
    # A full measurement slower than another candidate's screen still wins: the screen is no final time.
    assert fastest([CandidateMeasurement("a", 140.0), cut["b"]]).kernel == "a"
    assert fastest([cut["b"], cut["c"]]) is None


def test_a_starved_screen_is_never_cut(clock):
    candidates = [("fed", clock.kernel(_steady(100))), ("starved", clock.kernel(_steady(300), cpu_share=0.2))]
    results = {result.kernel: result for result in
               measure_candidates(candidates, _inputs, torch.matmul, FLOAT32, SETTINGS)}
    assert not results["starved"].screened and len(results["starved"].rounds_us) == SETTINGS.repeat


def test_without_a_screen_every_survivor_is_measured_in_full(clock):
    candidates, _ = _timed(clock, {"fast": 100, "slow": 300})
    settings = dataclasses.replace(SETTINGS, screen_margin=math.inf)
    results = measure_candidates(candidates, _inputs, torch.matmul, FLOAT32, settings)
    assert [(result.screened, len(result.rounds_us)) for result in results] == [(False, 7), (False, 7)]


def test_the_reference_runs_once_and_each_candidate_is_gated_once(clock):
    references = []

    def reference(a, b):
        references.append(1)
        return torch.matmul(a, b)

    candidates, logs = _timed(clock, {"a": 100, "b": 105})
    timer = CandidateTimer(candidates, _inputs, SETTINGS, reference=reference, tolerance=FLOAT32)
    timer.screen(["a", "b"])
    timer.measure(["a"])
    timer.measure(["a", "b"])
    assert len(references) == 1
    assert timer.gate(["a", "b"]) == {"a": None, "b": None}
    # a: gate, screen, two full measurements; b: gate, screen, one.
    per_measurement = (1 + SAMPLES_PER_ROUND) * SETTINGS.repeat
    assert len(logs["a"]) == 1 + (1 + SAMPLES_PER_ROUND) + 2 * per_measurement
    assert len(logs["b"]) == 1 + (1 + SAMPLES_PER_ROUND) + per_measurement


def test_in_cuda_graph_mode_each_candidate_is_captured_once(monkeypatch):
    """No graph can run here: the capture is faked, and counted."""
    captures = []

    class Captured:
        def time(self, repeat, flush_l2=True):
            return BenchResult(10.0, 10.0, 10.0, repeat, "cuda-graph")

    def capture_calls(fn, device, *, repeat, min_time_s):
        captures.append(fn)
        return Captured()

    monkeypatch.setattr(measure, "capture_calls", capture_calls)
    candidates = [(name, torch.matmul) for name in ("a", "b", "c")]
    results = CandidateTimer(candidates, _inputs, SETTINGS, cuda_graph=True).screen_and_measure(["a", "b", "c"])
    assert [result.time_us for result in results] == [10.0] * 3
    assert all(not result.screened and len(result.rounds_us) == SETTINGS.repeat for result in results)
    assert len(captures) == 3, "the screen's capture is replayed in every round"


def test_a_noisy_clear_loser_is_persisted_as_screened_and_a_close_one_stays_noisy():
    results = [CandidateMeasurement("pick", 100.0, rounds_us=(99.0, 100.0, 101.0)),
               CandidateMeasurement("far", 400.0, "noisy: spread 50% > 25% in each of 3 measurements; kept for this "
                                    "process only", (300.0, 400.0, 500.0), 0.5, True),
               CandidateMeasurement("near", 200.0, "noisy: ...", (110.0, 200.0, 300.0), 0.95, True)]
    pick, far, near = settle_noisy(results, 0.25)
    assert pick is results[0] and near is results[2]
    assert far.screened and not far.noisy and far.time_us == 400.0
    assert far.note.startswith("noisy: spread 50% > 25% in each of 3 measurements; even its fastest round")
    # Behind a noisy pick nothing is settled.
    assert settle_noisy([dataclasses.replace(results[0], noisy=True), results[1]], 0.25)[1] is results[1]


def test_the_screen_margin_has_an_environment_twin_a_scope_and_named_errors(monkeypatch):
    assert TuningSettings().screen_margin == 0.25
    monkeypatch.setenv("KABI_TUNE_SCREEN_MARGIN", "0.5")
    assert current_settings().screen_margin == 0.5
    with tuning(screen_margin=math.inf) as settings:
        assert settings.screen_margin == math.inf
    for bad in (0, -1, "wide", True):
        with pytest.raises(kabi.InvalidArgumentError, match="screen_margin must be a fraction > 0"):
            TuningSettings(screen_margin=bad)
    monkeypatch.setenv("KABI_TUNE_SCREEN_MARGIN", "wide")
    with pytest.raises(kabi.InvalidArgumentError, match="KABI_TUNE_SCREEN_MARGIN='wide' is not a number"):
        current_settings()


# --- records: persisted, never picked, and what a warm process measures ------------------------------------------


def _store(inputs, records):
    _core.tuning_store("matmul", [descriptor(tensor) for tensor in inputs], [], records)


def test_a_screened_record_is_persisted_and_never_picked_by_the_core(cache_dir):
    inputs = torch.randn(8, 4), torch.randn(4, 6)
    _store(inputs, [("cpu.openblas.gemm", 5.0, "screened out", SCREENED, 0.0), ("torch.matmul.cpu", 9.0, "", 0, 0.0)])
    kabi.cache.reload()
    records = {record.kernel: record for record in kabi.cache.show("matmul")}
    assert records["cpu.openblas.gemm"].screened and not records["cpu.openblas.gemm"].memory_only
    selection = _core.select("matmul", [descriptor(tensor) for tensor in inputs])
    assert selection["kernel"]["name"] == "torch.matmul.cpu"
    assert selection["reason"] == "tuned: fastest of 1 measured (9.000 us), 1 screened out"
    with kabi.tuning("off"):
        explanation = kabi.explain(kabi.ops.matmul, *inputs)
    assert "5.00 us (screened)" in str(explanation) and "screened out (5.00 us in the screen)" in str(explanation)
    with pytest.raises(kabi.InvalidArgumentError, match="screened without a finite screened time"):
        _store(inputs, [("torch.matmul.cpu", math.inf, "", SCREENED, 0.0)])


def test_where_no_kernel_measured_in_full_is_eligible_the_screens_still_rank_the_others(cache_dir):
    """A C++ caller cannot run the Python kernel that won; the native kernels it can run lost to it in the screen."""
    inputs = torch.randn(8, 4), torch.randn(4, 6)
    _store(inputs, [("cpu.openblas.gemm", 7.0, "screened out", SCREENED, 0.0),
                    ("torch.matmul.cpu", 5.0, "screened out", SCREENED, 0.0)])
    selection = _core.select("matmul", [descriptor(tensor) for tensor in inputs])
    assert selection["pick_reason"] == "tuned" and selection["kernel"]["name"] == "torch.matmul.cpu"
    assert selection["reason"] == ("tuned: fastest of 2 screened (5.000 us); no kernel measured in full is eligible "
                                   "here")


def test_a_noisy_clear_loser_reaches_the_cache_file_and_a_close_noisy_one_does_not(clock, cache_dir, registered):
    registered(_alternating_rounds(clock, 1000, 3000), "test.screening.far")
    registered(_alternating_rounds(clock, 420, 900), "test.screening.near")
    registered(clock.kernel(_steady(400)), "test.screening.clean")
    _tune_only(["test.screening.far", "test.screening.near", "test.screening.clean"])
    records = {record.kernel: record for record in kabi.cache.show("matmul")}
    assert records["test.screening.far"].screened and not records["test.screening.far"].memory_only
    assert records["test.screening.near"].memory_only and not records["test.screening.near"].screened
    log = (cache_dir / "tuning-v4.log").read_text()
    assert "test.screening.far" in log and "test.screening.near" not in log


def _eligible(inputs):
    with kabi.tuning("off"):
        return [candidate.name for candidate in kabi.explain(kabi.ops.matmul, *inputs).candidates if candidate.eligible]


def test_a_warm_process_measures_only_the_unrecorded_kernels_and_the_recorded_pick(cache_dir, registered):
    """The records of a previous process: every kernel's but one, whose noisy record that process kept to itself.
    The next process measures that kernel and the recorded pick, interleaved, and nothing else; the other recorded
    kernels, which lost to the pick, keep their times as screened ones."""
    calls = []

    def spy(name):
        def kernel(a, b, out=None):
            calls.append(name)
            return torch.matmul(a, b)
        return kernel

    registered(spy("test.warm.pick"), "test.warm.pick")
    registered(spy("test.warm.loser"), "test.warm.loser")
    registered(spy("test.warm.noisy"), "test.warm.noisy")
    inputs = torch.randn(24, 16), torch.randn(16, 8)
    others = [name for name in _eligible(inputs) if not name.startswith("test.warm.")]
    _store(inputs, [("test.warm.pick", 1.0, "", 0, 0.0), ("test.warm.loser", 2.0, "", 0, 0.0),
                    ("test.warm.noisy", 1.5, "noisy", _core.TUNING_RECORD_MEMORY_ONLY, 0.6)]
           + [(name, 50.0, "", 0, 0.0) for name in others])
    kabi.cache.set_directory(cache_dir)  # a new process: the memory-only record is gone, the file's records stay
    assert "test.warm.noisy" not in {record.kernel for record in kabi.cache.show("matmul")}
    invalidate_all()
    assert kabi.explain(kabi.ops.matmul, *inputs).plan.startswith(
        "will tune: measures test.warm.noisy, test.warm.pick on the first call")
    before = _stats.stats()
    with kabi.tuning("first-call", warmup=1, repeat=3, min_time_s=0.0, max_spread=math.inf, min_cpu_share=0.0):
        torch.testing.assert_close(kabi.ops.matmul(*inputs), inputs[0] @ inputs[1])
    after = _stats.stats()
    assert after.tuning_runs == before.tuning_runs + 1
    assert set(calls) == {"test.warm.pick", "test.warm.noisy"}, "nothing else ran"
    explanation = kabi.explain(kabi.ops.matmul, *inputs)
    report = tuner.last_report("matmul", "cpu", explanation.problem_key)
    assert [item.kernel for item in report.measurements] == ["test.warm.noisy", "test.warm.pick"]
    assert report.source == "measured the unrecorded and the recorded pick"
    records = {record.kernel: record for record in kabi.cache.show("matmul")}
    for name in ["test.warm.loser", *others]:
        assert records[name].screened and records[name].note == "lost to the recorded pick; kept as a screened time"
    assert explanation.pick in ("test.warm.pick", "test.warm.noisy") and explanation.pick_reason == "tuned"
    calls.clear()
    invalidate_all()
    with kabi.tuning("first-call"):
        kabi.ops.matmul(*inputs)
    assert _stats.stats().tuning_runs == after.tuning_runs and calls == [explanation.pick], "complete: no tuning"
