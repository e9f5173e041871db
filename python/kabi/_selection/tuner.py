"""The tuner: on a decision miss, measure every eligible candidate, record the results, let the core pick.

The op front (:mod:`kabi.ops._front`) calls :func:`on_selection_miss` when a call's problem has no cached decision
(kabi's bootstrap installs it as the fronts' miss handler). Unless the selection was forced or is already tuned, and
if the policy (:mod:`kabi._selection.tuning_policy`) allows, the tuner

1. makes fresh inputs shaped like the caller's (never touching the caller's tensors),
2. gates every eligible candidate against the op's float64 reference, screens those that pass and times the
   finalists in full, through the same implementation callable the front would cache for the caller
   (:mod:`kabi._selection.measure`); for a call
   selected for CUDA-graph replay (``kabi.tuning(mode="graph")``) or a host-bound problem (fastest eager median
   under ``measure.HOST_BOUND_US``) on a CUDA device, it also times the survivors replayed in a CUDA graph, and
   records those times as graph-mode records beside the eager ones,
3. in a distributed job, agrees with the other ranks on the times (:mod:`kabi._selection.distributed`),
4. records every result with ``kabi_tuning_store`` (failures as inf with a note, screened-out candidates flagged)
   and selects again, so the tuned pick is used now, in this process and in every later one.

A problem whose records are complete but for some kernels (a noisy record an earlier process kept to itself, a new
kernel) measures only those and the recorded pick (:func:`kernels_to_measure`).

Whatever the policy, the pick it returns has then passed the correctness gate on the problem: a pick without a
verdict (tuning off, forced, tracing) is gated once first (:mod:`kabi._selection.gate`). In a distributed job, tuning is
agreed among the ranks as before, while that gate runs on each rank on its own.

The last report per problem is kept for ``kabi.explain``, which shows why candidates were rejected.

Example::

    >>> report = kabi.tune(kabi.ops.matmul, torch.empty(256, 256), torch.empty(256, 256))  # doctest: +SKIP
    >>> print(report)                                                                       # doctest: +SKIP
    matmul float32|CC|1|256|256|256 on cpu: pick cpu.openblas.gemm (measured, tuned in 0.21 s)
      * cpu.openblas.gemm      612.40 us
        torch.matmul.cpu       655.10 us
"""

from __future__ import annotations

import collections
import dataclasses
import math
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from .. import _core
from .._base.errors import InvalidArgumentError, NoEligibleKernelError
from ..ops import _stats
from ..ops._front import OpFront, Selection, front_of
from ..ops._inputs import inputs_like
from . import distributed as _distributed
from .gate import bound_reference, gate_until_verified, inside_measurement, measurement_lock
from .measure import HOST_BOUND_US, CandidateMeasurement, CandidateTimer, fastest, settle_noisy
from .tuning_policy import TuningSettings, current_settings, tuning_blocked_reason

__all__ = ["MEASUREMENT_MODES", "TuningReport", "kernels_to_measure", "last_report", "on_selection_miss", "tune"]

# What `kabi tune --mode` measures: "eager" times only, "graph" times replayed in a CUDA graph only (the candidates
# are gated eagerly, and a kernel without a verdict gets one), "both".
MEASUREMENT_MODES = {"eager": ("eager",), "graph": ("graph",), "both": ("eager", "graph")}

# Problems whose last tuning report explain can show; the oldest are dropped first.
_REPORTS_KEPT = 512
_reports: collections.OrderedDict[tuple[str, str, str], TuningReport] = collections.OrderedDict()
_reports_lock = threading.Lock()
# Problems whose tuning ran out of device memory in this process (_give_up_out_of_memory); set.add is atomic.
_out_of_memory_problems: set[tuple] = set()


@dataclass(frozen=True)
class TuningReport:
    """One tuning run: every candidate's time or rejection note, the pick, what it cost and how it was agreed; and
    the times replayed in a CUDA graph, with the pick by them, when the run took them."""

    op: str
    problem: str
    device: str
    measurements: tuple[CandidateMeasurement, ...]
    pick: str | None
    seconds: float
    source: str
    graph_measurements: tuple[CandidateMeasurement, ...] = ()
    graph_pick: str | None = None

    def measurement(self, kernel: str) -> CandidateMeasurement | None:
        """The result of one candidate, or None if it was not measured."""
        return next((item for item in self.measurements if item.kernel == kernel), None)

    def __str__(self) -> str:
        width = max((len(item.kernel) for item in self.measurements), default=6)
        lines = [f"{self.op} {self.problem} on {self.device}: pick {self.pick or 'none'} "
                 f"({self.source}, tuned in {self.seconds:.3f} s)"]
        for item in self.measurements:
            outcome = (f"{item.time_us:12.2f} us  spread {item.spread:4.0%}" + (f"  {item.note}" if item.note else "")
                       if item.passed else f"rejected: {item.note}")
            lines.append(f"  {'*' if item.kernel == self.pick else ' '} {item.kernel:<{width}} {outcome}")
        if self.graph_measurements:
            lines.append(f"  replayed in a CUDA graph: pick {self.graph_pick or 'none'}")
            for item in self.graph_measurements:
                outcome = (f"{item.time_us:12.2f} us  spread {item.spread:4.0%}" + (f"  {item.note}" if item.note else "")
                           if item.passed else f"failed: {item.note}")
                lines.append(f"  {'*' if item.kernel == self.graph_pick else ' '} {item.kernel:<{width}} {outcome}")
        return "\n".join(lines)


def last_report(op: str, device: str, problem: str) -> TuningReport | None:
    """This process's last tuning report for a problem (``problem`` is the core's tuning key), or None."""
    with _reports_lock:
        return _reports.get((op, device, problem))


def _remember(report: TuningReport) -> TuningReport:
    key = (report.op, report.device, report.problem)
    with _reports_lock:
        _reports[key] = report
        _reports.move_to_end(key)
        while len(_reports) > _REPORTS_KEPT:
            _reports.popitem(last=False)
    return report


def _cuda_graph_timer(candidates: Sequence[tuple[str, Any]], make_inputs: Any, settings: TuningSettings,
                      device: torch.device, **gate: Any) -> CandidateTimer | None:
    """A timer of ``candidates`` replayed in a CUDA graph (gating them first when ``gate`` gives the reference,
    tolerance and expected dtype); None where no graph can be captured (not a CUDA device). Tests replace it, since
    this machine-independent logic cannot capture on a CPU."""
    if device.type != "cuda":
        return None
    return CandidateTimer(candidates, make_inputs, settings, cuda_graph=True, **gate)


def _wants_graph_times(selection: Selection, eager: Sequence[CandidateMeasurement]) -> bool:
    """Whether a miss's tuning also times in a CUDA graph: the call is selected for graph replay, or the problem is
    host-bound, where the graph's missing launch cost can change the winner."""
    best = fastest(eager)
    return selection.execution_mode == "graph" or (best is not None and best.time_us < HOST_BOUND_US)


@dataclass(frozen=True)
class _Prepared:
    """One problem's candidates ready to measure: each implementation as the front would cache it for the caller
    (``unavailable``: those that could not be prepared, as failures), a maker of fresh inputs like the caller's, the
    gate's terms, and the device."""

    candidates: tuple[tuple[str, Any], ...]
    unavailable: dict[str, str]
    make_inputs: Any
    gate: dict[str, Any]
    device: torch.device


def _prepare(front: OpFront, inputs: Sequence[torch.Tensor], selection: Selection, kernels: Sequence[str]) -> _Prepared:
    problem = selection.problem
    by_name = {candidate.name: candidate for candidate in selection.candidates}
    make_inputs = lambda: inputs_like(front.spec, inputs, front.attribute_map(selection.attributes))
    template = tuple(make_inputs())
    candidates, unavailable = [], {}
    for name in kernels:
        try:
            implementation = front.implementation(dataclasses.replace(selection, kernel=by_name[name].kernel), template)
            candidates.append((name, implementation))
        except torch.OutOfMemoryError:
            raise
        except Exception as error:
            unavailable[name] = f"cannot be prepared: {type(error).__name__}: {error}"
    gate = {"reference": bound_reference(front, selection), "tolerance": front.spec.tolerance[problem.dtype],
            "expected_dtype": front.output_dtypes(problem)}
    device = next(tensor.device for tensor in template if tensor is not None)
    return _Prepared(tuple(candidates), unavailable, make_inputs, gate, device)


def _measure(front: OpFront, inputs: Sequence[torch.Tensor], selection: Selection, kernels: Sequence[str],
             settings: TuningSettings, modes: Sequence[str] | None = None,
             ) -> tuple[list[CandidateMeasurement], list[CandidateMeasurement]]:
    """Gate, screen and time ``kernels`` on fresh inputs like ``inputs``, each through the implementation the front
    would cache for the caller: the eager measurements, and those replayed in a CUDA graph. ``modes`` names what to
    time (see ``MEASUREMENT_MODES``); None: eager, and graph where :func:`_wants_graph_times`. Without eager timing
    the eager measurements are gate verdicts (time 0 for a pass).

    The graph times are screened among every candidate that passed the gate, not only among the eager finalists: an
    eager time bounds a graph time from above only (a graph drops the launch cost, which can be most of a small
    problem's eager time), so a candidate the eager screen cut may still be the fastest replayed."""
    prepared = _prepare(front, inputs, selection, kernels)
    token = inside_measurement.set(True)
    try:
        timer = CandidateTimer(prepared.candidates, prepared.make_inputs, settings, rejected=prepared.unavailable,
                               **prepared.gate)
        if modes is None or "eager" in modes:
            eager = timer.screen_and_measure(kernels)
        else:
            eager = [CandidateMeasurement(name, 0.0) if note is None else CandidateMeasurement(name, math.inf, note)
                     for name, note in timer.gate(kernels).items()]
        results = {item.kernel: item for item in eager}
        graph: list[CandidateMeasurement] = []
        if (modes is None and _wants_graph_times(selection, eager)) or (modes is not None and "graph" in modes):
            survivors = [(name, fn) for name, fn in prepared.candidates if results[name].passed]
            graph_timer = _cuda_graph_timer(survivors, prepared.make_inputs, settings, prepared.device)
            if graph_timer is not None and survivors:
                graph = graph_timer.screen_and_measure([name for name, _ in survivors])
    finally:
        inside_measurement.reset(token)
    return eager, graph


def _flags(item: CandidateMeasurement, mode_flag: int) -> int:
    return (mode_flag | (_core.TUNING_RECORD_MEMORY_ONLY if item.for_this_process_only else 0)
            | (_core.TUNING_RECORD_SCREENED if item.screened and item.passed else 0))


def _record(front: OpFront, inputs: Sequence[torch.Tensor], selection: Selection,
            measurements: Sequence[CandidateMeasurement], seconds: float, source: str, settings: TuningSettings,
            graph_measurements: Sequence[CandidateMeasurement] = (), eager_timed: bool = True) -> TuningReport:
    """Store every measurement (a noisy one that might matter for this process only, :func:`measure.settle_noisy`),
    the screened and graph-mode ones flagged as such, and remember the report for explain. Without ``eager_timed``
    the eager measurements are gate verdicts, stored only for kernels that had none."""
    descriptors = front.input_descriptors(tuple(inputs))
    graph_measurements = settle_noisy(graph_measurements, settings.max_spread)
    if eager_timed:
        measurements = settle_noisy(measurements, settings.max_spread)
        eager_records = [(item.kernel, item.time_us, item.note, _flags(item, 0), item.spread) for item in measurements]
    else:
        unjudged = {candidate.name for candidate in selection.candidates if candidate.gate == "none"}
        eager_records = [
            (item.kernel, 0.0, "", _core.TUNING_RECORD_GATE_ONLY, 0.0) if item.passed
            else (item.kernel, item.time_us, item.note, _flags(item, 0), 0.0)
            for item in measurements if item.kernel in unjudged or not item.passed
        ]
    graph_records = [(item.kernel, item.time_us, item.note, _flags(item, _core.TUNING_RECORD_GRAPH_MODE), item.spread)
                     for item in graph_measurements]
    _core.tuning_store(front.name, descriptors, [], eager_records + graph_records, selection.attributes)
    pick = fastest(measurements) if eager_timed else None
    graph_pick = fastest(graph_measurements)
    problem = selection.problem
    return _remember(TuningReport(front.name, problem.key, problem.device, tuple(measurements),
                                  pick.kernel if pick is not None else None, seconds, source,
                                  tuple(graph_measurements), graph_pick.kernel if graph_pick is not None else None))


def _count(measurements: Sequence[CandidateMeasurement], seconds: float) -> None:
    _stats.count("tuning_runs")
    _stats.count("candidates_benchmarked", sum(item.passed for item in measurements))
    _stats.count("candidates_screened_out", sum(item.passed and item.screened for item in measurements))
    _stats.count("gate_failures", sum(not item.passed for item in measurements))
    _stats.count("tuning_seconds", seconds)


def _measure_and_record(front, inputs, selection, kernels, settings, source="measured", modes=None) -> TuningReport:
    start = time.perf_counter()
    measurements, graph_measurements = _measure(front, inputs, selection, kernels, settings, modes)
    seconds = time.perf_counter() - start
    _count(measurements, seconds)
    return _record(front, inputs, selection, measurements, seconds, source, settings, graph_measurements,
                   eager_timed=modes is None or "eager" in modes)


def tune(op: Any, *arguments: Any, settings: TuningSettings | None = None, mode: str | None = None,
         **keywords: Any) -> TuningReport:
    """Measure every eligible kernel of ``op`` now on a problem like the call ``op(*arguments, **keywords)`` (only
    the tensors' shapes, strides, dtypes and devices are used, and the attributes' values), whatever the cache
    holds, and record the results. This is ``kabi tune``. ``mode`` is a key of ``MEASUREMENT_MODES``
    (``"eager"``, ``"graph"``, ``"both"``); None measures as a miss of such a call would (eager, and in a CUDA
    graph for a graph scope or a host-bound problem). An op attribute named ``settings`` or ``mode`` cannot be
    passed here: those keywords are this function's.

    Example::

        report = kabi.tune(kabi.ops.matmul, torch.empty(64, 32), torch.empty(32, 16))
        report.pick  # e.g. "cpu.openblas.gemm"
    """
    front = front_of(op)
    if mode is not None and mode not in MEASUREMENT_MODES:
        raise InvalidArgumentError(f"tune: mode must be one of {', '.join(MEASUREMENT_MODES)}, got {mode!r}")
    inputs, attributes, _ = front.bind(arguments, keywords)
    with measurement_lock:
        selection = front.select(inputs, allow_none=True, attributes=attributes)
        kernels = [candidate.name for candidate in selection.candidates if candidate.eligible]
        if selection.kernel is None or not kernels:
            raise NoEligibleKernelError(f"tune: nothing to measure: {selection.error}")
        return _measure_and_record(front, inputs, selection, kernels,
                                   settings if settings is not None else current_settings(),
                                   modes=MEASUREMENT_MODES[mode] if mode is not None else None)


def _remembered(eligible: Sequence[Any]) -> tuple[tuple[str, float, str, bool], ...] | None:
    if any(candidate.tuned_time_us is None for candidate in eligible):
        return None
    return tuple((candidate.name, candidate.tuned_time_us,
                  "" if math.isfinite(candidate.tuned_time_us) else "failed when it was tuned",
                  candidate.tuned_screened)
                 for candidate in eligible)


def on_selection_miss(front: OpFront, inputs: tuple, out: torch.Tensor | None, selection: Selection) -> Selection | None:
    """The front's miss hook: tune the problem if it should be, make sure the pick has passed the correctness gate
    on it, and return the selection to use instead (None keeps the front's). See the module docstring."""
    if selection.kernel is None or inside_measurement.get():
        return None
    tuned = None if selection.pick_reason == "forced" else _tune(front, inputs, out, selection)
    current = tuned if tuned is not None else selection
    verified = gate_until_verified(front, inputs, out, current)
    return verified if verified is not current else tuned


def _tune(front: OpFront, inputs: tuple, out: torch.Tensor | None, selection: Selection) -> Selection | None:
    """Measure the problem if the policy allows and it is not tuned yet; the new selection, or None."""
    eligible = [candidate for candidate in selection.candidates if candidate.eligible]
    settings = current_settings()
    blocked = tuning_blocked_reason(inputs, settings)
    # No collectives while tracing or capturing: the remembered or heuristic pick stands there.
    tracing = blocked is not None and settings.mode != "off"
    if _distributed.agreement_active() and not tracing:
        return _agree(front, inputs, out, selection, eligible, settings, blocked)
    if not _needs_measuring(selection, inputs):
        return None  # tuned, or every candidate failed when it was: measuring again would not change that
    if blocked is not None:
        _stats.count("tuning_skipped")
        return None
    if _problem_identity(front, selection) in _out_of_memory_problems:
        return None
    mode = selection.execution_mode
    with measurement_lock:
        attributes = selection.attributes
        # Another thread may have tuned the problem while this one waited for the lock.
        again = selection if front.is_current(selection) else front.select(
            inputs, out, execution_mode=mode, attributes=attributes)
        if _needs_measuring(again, inputs):
            kernels, losers = kernels_to_measure(again, inputs)
            try:
                _measure_and_record(front, inputs, selection, kernels, settings,
                                    "measured" if not losers else "measured the unrecorded and the recorded pick")
            except torch.OutOfMemoryError as error:
                _give_up_out_of_memory(front, selection, error)
                return None
            _demote(front, inputs, again, losers)
            again = front.select(inputs, out, execution_mode=mode, attributes=attributes)
    return again


def _problem_identity(front: OpFront, selection: Selection) -> tuple:
    problem = selection.problem
    return front.name, problem.device, problem.dtype, problem.key, selection.attributes


def _give_up_out_of_memory(front: OpFront, selection: Selection, error: torch.OutOfMemoryError) -> None:
    """Tuning a problem needs fresh inputs beside the caller's, and the reference's output: where the device has no
    room for them, the call goes on with the untuned pick, and this process does not try the problem again (each
    call would otherwise allocate until it fails). Nothing is recorded: another process may have the memory."""
    _out_of_memory_problems.add(_problem_identity(front, selection))
    problem = selection.problem
    message = " ".join(str(error).split())[:300]
    warnings.warn(f"kabi: tuning {front.name} on {problem.dtype} {problem.key} on {problem.device} ran out of device "
                  f"memory ({message}); this process uses the untuned pick for it. With more memory free, "
                  f"kabi.tune(kabi.ops.{front.name}, ...) measures it.", RuntimeWarning, stacklevel=2)


def kernels_to_measure(selection: Selection, inputs: tuple) -> tuple[list[str], list[Any]]:
    """Which eligible kernels a miss must measure, and which recorded ones then lose their final time.

    Usually all of them. But when the problem's records are complete except for some kernels (a noisy measurement
    kept in the last process only, or a kernel new since), only those kernels and the recorded pick are measured,
    interleaved: every other recorded kernel lost to that pick when they were measured together, which the new
    measurement cannot change. Those losers keep their time as a screened one (:func:`_demote`), so that the new
    times compete only with each other and never with a time taken in another process under other load."""
    eligible = [candidate for candidate in selection.candidates if candidate.eligible]
    everything = [candidate.name for candidate in eligible]
    device = next(tensor.device for tensor in inputs if tensor is not None)
    if selection.execution_mode == "graph" and device.type == "cuda":
        return everything, []
    missing = [candidate.name for candidate in eligible if candidate.tuned_time_us is None]
    final = [candidate for candidate in eligible if candidate.tuned_time_us is not None
             and math.isfinite(candidate.tuned_time_us) and not candidate.tuned_screened]
    if len(missing) == len(eligible):
        return everything, []
    if not final:  # the last finalists were all noisy: the screened kernels lost to them
        return missing, []
    best = min(final, key=lambda candidate: candidate.tuned_time_us)
    return missing + [best.name], [candidate for candidate in final if candidate is not best]


def _demote(front: OpFront, inputs: tuple, selection: Selection, losers: Sequence[Any]) -> None:
    if losers:
        _core.tuning_store(front.name, front.input_descriptors(tuple(inputs)), [], [
            (candidate.name, candidate.tuned_time_us, "lost to the recorded pick; kept as a screened time",
             _core.TUNING_RECORD_SCREENED, 0.0) for candidate in losers], selection.attributes)


def _needs_measuring(selection: Selection, inputs: tuple) -> bool:
    """Whether a candidate lacks a time; or, for a call selected for graph replay on a CUDA device, whether the
    times are eager ones (its graph-mode times were never taken)."""
    eligible = [candidate for candidate in selection.candidates if candidate.eligible]
    if _remembered(eligible) is None:
        return True
    device = next(tensor.device for tensor in inputs if tensor is not None)
    return (selection.execution_mode == "graph" and device.type == "cuda"
            and not any(candidate.tuned_execution_mode == "graph" for candidate in eligible))


def _agree(front, inputs, out, selection, eligible, settings, blocked) -> Selection | None:
    kernels = tuple(candidate.name for candidate in eligible)
    remembered = _remembered(eligible)
    state = _distributed.DecisionState(f"{front.name}|{selection.problem.key}", kernels, remembered, blocked is None)
    strategy = front.spec.distributed_tuning
    prepared = _prepare(front, inputs, selection, kernels)
    timer = CandidateTimer(prepared.candidates, prepared.make_inputs, settings, rejected=prepared.unavailable,
                           **prepared.gate)
    with measurement_lock:
        start = time.perf_counter()
        token = inside_measurement.set(True)
        try:
            agreement = _distributed.agree(state, timer, strategy)
            agreed = agreement.measurements
            graph: tuple[CandidateMeasurement, ...] = ()
            # Whether to take graph times follows from the agreed eager times, so every rank decides alike; records
            # adopted from another rank bring no graph times (a later graph-mode miss measures them on its own rank).
            survivors = [item.kernel for item in agreed if item.passed] if agreement.measured else []
            if survivors and _wants_graph_times(selection, agreed):
                graph_timer = _cuda_graph_timer(prepared.candidates, prepared.make_inputs, settings, prepared.device,
                                                rejected=prepared.unavailable, **prepared.gate)
                if graph_timer is not None:
                    graph = _distributed.measure_together(graph_timer, survivors, strategy).measurements
        finally:
            inside_measurement.reset(token)
        seconds = time.perf_counter() - start
        if timer.outcomes:
            _count(list(timer.outcomes.values()), seconds)
        elif blocked is not None and remembered is None:
            _stats.count("tuning_skipped")
        if agreed is None or remembered == tuple((item.kernel, item.time_us, item.note, item.screened)
                                                 for item in agreed):
            return None
        _record(front, inputs, selection, agreed, seconds, agreement.source, settings, graph)
        return front.select(inputs, out, attributes=selection.attributes, execution_mode=selection.execution_mode)
