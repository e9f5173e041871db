"""Measurements that hold on a busy machine: interleaved rounds, the spread of a measurement, re-measuring noisy
candidates, and keeping a measurement that stays noisy out of the tuning cache file.

The candidates here run on a fake clock: each call advances it by a chosen duration, and kabi.bench reads it, so the
times are exact and the tests do not depend on this machine's load. A "burst of load" is a run of consecutive calls
(whichever candidate makes them) that take longer.
"""

import dataclasses
import math
import time

import pytest
import torch

import kabi
from kabi import _core
from kabi._base.declarations import Tolerance
from kabi._base.tensors import descriptor
from kabi._selection.measure import REMEASUREMENTS, SAMPLES_PER_ROUND, fastest, measure_candidates
from kabi._selection.tuner import _measure_and_record
from kabi._selection.tuning_policy import TuningSettings, current_settings, tuning
from kabi.ops._front import front_of

FLOAT32 = Tolerance(norm=2e-5, extreme=1e-4)
# No screen: these tests follow every candidate through the full measurement (tests/python/test_screening.py covers
# the screen).
SETTINGS = TuningSettings(warmup=1, repeat=7, min_time_s=0.0, max_spread=0.25, screen_margin=math.inf)


def _inputs():
    generator = torch.Generator().manual_seed(3)
    return [torch.randn(12, 8, generator=generator), torch.randn(8, 6, generator=generator)]


def _steady(us):
    return lambda index: us


def test_a_burst_of_load_lands_on_every_candidate_and_is_measured_away(clock):
    burst = range(24, 40)  # 16 consecutive calls: four rounds' worth of one candidate
    slowed = {"fast": [], "slow": []}

    def loaded(name, us):
        return clock.kernel(lambda index: us + (20_000 if index in burst else 0), slowed[name])

    results = measure_candidates([("fast", loaded("fast", 100)), ("slow", loaded("slow", 300))], _inputs,
                                 torch.matmul, FLOAT32, SETTINGS)
    for name in slowed:
        slowed[name] = [index for index in slowed[name] if index in burst]
    # Interleaving: the burst hit both candidates alike, not all of one's samples.
    assert len(slowed["fast"]) >= 6 and len(slowed["slow"]) >= 6
    by_name = {result.kernel: result for result in results}
    # The burst made the first measurement noisy; the re-measurement is clean and replaces it.
    assert by_name["fast"].time_us == 100 and by_name["slow"].time_us == 300
    assert all(result.spread == 0 and not result.noisy and result.note == "" for result in results)
    assert fastest(results).kernel == "fast"


def test_the_time_is_the_median_of_the_rounds_and_the_spread_their_range(clock):
    calls = []
    [result] = measure_candidates([("steady", clock.kernel(_steady(150), calls))], _inputs, torch.matmul, FLOAT32,
                                  SETTINGS)
    assert result.rounds_us == (150,) * SETTINGS.repeat and result.time_us == 150 and result.spread == 0
    # The gate's call, then per round one warm-up call and SAMPLES_PER_ROUND samples.
    assert len(calls) == 1 + SETTINGS.repeat * (1 + SAMPLES_PER_ROUND)


def test_one_slow_sample_in_a_round_does_not_move_the_round(clock):
    # Every fourth call is slow: at most one of a round's samples, so each round's median stays exact.
    [result] = measure_candidates([("steady", clock.kernel(lambda index: 5_000 if index % 4 == 0 else 200))],
                                  _inputs, torch.matmul, FLOAT32, SETTINGS)
    assert result.time_us == 200 and result.spread == 0 and not result.noisy


def _alternating_rounds(clock, fast_us, slow_us):
    """Durations that make every other timing round (of one candidate) slow, whatever happens between rounds."""
    calls = {"count": 0}
    per_round = 1 + SAMPLES_PER_ROUND

    def duration(index):
        calls["count"] += 1
        own = calls["count"] - 2  # -1 for the gate's call, then 0 from the first round's warm-up call on
        return slow_us if own >= 0 and (own // per_round) % 2 else fast_us

    return clock.kernel(duration)


def test_a_persistently_noisy_candidate_is_remeasured_then_marked_noisy(clock):
    results = measure_candidates([("noisy", _alternating_rounds(clock, 200, 600)),
                                  ("clean", clock.kernel(_steady(400)))], _inputs, torch.matmul, FLOAT32, SETTINGS)
    noisy, clean = results
    assert noisy.noisy and noisy.spread == pytest.approx((600 - 200) / noisy.time_us)
    assert noisy.time_us in (200, 600) and len(noisy.rounds_us) == SETTINGS.repeat
    assert f"in each of {1 + REMEASUREMENTS} measurements" in noisy.note and "this process only" in noisy.note
    assert not clean.noisy and clean.note == "" and clean.time_us == 400


def test_a_looser_bound_accepts_the_same_measurement(clock):
    [result] = measure_candidates([("noisy", _alternating_rounds(clock, 200, 600))], _inputs, torch.matmul,
                                  FLOAT32, dataclasses.replace(SETTINGS, max_spread=math.inf))
    assert result.spread > 1 and not result.noisy and result.note == ""


def _tune_only(kernels):
    """Measure and record just ``kernels`` (test kernels on the fake clock) through the tuner, as a miss would."""
    a, b = _inputs()
    front = front_of(kabi.ops.matmul)
    selection = front.select((a, b))
    return _measure_and_record(front, (a, b), selection, kernels, SETTINGS)


def test_a_noisy_record_stays_in_this_process_and_a_clean_one_is_persisted_with_spread_and_time(
        clock, cache_dir, registered):
    registered(_alternating_rounds(clock, 200, 600), "test.measure.noisy")
    registered(clock.kernel(_steady(400)), "test.measure.clean")
    before = int(time.time())
    report = _tune_only(["test.measure.noisy", "test.measure.clean"])
    assert "noisy: spread" in str(report) and "kept for this process only" in str(report)
    records = {record.kernel: record for record in kabi.cache.show("matmul")}
    noisy, clean = records["test.measure.noisy"], records["test.measure.clean"]
    assert noisy.memory_only and noisy.spread > SETTINGS.max_spread and "noisy" in noisy.note
    assert not clean.memory_only and clean.spread == 0 and clean.time_us == 400
    assert before <= clean.recorded_at <= int(time.time()) + 1
    log = (cache_dir / "tuning-v4.log").read_text()
    assert "test.measure.clean" in log and "test.measure.noisy" not in log
    kabi.cache.reload()
    assert kabi.cache.show("matmul") == list(records.values()), "this process keeps using the noisy record"


def test_another_cache_directory_starts_without_the_noisy_records_of_this_one(tmp_path):
    a, b = _inputs()
    descriptors = [descriptor(a), descriptor(b)]
    kabi.cache.set_directory(tmp_path / "first")
    try:
        _core.tuning_store("matmul", descriptors, [], [("torch.matmul.cpu", 9.0, "noisy", _core.TUNING_RECORD_MEMORY_ONLY, 0.9)])
        assert [record.memory_only for record in kabi.cache.show("matmul")] == [True]
        kabi.cache.set_directory(tmp_path / "second")
        assert kabi.cache.show("matmul") == []
    finally:
        kabi.cache.set_directory(None)


def test_the_noise_bound_has_an_environment_twin_and_a_scope(monkeypatch):
    assert TuningSettings().max_spread == 0.25
    monkeypatch.setenv("KABI_TUNE_MAX_SPREAD", "0.5")
    assert current_settings().max_spread == 0.5
    with tuning(max_spread=math.inf) as settings:
        assert settings.max_spread == math.inf == current_settings().max_spread
    monkeypatch.setenv("KABI_TUNE_MAX_SPREAD", "wide")
    with pytest.raises(ValueError, match="KABI_TUNE_MAX_SPREAD='wide' is not a number"):
        current_settings()


@pytest.mark.parametrize("bad", [0, -0.1, math.nan, True, "0.2"])
def test_a_bad_noise_bound_is_named(bad):
    with pytest.raises(ValueError, match="max_spread must be a fraction > 0"):
        TuningSettings(max_spread=bad)


def test_a_starved_candidate_is_kept_for_this_process_only(clock):
    """A machine so busy that every sample waits alike shows no spread; the process's share of the CPU shows it."""
    starved, fed = clock.kernel(_steady(300), cpu_share=0.2), clock.kernel(_steady(300))
    results = measure_candidates([("starved", starved), ("fed", fed)], _inputs, torch.matmul, FLOAT32, SETTINGS)
    by_name = {result.kernel: result for result in results}
    assert by_name["starved"].noisy and by_name["starved"].spread == 0.0
    assert by_name["starved"].note.startswith("starved: the process had 20% of a core while timed")
    assert not by_name["fed"].noisy and by_name["fed"].note == ""
    assert by_name["starved"].time_us == pytest.approx(300)


def test_the_cpu_share_check_can_be_turned_off(clock):
    settings = dataclasses.replace(SETTINGS, min_cpu_share=0.0)
    [result] = measure_candidates([("starved", clock.kernel(_steady(300), cpu_share=0.2))], _inputs, torch.matmul,
                                  FLOAT32, settings)
    assert not result.noisy and result.note == ""


def test_bench_reports_the_cpu_share_of_its_samples():
    sleeping = kabi.bench(lambda: time.sleep(0.002), warmup=1, repeat=3, min_time_s=0.0)
    assert sleeping.cpu_share is not None and sleeping.cpu_share < 0.5


@pytest.mark.parametrize("value", [-0.1, math.inf, "half"])
def test_a_bad_min_cpu_share_is_refused(value):
    with pytest.raises(kabi.InvalidArgumentError, match="min_cpu_share"):
        TuningSettings(min_cpu_share=value)


def test_min_cpu_share_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("KABI_TUNE_MIN_CPU_SHARE", "0.75")
    assert current_settings().min_cpu_share == 0.75
