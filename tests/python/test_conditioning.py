"""Conditioning: before a measurement on a GPU the subject runs unmeasured, so that it is timed at the clock its
own load holds. The tuner conditions each candidate's samples after its first for ``CONDITION_CALLS`` of its own
calls, at most ``condition_s``; ``kabi.bench``'s ``run_unmeasured`` does the running, on a GPU only.

The tuner's candidates run on the fake clock of tests/python/test_measure.py, so every duration is exact.
"""

import math

import pytest
import torch

import kabi
from kabi._selection import bench as _bench
from kabi._selection import measure
from kabi._selection.measure import CONDITION_CALLS, measure_candidates
from kabi._selection.tuning_policy import TuningSettings, current_settings, tuning

from test_measure import FLOAT32, _inputs, _steady


def test_each_sample_after_the_first_follows_its_own_calls_for_a_bounded_time(clock, monkeypatch):
    requests = []

    def record(call, device, seconds):
        before = clock.calls
        call()
        requests.append((clock.last_name, seconds))
        assert clock.calls == before + 1

    monkeypatch.setattr(measure, "run_unmeasured", record)
    names = {}

    def named(name, us):
        run = clock.kernel(_steady(us))

        def candidate(a, b, out=None):
            clock.last_name = name
            return run(a, b, out)

        names[name] = candidate
        return name, candidate

    settings = TuningSettings(warmup=1, repeat=5, min_time_s=0.0, screen_margin=math.inf, condition_s=0.03)
    results = measure_candidates([named("short", 100), named("long", 5000)], _inputs, torch.matmul, FLOAT32,
                                 settings)
    assert {result.kernel: result.time_us for result in results} == {"short": 100, "long": 5000}
    by_name = {name: [seconds for who, seconds in requests if who == name] for name in names}
    # Every sample but the first: CONDITION_CALLS of the last sample's calls, or condition_s when that is less.
    assert by_name["short"] == pytest.approx([CONDITION_CALLS * 100e-6] * (settings.repeat - 1))
    assert by_name["long"] == pytest.approx([0.03] * (settings.repeat - 1))


def test_run_unmeasured_calls_until_the_deadline_on_a_gpu_and_never_on_a_cpu(monkeypatch):
    now = [0.0]
    calls = []
    synchronized = []

    def call():
        calls.append(now[0])
        now[0] += 0.004

    class Stream:
        def synchronize(self):
            synchronized.append(self)

    stream = Stream()
    lookups = []
    monkeypatch.setattr(_bench.time, "perf_counter", lambda: now[0])
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: lookups.append(device) or stream)
    _bench.run_unmeasured(call, torch.device("cpu"), 1.0)
    _bench.run_unmeasured(call, torch.device("cuda"), 0.0)
    assert calls == [], "a CPU has no clock to condition, and 0 s is off"
    _bench.run_unmeasured(call, torch.device("cuda"), 0.01)
    assert len(calls) == 3, "calls go on until the deadline, the last one started before it"
    assert synchronized == [stream] * 3, "each call is waited for, so the time spent is the device's"
    assert lookups == [torch.device("cuda")], "the stream the calls run on is looked up once"

    def failing():
        raise RuntimeError("launch failed")

    with pytest.raises(RuntimeError, match="launch failed"):
        _bench.run_unmeasured(failing, torch.device("cuda"), 0.01)


def test_condition_s_has_an_environment_twin_a_scope_and_named_errors(monkeypatch):
    assert TuningSettings().condition_s == 0.03
    monkeypatch.setenv("KABI_TUNE_CONDITION_S", "0")
    assert current_settings().condition_s == 0
    with tuning(condition_s=0.1) as settings:
        assert settings.condition_s == 0.1
    for bad in (-0.01, math.inf, math.nan, "long", True):
        with pytest.raises(kabi.InvalidArgumentError, match="condition_s must be a finite number of seconds >= 0"):
            TuningSettings(condition_s=bad)
    monkeypatch.setenv("KABI_TUNE_CONDITION_S", "long")
    with pytest.raises(kabi.InvalidArgumentError, match="KABI_TUNE_CONDITION_S='long' is not a number"):
        current_settings()
