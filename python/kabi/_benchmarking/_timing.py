"""Interleaved timing of one problem's subjects (kabi's choice, each candidate forced, each peer) with kabi.bench.

Every subject is timed in rounds; each round times every subject once, in every mode, the order rotating each
round by an even share of the subjects, so that every subject is timed at every stage of a round alike and load from
elsewhere slows one round of every subject alike rather than all of one subject's samples
(the tuner measures the same way). A subject's figure in a mode is the median of its round medians, the tuner's
statistic too: the least of them would credit whichever subject met one fast round, and on a power-limited GPU the
rounds of one kernel were seen 15% apart (H200, 4096x4096x14336 float16: one cuBLASLt algorithm's rounds ran
692-796 us, so its least round made it look 7% faster than the same kernel measured as kabi's choice). On a GPU
the subjects
first run unmeasured until the device is in its steady (power-limited) state, and each measurement is preceded by
``condition_s`` of the subject's own calls, unmeasured: a power-limited GPU's clock follows the load of the last
tens of milliseconds, so without it a subject is timed partly at the clock its predecessor in the round left, and a
subject that always follows a lighter one looks faster (on the H200, one cuBLAS call timed 1438 us as a peer and
over 1585 us as kabi's candidate in one run at 8192^3, and alike, 1629 us, when the two alternated).

Modes are kabi.bench's: ``"cpu"``; ``"cuda-events"``, one event pair per call with the L2 cache flushed before each
(a kernel-bound call as a model's first touch of a large layer sees it); ``"cuda-graph"``, calls replayed from a
CUDA graph, which removes host time (how a decode step runs in a captured model).

Example::

    >>> subjects = [Subject("mm", "peer", lambda: a @ b)]                            # doctest: +SKIP
    >>> measure_interleaved(subjects, ("cpu",), torch.device("cpu"), TimingSettings())  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Sequence

import torch

from .._selection.bench import bench, run_unmeasured

__all__ = ["ModeTiming", "Subject", "TimingSettings", "describe_error", "measure_interleaved", "synchronize"]

_MODE_ARGUMENTS: dict[str, dict[str, bool]] = {
    "cpu": {},
    "cuda-events": {"flush_l2": True},
    "cuda-graph": {"cuda_graph": True},
}


@dataclass(frozen=True)
class TimingSettings:
    """How long each subject is measured: ``rounds`` interleaved rounds, each a kabi.bench of ``repeat`` samples
    lasting at least ``min_time_s`` together."""

    rounds: int = 5
    repeat: int = 11
    min_time_s: float = 0.05
    # Before the first round the subjects run back to back for this long, unmeasured: a GPU held at its power limit
    # clocks down within the first hundreds of milliseconds of load, and the subjects measured first would otherwise
    # see a faster device than the rest (identical kernels were measured 13% apart on the H200 at 6144^3 without it).
    steady_state_s: float = 0.3
    condition_s: float = 0.05

    def __post_init__(self) -> None:
        for name in ("rounds", "repeat"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"kabi bench: {name} must be an integer >= 1, got {value!r}")
        for name in ("min_time_s", "steady_state_s", "condition_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                raise ValueError(f"kabi bench: {name} must be a number of seconds >= 0, got {value!r}")


@dataclass
class Subject:
    """One implementation timed on the problem: ``kind`` is ``"auto"``, ``"candidate"`` or ``"peer"``; ``scope``
    is entered around every measurement (kabi.use for a forced candidate, a library setting for a peer)."""

    name: str
    kind: str
    fn: Callable[[], Any]
    scope: Callable[[], ContextManager[Any]] = contextlib.nullcontext
    errors: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ModeTiming:
    """A subject's figure in one mode: the median of the rounds' medians, the rounds' medians, the fastest sample."""

    median_us: float
    round_medians_us: tuple[float, ...]
    min_us: float
    calls_per_sample: int


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def describe_error(error: BaseException) -> str:
    """One line naming the exception and its message, short enough for a table cell."""
    message = " ".join(str(error).split())
    text = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _round_order(subjects: Sequence[Subject], round_index: int, rounds: int) -> list[Subject]:
    """The subjects in the order of one round: rotated by an even share of the list each round, so that over the
    rounds every subject is timed early, midway and late in a round alike. (Rotating by one place per round left
    the last-listed subjects, the peers, at the end of every round of a problem with many candidates: on the H200
    the same cuBLAS call was then measured up to 11% apart as a peer and as kabi's candidate.)"""
    shift = (round_index * len(subjects)) // max(rounds, 1) if subjects else 0
    return [*subjects[shift:], *subjects[:shift]]


def _reach_steady_state(subjects: Sequence[Subject], device: torch.device, seconds: float) -> None:
    """Run the subjects in turn, unmeasured, for ``seconds`` (on a GPU only: a CPU has no power-limit ramp to wait
    out). A subject that raises is left to the measured rounds to report."""
    if device.type != "cuda" or seconds <= 0:
        return
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for subject in subjects:
            try:
                with subject.scope():
                    subject.fn()
            except Exception:
                continue
        synchronize(device)


def measure_interleaved(subjects: Sequence[Subject], modes: Sequence[str], device: torch.device,
                        settings: TimingSettings) -> dict[str, dict[str, ModeTiming]]:
    """Time every subject in every mode; returns ``{subject: {mode: timing}}``. A subject that raises in a mode
    gets the error in ``subject.errors[mode]`` instead of a timing there, and is not timed in that mode again."""
    results: dict[str, dict[str, list[Any]]] = {subject.name: {mode: [] for mode in modes} for subject in subjects}
    _reach_steady_state(subjects, device, settings.steady_state_s)
    for round_index in range(settings.rounds):
        for subject in _round_order(subjects, round_index, settings.rounds):
            for mode in modes:
                if mode in subject.errors:
                    continue
                try:
                    with subject.scope():
                        run_unmeasured(subject.fn, device, settings.condition_s)
                        timing = bench(subject.fn, warmup=2 if round_index == 0 else 1, repeat=settings.repeat,
                                       min_time_s=settings.min_time_s, device=device, **_MODE_ARGUMENTS[mode])
                except Exception as error:
                    subject.errors[mode] = describe_error(error)
                    continue
                results[subject.name][mode].append(timing)
    return {
        name: {
            mode: ModeTiming(
                median_us=statistics.median(timing.median_us for timing in timings),
                round_medians_us=tuple(timing.median_us for timing in timings),
                min_us=min(timing.min_us for timing in timings),
                calls_per_sample=timings[0].calls_per_sample,
            )
            for mode, timings in by_mode.items() if timings
        }
        for name, by_mode in results.items()
    }
