"""Measuring one problem's candidates: run each on fresh inputs, gate it against the reference, time the survivors.

A candidate that raises, returns the wrong shape or dtype, returns NaN/Inf where the reference is finite, is outside
the op's tolerance, or writes into its inputs gets ``time_us = inf`` and a note saying why; it can never win, and
nothing it does escapes as an exception. One that runs out of device memory gets the same with ``out_of_memory`` set:
that is the process's state at the moment (the tuner holds fresh inputs beside the caller's), not a fault of the
kernel, so the tuner keeps that rejection for this process only.

Most candidates of a large set are far from the fastest, and measuring them in full buys nothing. So the
survivors of the gate are first **screened**: each is timed for one round (as below, one sample), and only those
whose screened time is within ``settings.screen_margin`` of the fastest screen (the *finalists*) are measured in full.
A finalist whose rounds show it has clearly lost stops after three of them (``CUT_MARGIN``). A candidate cut by the
screen or the rounds keeps its time with ``screened`` set and a note saying so: the tuner persists it, so no later
process measures it again, but it never wins (``fastest`` and the core's selection skip it).

Timing is built to hold on a busy machine. The finalists are timed in ``settings.repeat`` short rounds; in each
round every candidate takes one sample (a :func:`kabi.bench` of ``SAMPLES_PER_ROUND`` calls' median), in an order
that changes from round to round (a fresh permutation), so a burst of load from elsewhere lands on every candidate
alike and no candidate always follows the same one. On a GPU each sample after a candidate's first is preceded by
an unmeasured run of its own calls (``CONDITION_CALLS`` of them, at most ``settings.condition_s``), so that it is
timed at the clock its own load holds rather than the one its predecessor left. A candidate's
time is the median of its rounds and its spread ``(slowest - fastest) / median`` over them. A spread above
``settings.max_spread`` is measured again, together with the other noisy candidates, up to
``REMEASUREMENTS`` times; a candidate still noisy after that is marked ``noisy``: the tuner keeps its record for
this process only, and later processes measure it again, unless it is a clear loser (:func:`settle_noisy`). On the
CPU a candidate whose samples got less than ``settings.min_cpu_share`` of their wall time as CPU time was starved by
other work (a load that slows every sample alike, so no spread shows it) and counts as noisy too.

Fixed costs per candidate are paid once: :class:`CandidateTimer` makes the inputs and the reference once, gates each
candidate once however often it is screened or timed, and in CUDA-graph mode captures each candidate's calls once
and replays that graph in every round.

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

import dataclasses
import math
import random
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch

from .._base.declarations import Tolerance
from ..ops import _stats
from .bench import CapturedCalls, bench, capture_calls, run_unmeasured
from .correctness import check_output, reference_output
from .tuning_policy import TuningSettings

__all__ = ["CUT_AFTER_ROUNDS", "CUT_MARGIN", "HOST_BOUND_US", "CandidateMeasurement", "CandidateTimer", "fastest",
           "gate_once", "measure_candidates", "select_finalists", "settle_noisy"]

# Notes travel into the tuning cache and into explain's 256-byte reason fields.
_MAX_NOTE_CHARS = 200
# Samples of one candidate in one round; their median is the round's value, so one preempted sample cannot move it.
SAMPLES_PER_ROUND = 3
# How many more times the noisy candidates of a problem are measured before they are kept as noisy.
REMEASUREMENTS = 2
# Before each sample on a GPU a candidate runs unmeasured for this many of its own calls (its last sample's time
# each), up to settings.condition_s: enough for the clock of a long call to settle, little for short ones.
CONDITION_CALLS = 16
# A problem whose fastest eager median is below this is host-bound enough that replaying it in a CUDA graph, which
# drops the per-call launch cost (several microseconds through Python, more for multi-kernel candidates), can change
# which candidate wins: on an H200 a Triton matmul measured fastest eagerly took 50.9 us under graph replay, where
# cuBLAS took 47.3 us. The tuner times such problems in graph mode too.
HOST_BOUND_US = 100.0
# A finalist stops being measured once it has clearly lost: after at least CUT_AFTER_ROUNDS rounds, its fastest round
# is more than CUT_MARGIN slower than the slowest round of another finalist, the rounds of both clean (within the noise
# bound, not starved). Their rounds then do not overlap at all, in rounds interleaved so that load from elsewhere falls
# on both alike: its median could still come out below the other's only if most of its remaining rounds beat what the
# other's rounds never did. Three rounds each is the fewest where a range says something (two equally fast
# candidates' rounds separate that fully 1 time in 20, and a faster one's, by the margin too, far more rarely); 5% is
# above the round-to-round drift of a GPU's clock (a few percent) and well below the screen's 25%, so that finalists
# one round cannot tell apart are still cut once their rounds do.
CUT_AFTER_ROUNDS = 3
CUT_MARGIN = 0.05


@dataclass(frozen=True)
class CandidateMeasurement:
    """One candidate's outcome: its median time over the timing rounds (inf when rejected), why it was rejected or
    why its time is not final ("" when it passed cleanly), each round's time, the relative spread of the rounds
    ((slowest - fastest) / median; 0 with fewer than two rounds), whether that spread stayed above the bound, and
    whether the time is a screened one (cut by the screen, or a noisy clear loser): then it passed the gate but
    never wins; and whether the candidate ran out of device memory (``out_of_memory``): a state of the process at
    that moment rather than a verdict on the kernel, so its rejection, like a noisy time, is kept for this process
    only."""

    kernel: str
    time_us: float
    note: str = ""
    rounds_us: tuple[float, ...] = ()
    spread: float = 0.0
    noisy: bool = False
    screened: bool = False
    out_of_memory: bool = False

    @property
    def for_this_process_only(self) -> bool:
        return self.noisy or self.out_of_memory

    @property
    def passed(self) -> bool:
        return math.isfinite(self.time_us)

    @property
    def contends(self) -> bool:
        """Whether its time may win: it passed and was measured in full."""
        return self.passed and not self.screened


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
    """Why ``fn`` fails the gate on ``inputs``, or None. Running out of device memory is no verdict: it propagates."""
    try:
        output = fn(*inputs)
        _synchronize(device)
        return check_output(output, expected, tolerance, expected_dtype)
    except torch.OutOfMemoryError:
        raise
    except Exception as error:
        return _describe_exception(error, "")


def _out_of_memory_note(error: torch.OutOfMemoryError, when: str) -> str:
    return f"{_describe_exception(error, when)}; kept for this process only"


def measure_candidates(
    candidates: Sequence[tuple[str, Callable[..., Any]]],
    make_inputs: Callable[[], list[Any]],
    reference: Callable[..., torch.Tensor],
    tolerance: Tolerance,
    settings: TuningSettings,
    *,
    expected_dtype: torch.dtype | None = None,
) -> list[CandidateMeasurement]:
    """Gate each ``(name, fn)`` in ``candidates`` on ``fn(*make_inputs())``, screen the survivors and time the
    finalists in full (see the module docstring and :class:`CandidateTimer`). Results keep the candidates' order."""
    timer = CandidateTimer(candidates, make_inputs, settings, reference=reference, tolerance=tolerance,
                           expected_dtype=expected_dtype)
    return timer.screen_and_measure([name for name, _ in candidates])


class CandidateTimer:
    """Gates, screens and times one problem's candidates on this process, paying each fixed cost once.

    ``reference`` and ``tolerance``: the op's reference (run in float64, once) and tolerance; each candidate is gated
    the first time it is screened or measured. Without a reference the candidates already passed the gate
    elsewhere and are only timed. ``make_inputs`` must return the same values on every call (the inputs are rebuilt
    after a candidate corrupts them). ``cuda_graph``: every sample replays the candidate's calls captured in a CUDA
    graph, captured once per candidate. ``rejected`` names candidates that cannot run at all (e.g. could not be
    prepared), with why: they fail whenever they are asked for.

    :meth:`screen` and :meth:`measure` are the two steps a distributed job shares out
    (:mod:`kabi._selection.distributed`); :meth:`screen_and_measure` is the whole flow on one process.
    """

    def __init__(self, candidates: Sequence[tuple[str, Callable[..., Any]]], make_inputs: Callable[[], list[Any]],
                 settings: TuningSettings, *, reference: Callable[..., torch.Tensor] | None = None,
                 tolerance: Tolerance | None = None, expected_dtype: Any = None, cuda_graph: bool = False,
                 rejected: Mapping[str, str] | None = None) -> None:
        if reference is not None and tolerance is None:
            raise ValueError("CandidateTimer: a reference needs its tolerance")
        self.settings = settings
        self._functions = dict(candidates)
        self._timing = _Timing(make_inputs, settings, cuda_graph)
        self._timing.notes.update(rejected or {})
        self._reference, self._tolerance, self._expected_dtype = reference, tolerance, expected_dtype
        self._expected: Any = None
        self._gated: set[str] = set() if reference is not None else set(self._functions)
        self.outcomes: dict[str, CandidateMeasurement] = {}
        """Each candidate's latest outcome on this process (its full measurement once it has one)."""

    def gate(self, names: Sequence[str]) -> dict[str, str | None]:
        """Each named candidate's gate verdict: None when it passed, else why it failed (gated once, when first
        asked)."""
        self._gate(names)
        return {name: self._timing.notes.get(name) for name in names}

    @contextmanager
    def _phase(self, counter: str):
        """Add the block's wall time to ``counter`` of kabi.stats(), or to its graph-mode one when this timer
        replays CUDA graphs."""
        start = time.perf_counter()
        try:
            yield
        finally:
            graph = self._timing.cuda_graph and counter != "tuning_gate_seconds"
            _stats.count("tuning_graph_seconds" if graph else counter, time.perf_counter() - start)

    def _gate(self, names: Sequence[str]) -> list[str]:
        """Gate the names not gated yet; the names that passed (in order)."""
        with self._phase("tuning_gate_seconds"):
            return self._gate_unmeasured(names)

    def _gate_unmeasured(self, names: Sequence[str]) -> list[str]:
        timing = self._timing
        for name in names:
            if name in self._gated or name in timing.notes:
                continue
            self._gated.add(name)
            if self._expected is None:
                self._expected = reference_output(self._reference, timing.inputs)
            try:
                note = _gate(self._functions[name], timing.inputs, self._expected, self._tolerance,
                             self._expected_dtype, timing.device)
            except torch.OutOfMemoryError as error:
                note = _out_of_memory_note(error, " while being gated")
                timing.out_of_memory.add(name)
            if not timing.inputs_unchanged():
                note = "wrote into its inputs" + (f"; {note}" if note else "")
                timing.rebuild_inputs()
            if note is not None:
                timing.notes[name] = note
        return [name for name in names if name not in timing.notes]

    def screen(self, names: Sequence[str]) -> list[CandidateMeasurement]:
        """Gate the named candidates, and time those that pass for one round: screened results (``screened`` set;
        inf and a note for a candidate that failed)."""
        passing = self._gate(names)
        with self._phase("tuning_screen_seconds"):
            rounds = self._timing.interleaved_rounds([(name, self._functions[name]) for name in passing],
                                                     self.settings.warmup, repeat=1)
        results = [dataclasses.replace(self._timing.result(name, rounds.get(name)), screened=True)
                   if name in rounds else self._timing.result(name, None) for name in names]
        self.outcomes.update((result.kernel, result) for result in results)
        return results

    def measure(self, names: Sequence[str], *, cut_clear_losers: bool = True) -> list[CandidateMeasurement]:
        """Gate the named candidates and time those that pass in full: ``settings.repeat`` interleaved rounds, the
        noisy ones measured again. With ``cut_clear_losers`` (and a screen: ``screen_margin`` finite), a candidate
        that has clearly lost stops early (``CUT_MARGIN``) and keeps its time as a screened one."""
        passing = self._gate(names)
        timed = [(name, self._functions[name]) for name in passing]
        cut = cut_clear_losers and not math.isinf(self.settings.screen_margin)
        with self._phase("tuning_measure_seconds"):
            results = _timed_results(self._timing, names, timed, cut)
        self.outcomes.update((result.kernel, result) for result in results)
        return results

    def screen_and_measure(self, names: Sequence[str]) -> list[CandidateMeasurement]:
        """Gate, screen, and measure the finalists in full; the others keep their screened time (see the module
        docstring). With fewer than two survivors or ``screen_margin`` inf there is nothing to screen."""
        passing = self._gate(names)
        if len(passing) < 2 or math.isinf(self.settings.screen_margin):
            return self.measure(names)
        finalists, cut = select_finalists(self.screen(passing), self.settings.screen_margin)
        measured = {result.kernel: result for result in self.measure(finalists)}
        return [measured.get(name) or cut.get(name) or self._timing.result(name, None) for name in names]


def select_finalists(screens: Sequence[CandidateMeasurement], margin: float,
                     ) -> tuple[list[str], dict[str, CandidateMeasurement]]:
    """The names of the screened candidates within ``margin`` of the fastest screen (in order), and the others,
    passing ones cut with a note saying why (failed ones as they are). A candidate whose screen was starved of CPU
    time (noisy) is a finalist whatever its time: its screen says nothing."""
    passing = [result for result in screens if result.passed]
    best = min((result.time_us for result in passing), default=math.inf)
    finalists = [result.kernel for result in passing if result.time_us <= best * (1 + margin) or result.noisy]
    cut = {result.kernel: result if not result.passed else dataclasses.replace(
               result, screened=True,
               note=f"screened out: {result.time_us:.2f} us in the screen, more than {margin:.0%} behind the "
                    f"fastest ({best:.2f} us)")
           for result in screens if result.kernel not in finalists}
    return finalists, cut


def settle_noisy(results: Sequence[CandidateMeasurement], margin: float) -> list[CandidateMeasurement]:
    """Persist the noisy measurements that cannot matter: a noisy candidate whose fastest round is still more than
    ``margin`` (the tuner passes the noise bound, ``max_spread``) behind a clean pick lost however its noise fell,
    so it becomes a screened (persisted, never winning) result instead of a memory-only one that would make the next
    process measure the problem again. A noisy pick, or a noisy candidate that might beat it, stays noisy."""
    pick = fastest(results)
    if pick is None or pick.noisy:
        return list(results)
    bound = pick.time_us * (1 + margin)

    def fastest_round(result: CandidateMeasurement) -> float:
        # Agreed results carry no rounds; a median less its spread bounds their fastest round from below.
        return min(result.rounds_us) if result.rounds_us else result.time_us * (1 - result.spread)

    return [dataclasses.replace(result, noisy=False, screened=True,
                                note=f"{result.note.split(';')[0]}; even its fastest round is more than {margin:.0%} "
                                     f"behind the pick: kept as a screened time")
            if result.noisy and result.contends and fastest_round(result) > bound else result
            for result in results]


def _timed_results(timing: _Timing, names: Sequence[str], timed: Sequence[tuple[str, Callable[..., Any]]],
                   cut_clear_losers: bool) -> list[CandidateMeasurement]:
    rounds = timing.interleaved_rounds(timed, timing.settings.warmup, cut_clear_losers=cut_clear_losers)
    timing.attempts = 1
    for _ in range(REMEASUREMENTS):
        noisy = [(name, fn) for name, fn in timed
                 if name in rounds and not rounds[name].cut and timing.is_noisy(rounds[name])]
        if not noisy:
            break
        timing.attempts += 1
        for name, again in timing.interleaved_rounds(noisy, 1).items():
            if timing.noise_rank(again) < timing.noise_rank(rounds[name]):
                rounds[name] = again
    return [timing.result(name, rounds.get(name)) for name in names]


def _spread(rounds_us: Sequence[float]) -> float:
    if len(rounds_us) < 2:
        return 0.0
    median = statistics.median(rounds_us)
    return (max(rounds_us) - min(rounds_us)) / median if median > 0 else 0.0


@dataclass
class _Rounds:
    """One measurement of one candidate: each round's time, the CPU share of each round's sample (CPU only), and
    why it stopped before the last round (``cut``: it had clearly lost; "" when it ran them all)."""

    times_us: list[float] = field(default_factory=list)
    cpu_shares: list[float] = field(default_factory=list)
    cut: str = ""

    @property
    def cpu_share(self) -> float | None:
        return statistics.median(self.cpu_shares) if self.cpu_shares else None


class _Timing:
    """The tuning inputs of one problem, the notes of the candidates rejected so far, the CUDA graphs captured so
    far, and the interleaved rounds."""

    def __init__(self, make_inputs: Callable[[], list[Any]], settings: TuningSettings, cuda_graph: bool = False) -> None:
        self.make_inputs, self.settings, self.cuda_graph = make_inputs, settings, cuda_graph
        self.inputs = make_inputs()
        self.snapshots = [item.clone() if isinstance(item, torch.Tensor) else item for item in self.inputs]
        self.device = next((item.device for item in self.inputs if isinstance(item, torch.Tensor)), torch.device("cpu"))
        self.notes: dict[str, str] = {}
        self.out_of_memory: set[str] = set()
        """The candidates that ran out of device memory (their notes say so)."""
        self.captured: dict[str, CapturedCalls] = {}
        self.call_us: dict[str, float] = {}
        """Each candidate's time per call in its latest sample: how long its conditioning runs."""
        self.attempts = 0

    def inputs_unchanged(self) -> bool:
        return _unchanged(self.inputs, self.snapshots)

    def rebuild_inputs(self) -> None:
        self.inputs = self.make_inputs()
        self.captured.clear()  # the graphs read the old inputs' memory

    def is_noisy(self, rounds: _Rounds) -> bool:
        return _spread(rounds.times_us) > self.settings.max_spread or self.is_starved(rounds)

    def noise_rank(self, rounds: _Rounds) -> tuple[bool, float]:
        """Lower is cleaner: a measurement that is not noisy, then the smaller spread."""
        return self.is_noisy(rounds), _spread(rounds.times_us)

    def is_starved(self, rounds: _Rounds) -> bool:
        share = rounds.cpu_share
        return share is not None and share < self.settings.min_cpu_share

    def _sample(self, name: str, fn: Callable[..., Any], warmup: int) -> Any:
        """One round's sample of one candidate: a :func:`kabi.bench` of ``SAMPLES_PER_ROUND`` calls (or batches), or
        as many replays of its CUDA graph, captured on its first sample. From its second sample on, a GPU candidate
        first runs unmeasured (see ``CONDITION_CALLS``)."""
        budget_s = self.settings.min_time_s / self.settings.repeat

        def call() -> Any:
            return fn(*self.inputs)

        if name in self.call_us:
            conditioning_s = min(self.settings.condition_s, CONDITION_CALLS * self.call_us[name] / 1e6)
            run_unmeasured(call, self.device, conditioning_s)
        if not self.cuda_graph:
            sample = bench(call, warmup=warmup, repeat=SAMPLES_PER_ROUND, min_time_s=budget_s, device=self.device)
        else:
            captured = self.captured.get(name)
            if captured is None:
                for _ in range(warmup):
                    call()
                captured = capture_calls(call, self.device, repeat=SAMPLES_PER_ROUND, min_time_s=budget_s)
                self.captured[name] = captured
            sample = captured.time(SAMPLES_PER_ROUND)
        self.call_us[name] = sample.median_us
        return sample

    def interleaved_rounds(self, candidates: Sequence[tuple[str, Callable[..., Any]]], warmup: int,
                           repeat: int | None = None, cut_clear_losers: bool = False) -> dict[str, _Rounds]:
        """Each candidate's round times: ``repeat`` (default ``settings.repeat``) rounds of one sample per
        candidate, in a fresh order each round. A candidate that raises or writes into its inputs is noted and
        leaves the rounds; with ``cut_clear_losers``, so does one that has clearly lost while rounds remain
        (:meth:`_cut_clear_losers`)."""
        repeat = self.settings.repeat if repeat is None else repeat
        rounds: dict[str, _Rounds] = {name: _Rounds() for name, _ in candidates}
        for round_index in range(repeat):
            if cut_clear_losers and round_index >= CUT_AFTER_ROUNDS:
                self._cut_clear_losers(rounds)
            active = [(name, fn) for name, fn in candidates if name not in self.notes and not rounds[name].cut]
            for name, fn in _round_order(active, round_index):
                try:
                    sample = self._sample(name, fn, warmup if round_index == 0 else 1)
                except torch.OutOfMemoryError as error:
                    self.notes[name] = _out_of_memory_note(error, " while being timed")
                    self.out_of_memory.add(name)
                    continue
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

    def _cut_clear_losers(self, rounds: dict[str, _Rounds]) -> None:
        """Cut the candidates whose fastest round is more than ``CUT_MARGIN`` slower than the slowest round of the
        leader, the candidate whose slowest round is the fastest: they have clearly lost, and more rounds would buy
        nothing. Only clean rounds (within the noise bound, not starved) are compared, on either side: a noisy
        candidate is left to the re-measurements and :func:`settle_noisy`, and a starved one's every round may be
        slow."""
        clean = {name: measured for name, measured in rounds.items()
                 if name not in self.notes and not measured.cut and measured.times_us and not self.is_noisy(measured)}
        if not clean:
            return
        leader = min(clean, key=lambda name: max(clean[name].times_us))
        bound = max(clean[leader].times_us)
        for measured in clean.values():
            fastest_round = min(measured.times_us)
            if fastest_round > bound * (1 + CUT_MARGIN):
                _stats.count("candidates_cut")
                measured.cut = (f"cut after {len(measured.times_us)} rounds: its fastest round ({fastest_round:.2f} "
                                f"us) is more than {CUT_MARGIN:.0%} behind the slowest of {leader} ({bound:.2f} us)")

    def result(self, name: str, rounds: _Rounds | None) -> CandidateMeasurement:
        if name in self.notes:
            return CandidateMeasurement(name, math.inf, self.notes[name], out_of_memory=name in self.out_of_memory)
        spread = _spread(rounds.times_us)
        if rounds.cut:
            return CandidateMeasurement(name, statistics.median(rounds.times_us), rounds.cut, tuple(rounds.times_us),
                                        spread, screened=True)
        note = ""
        if spread > self.settings.max_spread:
            note = (f"noisy: spread {spread:.0%} > {self.settings.max_spread:.0%} in each of {self.attempts} "
                    f"measurements; kept for this process only")
        elif self.is_starved(rounds):
            note = (f"starved: the process had {rounds.cpu_share:.0%} of a core while timed (a busy machine), "
                    f"under {self.settings.min_cpu_share:.0%}; kept for this process only")
        return CandidateMeasurement(name, statistics.median(rounds.times_us), note, tuple(rounds.times_us), spread,
                                    bool(note))


def _round_order(items: Sequence[Any], round_index: int) -> list[Any]:
    """The candidates' order in one round: a fresh permutation each round (seeded by the round, so runs repeat).
    Rotating one fixed order keeps every candidate behind the same predecessor, and a power-limited GPU's clock
    follows the last milliseconds of load: a candidate always timed after a lighter one looked faster in every round
    (on the H200, auto/oracle fell to 0.93 on bf16 squares). New predecessors each round spread that effect over the
    rounds, whose median the time is."""
    order = list(items)
    random.Random(round_index).shuffle(order)
    return order


def fastest(results: Sequence[CandidateMeasurement]) -> CandidateMeasurement | None:
    """The candidate measured in full (passed, not screened) with the least time (the earliest on a tie), or None
    when there is none."""
    contenders = [result for result in results if result.contends]
    return min(contenders, key=lambda result: result.time_us) if contenders else None


def gate_once(
    fn: Callable[..., Any],
    make_inputs: Callable[[], list[Any]],
    reference: Callable[..., torch.Tensor],
    tolerance: Tolerance,
    *,
    expected_dtype: torch.dtype | None = None,
) -> str | None:
    """The correctness gate alone: one untimed run of ``fn`` on ``make_inputs()``, checked as
    :func:`measure_candidates` checks it. Returns why it failed, or None when it passed; running out of device memory
    raises ``torch.OutOfMemoryError``, which is no verdict."""
    inputs = make_inputs()
    snapshots = [item.clone() if isinstance(item, torch.Tensor) else item for item in inputs]
    device = next((item.device for item in inputs if isinstance(item, torch.Tensor)), torch.device("cpu"))
    note = _gate(fn, inputs, reference_output(reference, inputs), tolerance, expected_dtype, device)
    if not _unchanged(inputs, snapshots):
        note = "wrote into its inputs" + (f"; {note}" if note else "")
    return note
