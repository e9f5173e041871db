"""Measuring one problem's candidates: run each on fresh inputs, gate it against the reference, time the survivors.

A candidate that raises, returns the wrong shape or dtype, returns NaN/Inf where the reference is finite, is outside
the op's tolerance, or writes into its inputs gets ``time_us = inf`` and a note saying why; it can never win, and
nothing it does escapes as an exception.

Example::

    >>> import torch
    >>> from kabi._registry import Tolerance
    >>> from kabi._tuning_policy import TuningSettings
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
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from ._bench import BenchResult, bench
from ._correctness import check_output, reference_output
from ._registry import Tolerance
from ._tuning_policy import TuningSettings

__all__ = ["CandidateMeasurement", "fastest", "gate_once", "measure_candidates"]

# Notes travel into the tuning cache and into explain's 256-byte reason fields.
_MAX_NOTE_CHARS = 200
# Interleaved timing rounds per candidate; see measure_candidates.
TIMING_ROUNDS = 3


@dataclass(frozen=True)
class CandidateMeasurement:
    """One candidate's outcome: its median time (inf when rejected) and why it was rejected ("" when it passed)."""

    kernel: str
    time_us: float
    note: str = ""
    bench: BenchResult | None = None

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

    Candidates that pass the gate are timed in ``TIMING_ROUNDS`` interleaved rounds (the order rotating each
    round), each round a :func:`kabi.bench` with ``settings.repeat`` samples and a share of
    ``settings.min_time_s``; a candidate's time is its least round median. A burst of load from elsewhere then
    slows one round of every candidate alike instead of all of one candidate's samples.

    ``make_inputs`` must return the same values on every call (the tuning inputs are rebuilt after a candidate
    corrupts them). ``reference`` is the op's reference, run in float64. Results keep the candidates' order.
    """
    inputs = make_inputs()
    snapshots = [item.clone() if isinstance(item, torch.Tensor) else item for item in inputs]
    device = next((item.device for item in inputs if isinstance(item, torch.Tensor)), torch.device("cpu"))
    expected = reference_output(reference, inputs)
    notes: dict[str, str] = {}
    for name, fn in candidates:
        note = _gate(fn, inputs, expected, tolerance, expected_dtype, device)
        if not _unchanged(inputs, snapshots):
            note = "wrote into its inputs" + (f"; {note}" if note else "")
            inputs = make_inputs()
        if note is not None:
            notes[name] = note
    timed = [(name, fn) for name, fn in candidates if name not in notes]
    best: dict[str, BenchResult] = {}
    for round_index in range(TIMING_ROUNDS):
        shift = round_index % max(len(timed), 1)
        for name, fn in timed[shift:] + timed[:shift]:
            if name in notes:
                continue
            try:
                timing = bench(
                    lambda: fn(*inputs),
                    warmup=settings.warmup if round_index == 0 else 1,
                    repeat=settings.repeat,
                    min_time_s=settings.min_time_s / TIMING_ROUNDS,
                    device=device,
                )
            except Exception as error:
                notes[name] = _describe_exception(error, " while being timed")
                continue
            if not _unchanged(inputs, snapshots):
                notes[name] = "wrote into its inputs while being timed"
                inputs = make_inputs()
                continue
            if name not in best or timing.median_us < best[name].median_us:
                best[name] = timing
    return [
        CandidateMeasurement(name, math.inf, notes[name]) if name in notes
        else CandidateMeasurement(name, best[name].median_us, "", best[name])
        for name, _ in candidates
    ]


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
