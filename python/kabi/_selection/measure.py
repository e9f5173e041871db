"""Measuring one problem's candidates: run each on fresh inputs, gate it against the reference, time the survivors.

A candidate that raises, returns the wrong shape or dtype, returns NaN/Inf where the reference is finite, is outside
the op's tolerance, or writes into its inputs gets ``time_us = inf`` and a note saying why; it can never win, and
nothing it does escapes as an exception.

Timing is built to hold on a busy machine. The survivors are timed in ``settings.repeat`` short rounds; in each
round every candidate takes one sample (a :func:`kabi.bench` of ``SAMPLES_PER_ROUND`` calls' median), in an order
that rotates from round to round, so a burst of load from elsewhere lands on every candidate alike. A candidate's
time is the median of its rounds and its spread ``(slowest - fastest) / median`` over them. A spread above
``settings.max_spread`` is measured again, together with the other noisy candidates, up to
``REMEASUREMENTS`` times; a candidate still noisy after that is marked ``noisy``: the tuner keeps its record for
this process only, and later processes measure it again. On the CPU a candidate whose samples got less than
``settings.min_cpu_share`` of their wall time as CPU time was starved by other work (a load that slows every sample
alike, so no spread shows it) and counts as noisy too.

Example::

    >>> import torch
    >>> from kabi._base.declarations import Tolerance
    >>> from kabi._selection.tuning_policy import TuningSettings
    >>> a, b = torch.randn(32, 16), torch.randn(16, 8)
    >>> results = measure_candidates(
    ...     [("mm", torch.mm), ("zeros", lambda x, y: torch.zeros(32, 8))],
    ...     lambda: [a.clone(), b.clone()], torch.matmul, Tolerance(2e-5, 1e-4),
    ...     TuningSettings(repeat=3, min_time_s=0.0))
    >>> [r.passed for r in results], results[1].note
    ([True, False], 'wrong result: norm error 1.0e+00 > 2e-05')
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from .._base.declarations import Tolerance
from .bench import bench
from .correctness import check_output, reference_output
from .tuning_policy import TuningSettings

__all__ = ["HOST_BOUND_US", "CandidateMeasurement", "fastest", "gate_once", "measure_candidates", "time_candidates"]

# Notes travel into the tuning cache and into explain's 256-byte reason fields.
_MAX_NOTE_CHARS = 200
# Samples of one candidate in one round; their median is the round's value, so one preempted sample cannot move it.
SAMPLES_PER_ROUND = 3
# How many more times the noisy candidates of a problem are measured before they are kept as noisy.
REMEASUREMENTS = 2
# A problem whose fastest eager median is below this is host-bound enough that replaying it in a CUDA graph, which
# drops the per-call launch cost (several microseconds through Python, more for multi-kernel candidates), can change
# which candidate wins: on an H200 a Triton matmul measured fastest eagerly took 50.9 us under graph replay, where
# cuBLAS took 47.3 us. The tuner times such problems in graph mode too.
HOST_BOUND_US = 100.0


@dataclass(frozen=True)
class CandidateMeasurement:
    """One candidate's outcome: its median time over the timing rounds (inf when rejected), why it was rejected or
    why its time is not final ("" when it passed cleanly), each round's time, the relative spread of the rounds
    ((slowest - fastest) / median; 0 with fewer than two rounds) and whether that spread stayed above the bound."""

    kernel: str
    time_us: float
    note: str = ""
    rounds_us: tuple[float, ...] = ()
    spread: float = 0.0
    noisy: bool = False

    @property
    def passed(self) -> bool:
        return math.isfinite(self.time_us)


def _describe_exception(error: BaseException, when: str) -> str:
    message = " ".join(str(error).split())
    note = f"raised {type(error).__name__}{when}: {message}" if message else f"raised {type(error).__name__}{when}"
    return note if len(note) <= _MAX_NOTE_CHARS else note[: _MAX_NOTE_CHARS - 3] + "..."


def _unchanged(inputs: Sequence[Any], snapshots: Sequence[Any]) -> bool:
    return all(
        torch.equal(item, snapshot)
        for item, snapshot in zip(inputs, snapshots)
        if isinstance(item, torch.Tensor)
    )


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _gate(fn, inputs, expected, tolerance, expected_dtype, device) -> str | None:
    try:
        output = fn(*inputs)
        _synchronize(device)
        return check_output(output, expected, tolerance, expected_dtype)
    except Exception as error:
        return _describe_exception(error, "")


def measure_candidates(
    candidates: Sequence[tuple[str, Callable[..., Any]]],
    make_inputs: Callable[[], list[Any]],
    reference: Callable[..., torch.Tensor],
    tolerance: Tolerance,
    settings: TuningSettings,
    *,
    expected_dtype: torch.dtype | None = None,
) -> list[CandidateMeasurement]:
    """Gate and time each ``(name, fn)`` in ``candidates`` on ``fn(*make_inputs())``.

    Candidates that pass the gate are timed in ``settings.repeat`` interleaved rounds (see the module docstring):
    the first round warms each candidate up with ``settings.warmup`` calls, the rounds of one candidate last
    ``settings.min_time_s`` together, and noisy candidates are measured again.

    ``make_inputs`` must return the same values on every call (the tuning inputs are rebuilt after a candidate
    corrupts them). ``reference`` is the op's reference, run in float64. Results keep the candidates' order.
    """
    timing = _Timing(make_inputs, settings)
    expected = reference_output(reference, timing.inputs)
    for name, fn in candidates:
        note = _gate(fn, timing.inputs, expected, tolerance, expected_dtype, timing.device)
        if not timing.inputs_unchanged():
            note = "wrote into its inputs" + (f"; {note}" if note else "")
            timing.rebuild_inputs()
        if note is not None:
            timing.notes[name] = note
    timed = [(name, fn) for name, fn in candidates if name not in timing.notes]
    return _timed_results(timing, candidates, timed)


def time_candidates(
    candidates: Sequence[tuple[str, Callable[..., Any]]],
    make_inputs: Callable[[], list[Any]],
    settings: TuningSettings,
    *,
    cuda_graph: bool = False,
) -> list[CandidateMeasurement]:
    """Time candidates that already passed the gate, as :func:`measure_candidates` times its survivors; with
    ``cuda_graph`` each sample is a :func:`kabi.bench` of the calls captured in a CUDA graph and replayed. A candidate
    that raises (e.g. cannot be captured) gets ``time_us = inf`` and a note."""
    timing = _Timing(make_inputs, settings, cuda_graph)
    return _timed_results(timing, candidates, list(candidates))


def _timed_results(timing: _Timing, candidates: Sequence[tuple[str, Callable[..., Any]]],
                   timed: Sequence[tuple[str, Callable[..., Any]]]) -> list[CandidateMeasurement]:
    rounds = timing.interleaved_rounds(timed, timing.settings.warmup)
    for _ in range(REMEASUREMENTS):
        noisy = [(name, fn) for name, fn in timed if name in rounds and timing.is_noisy(rounds[name])]
        if not noisy:
            break
        for name, again in timing.interleaved_rounds(noisy, 1).items():
            if timing.noise_rank(again) < timing.noise_rank(rounds[name]):
                rounds[name] = again
    return [timing.result(name, rounds.get(name)) for name, _ in candidates]


def _spread(rounds_us: Sequence[float]) -> float:
    if len(rounds_us) < 2:
        return 0.0
    median = statistics.median(rounds_us)
    return (max(rounds_us) - min(rounds_us)) / median if median > 0 else 0.0


@dataclass
class _Rounds:
    """One measurement of one candidate: each round's time, and the CPU share of each round's sample (CPU only)."""

    times_us: list[float] = field(default_factory=list)
    cpu_shares: list[float] = field(default_factory=list)

    @property
    def cpu_share(self) -> float | None:
        return statistics.median(self.cpu_shares) if self.cpu_shares else None


class _Timing:
    """The tuning inputs of one problem, the notes of the candidates rejected so far, and the interleaved rounds."""

    def __init__(self, make_inputs: Callable[[], list[Any]], settings: TuningSettings, cuda_graph: bool = False) -> None:
        self.make_inputs, self.settings, self.cuda_graph = make_inputs, settings, cuda_graph
        self.inputs = make_inputs()
        self.snapshots = [item.clone() if isinstance(item, torch.Tensor) else item for item in self.inputs]
        self.device = next((item.device for item in self.inputs if isinstance(item, torch.Tensor)), torch.device("cpu"))
        self.notes: dict[str, str] = {}
        self.attempts = 0

    def inputs_unchanged(self) -> bool:
        return _unchanged(self.inputs, self.snapshots)

    def rebuild_inputs(self) -> None:
        self.inputs = self.make_inputs()

    def is_noisy(self, rounds: _Rounds) -> bool:
        return _spread(rounds.times_us) > self.settings.max_spread or self.is_starved(rounds)

    def noise_rank(self, rounds: _Rounds) -> tuple[bool, float]:
        """Lower is cleaner: a measurement that is not noisy, then the smaller spread."""
        return self.is_noisy(rounds), _spread(rounds.times_us)

    def is_starved(self, rounds: _Rounds) -> bool:
        share = rounds.cpu_share
        return share is not None and share < self.settings.min_cpu_share

    def interleaved_rounds(self, candidates: Sequence[tuple[str, Callable[..., Any]]], warmup: int) -> dict[str, _Rounds]:
        """Each candidate's round times: ``settings.repeat`` rounds of one sample per candidate, the order rotating
        each round. A candidate that raises or writes into its inputs is noted and leaves the rounds."""
        self.attempts += 1
        repeat = self.settings.repeat
        rounds: dict[str, _Rounds] = {name: _Rounds() for name, _ in candidates}
        for round_index in range(repeat):
            active = [(name, fn) for name, fn in candidates if name not in self.notes]
            shift = round_index % max(len(active), 1)
            for name, fn in active[shift:] + active[:shift]:
                try:
                    sample = bench(
                        lambda: fn(*self.inputs),
                        warmup=warmup if round_index == 0 else 1,
                        repeat=SAMPLES_PER_ROUND,
                        min_time_s=self.settings.min_time_s / repeat,
                        device=self.device,
                        cuda_graph=self.cuda_graph,
                    )
                except Exception as error:
                    self.notes[name] = _describe_exception(error, " while being timed")
                    continue
                if not self.inputs_unchanged():
                    self.notes[name] = "wrote into its inputs while being timed"
                    self.rebuild_inputs()
                    continue
                rounds[name].times_us.append(sample.median_us)
                if sample.cpu_share is not None:
                    rounds[name].cpu_shares.append(sample.cpu_share)
        return {name: values for name, values in rounds.items() if name not in self.notes}

    def result(self, name: str, rounds: _Rounds | None) -> CandidateMeasurement:
        if name in self.notes:
            return CandidateMeasurement(name, math.inf, self.notes[name])
        spread = _spread(rounds.times_us)
        note = ""
        if spread > self.settings.max_spread:
            note = (f"noisy: spread {spread:.0%} > {self.settings.max_spread:.0%} in each of {self.attempts} "
                    f"measurements; kept for this process only")
        elif self.is_starved(rounds):
            note = (f"starved: the process had {rounds.cpu_share:.0%} of a core while timed (a busy machine), "
                    f"under {self.settings.min_cpu_share:.0%}; kept for this process only")
        return CandidateMeasurement(name, statistics.median(rounds.times_us), note, tuple(rounds.times_us), spread,
                                    bool(note))


def fastest(results: Sequence[CandidateMeasurement]) -> CandidateMeasurement | None:
    """The passing candidate with the least time (the earliest on a tie), or None when none passed."""
    passing = [result for result in results if result.passed]
    return min(passing, key=lambda result: result.time_us) if passing else None


def gate_once(
    fn: Callable[..., Any],
    make_inputs: Callable[[], list[Any]],
    reference: Callable[..., torch.Tensor],
    tolerance: Tolerance,
    *,
    expected_dtype: torch.dtype | None = None,
) -> str | None:
    """The correctness gate alone: one untimed run of ``fn`` on ``make_inputs()``, checked as
    :func:`measure_candidates` checks it. Returns why it failed, or None when it passed."""
    inputs = make_inputs()
    snapshots = [item.clone() if isinstance(item, torch.Tensor) else item for item in inputs]
    device = next((item.device for item in inputs if isinstance(item, torch.Tensor)), torch.device("cpu"))
    note = _gate(fn, inputs, reference_output(reference, inputs), tolerance, expected_dtype, device)
    if not _unchanged(inputs, snapshots):
        note = "wrote into its inputs" + (f"; {note}" if note else "")
    return note
