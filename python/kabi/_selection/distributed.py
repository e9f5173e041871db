"""Agreement across ranks: in a torch.distributed job every rank uses the same kernel for the same problem.

**The choice: every rank measures, the per-candidate times are reduced with MAX, and every rank records the same
reduced times.** A kernel is then as fast as it is on the slowest rank, which is what a synchronous data- or
tensor-parallel step waits for; a candidate that fails the correctness gate on any rank is failed on all of them
(MAX of inf is inf); and identical records give identical picks without anyone trusting one rank's noise. The
alternative, rank 0 tunes and broadcasts, costs the same wall time (the other ranks wait for rank 0) and lets one
rank's noisy measurement or device quirk decide for everyone.

How the candidates are measured is a strategy, chosen per op (``[tuning] distributed`` in its declaration). Both
screen before they measure (:mod:`kabi._selection.measure`): the screened times are gathered, every rank takes the
same finalists (the candidates within ``screen_margin`` of the fastest screen, by the slowest rank that screened
each), and every rank gates and measures the finalists in full, their times MAX-reduced as above. The others keep
their screened time, flagged so that it never wins. A screen taken on one rank is no slowest-rank time: a cut
candidate whose screen lies within the margin of the best agreed time joins the finalists, until none does.

- ``"split"`` (the default): the ranks share the screen out (candidate ``i`` to rank ``i % world``), so a rank gates
  and screens about 1/world of the candidates plus the few finalists. Tuning time falls with the number of ranks.
- ``"every-rank"``: every rank screens every candidate.

With the screen off (``screen_margin`` inf) every rank measures every candidate in full, whatever the strategy.

Ranks exchange state on every decision miss that is not forced, not only when they tune, because their tuning caches
may differ (a warm cache on one node, a cold one on another): the exchange carries each rank's problem key,
eligible kernels and remembered times, and

- if some rank already has complete records, every rank adopts those of the lowest such rank (no measuring);
- otherwise every rank measures and the MAX-reduced times are recorded everywhere.

This needs the ranks to meet their first call of each problem in the same order, as SPMD programs (data and tensor
parallel) do. If the exchanged problems differ (pipeline stages with different shapes), kabi warns once and stops
exchanging in this process; each rank then keeps its own cache and heuristic. Such jobs should pass the group of
ranks that share shapes (``kabi.set_agreement_group(group)``) or pre-tune offline (``kabi tune``, ``kabi cache import``).

Example::

    >>> import torch.distributed as dist, kabi
    >>> dist.init_process_group("gloo")           # doctest: +SKIP
    >>> kabi.ops.matmul(a, b)                     # doctest: +SKIP  (every rank ends with the same kernel)
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import torch.distributed as dist

from .._base.declarations import DISTRIBUTED_TUNING_STRATEGIES
from .measure import CandidateMeasurement, CandidateTimer, select_finalists

__all__ = ["Agreement", "DecisionState", "STRATEGIES", "agree", "agreement_active", "measure_together",
           "set_agreement_group"]

# How ranks share the measuring (see the module docstring); an op declares its own.
STRATEGIES = DISTRIBUTED_TUNING_STRATEGIES

_DEFAULT_GROUP = object()
_group: Any = _DEFAULT_GROUP
_disabled_reason: str | None = None


@dataclass(frozen=True)
class DecisionState:
    """What one rank knows of a problem when its decision misses.

    ``remembered`` holds each eligible kernel's record, (kernel, time in us, note, screened), when the rank's tuning
    cache holds a complete, current record for the problem, else is None. ``may_tune`` is False when the rank's
    policy forbids tuning.
    """

    problem: str
    kernels: tuple[str, ...]
    remembered: tuple[tuple[str, float, str, bool], ...] | None
    may_tune: bool


def set_agreement_group(group: Any) -> None:
    """Agree with the ranks of ``group`` (a torch.distributed ProcessGroup) instead of the whole world; ``None``
    turns agreement off for this process. Every rank of the group must call it alike."""
    global _group, _disabled_reason
    _group = group
    _disabled_reason = None


def _resolved_group() -> Any:
    return None if _group is _DEFAULT_GROUP else _group


def agreement_active() -> bool:
    """Whether decisions are exchanged: torch.distributed is initialized with more than one rank in the group."""
    if _group is None or _disabled_reason is not None:
        return False
    if not (dist.is_available() and dist.is_initialized()):
        return False
    return dist.get_world_size(_resolved_group()) > 1


def _gather(state: Any) -> list[Any]:
    group = _resolved_group()
    gathered: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, state, group=group)
    return gathered


def _disable(reason: str) -> None:
    global _disabled_reason
    _disabled_reason = reason
    warnings.warn(f"kabi: ranks stop agreeing on kernels in this process: {reason}", RuntimeWarning, stacklevel=3)


@dataclass(frozen=True)
class Agreement:
    """The outcome of an exchange: what to record locally (None: nothing), whether ranks could agree, and whether
    the ranks measured the times just now (rather than adopting a rank's records)."""

    measurements: tuple[CandidateMeasurement, ...] | None
    agreed: bool
    source: str
    measured: bool = False


def _reduce(per_rank: Sequence[Sequence[tuple[str, float, str, float, bool]]],
            kernels: Sequence[str]) -> tuple[CandidateMeasurement, ...]:
    """Each kernel's slowest rank among those that timed it decides its time; its spread is the widest and it is
    noisy if any rank found it so (a noisy record is then kept out of every rank's cache file alike)."""
    reduced = []
    for name in kernels:
        rows = [(rank, row) for rank, results in enumerate(per_rank) for row in results if row[0] == name]
        slowest = max(row[1] for _, row in rows)
        notes = [(rank, row[2]) for rank, row in rows if row[2]]
        note = "" if not notes else (notes[0][1] if len(per_rank) == 1 else f"rank {notes[0][0]}: {notes[0][1]}")
        noisy = any(row[4] for _, row in rows)
        reduced.append(CandidateMeasurement(name, slowest, note if not math.isfinite(slowest) or noisy else "",
                                            spread=max(row[3] for _, row in rows), noisy=noisy))
    return tuple(reduced)


def agree(state: DecisionState, timer: CandidateTimer, strategy: str = "split") -> Agreement:
    """Exchange ``state`` with the other ranks and decide together; ``timer`` gates, screens and times the named
    kernels on this rank (:class:`kabi._selection.measure.CandidateTimer`), used when the ranks must tune, as
    ``strategy`` shares the work out (see ``STRATEGIES``). Every rank of the group must call this for the same
    problem at the same point."""
    if strategy not in STRATEGIES:
        raise ValueError(f"distributed tuning strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    gathered: list[DecisionState] = _gather(state)
    problems = {(other.problem, other.kernels) for other in gathered}
    if len(problems) > 1:
        described = "; ".join(f"rank {rank}: {other.problem}" for rank, other in enumerate(gathered))
        _disable(f"ranks missed different problems at the same time ({described}); agreement needs every rank "
                  "to meet its first call of each problem in the same order")
        return Agreement(None, False, "ranks disagree on the problem")
    remembered = next(((rank, other) for rank, other in enumerate(gathered) if other.remembered is not None), None)
    if remembered is not None:
        rank, other = remembered
        adopted = tuple(CandidateMeasurement(name, time_us, note, screened=screened)
                        for name, time_us, note, screened in other.remembered)
        if all(peer.remembered == other.remembered for peer in gathered):
            return Agreement(None, True, "every rank remembers the same records")
        return Agreement(adopted, True, f"adopted the records of rank {rank}")
    if not all(other.may_tune for other in gathered):
        return Agreement(None, True, "tuning is not allowed on every rank; all use the heuristic")
    return measure_together(timer, state.kernels, strategy)


def measure_together(timer: CandidateTimer, kernels: Sequence[str], strategy: str = "split") -> Agreement:
    """Measure ``kernels`` with the other ranks as ``strategy`` shares the work out (see the module docstring), and
    return the times every rank records alike. Every rank of the group must call this with the same kernels at the
    same point (``agree`` does, once the ranks know they must tune; the tuner again for the CUDA-graph times of the
    agreed survivors)."""
    group = _resolved_group()
    world, rank = dist.get_world_size(group), dist.get_rank(group)
    margin = timer.settings.screen_margin
    if len(kernels) < 2 or math.isinf(margin):
        return Agreement(_measured_everywhere(timer, kernels), True, f"MAX of {world} ranks' times", True)
    share = list(kernels) if strategy == "every-rank" else [name for index, name in enumerate(kernels)
                                                             if index % world == rank]
    screens = _reduce(_gather([_as_row(result) for result in timer.screen(share)] if share else []), kernels)
    finalists, cut = select_finalists(screens, margin)
    results = {**cut, **{result.kernel: result for result in _measured_everywhere(timer, finalists)}}
    measured = set(finalists)
    # A screen taken on one rank is no slowest-rank time: a finalist can turn out slower everywhere than it was
    # where it was screened. A cut candidate whose screen is within the margin of the best agreed time is then a
    # finalist after all, and is measured everywhere too, until none is; so every cut candidate's screen, a lower
    # bound of its own slowest-rank time, lies more than the margin behind the pick.
    while True:
        best = min((result.time_us for name, result in results.items() if name in measured and result.passed),
                   default=math.inf)
        late = [name for name in kernels if name in cut and cut[name].passed and name not in measured
                and cut[name].time_us <= best * (1 + margin)]
        if not late:
            break
        measured.update(late)
        results.update((result.kernel, result) for result in _measured_everywhere(timer, late))
    described = (f"split among {world} ranks: {len(kernels)} candidates screened, a share per rank"
                 if strategy == "split" else f"every rank of {world} screened {len(kernels)} candidates")
    return Agreement(tuple(results[name] for name in kernels), True,
                     f"{described}; {len(measured)} finalists measured on every rank (MAX)", True)


def _as_row(result: CandidateMeasurement) -> tuple[str, float, str, float, bool]:
    return (result.kernel, result.time_us, result.note, result.spread, result.for_this_process_only)


def _measured_everywhere(timer: CandidateTimer, kernels: Sequence[str]) -> tuple[CandidateMeasurement, ...]:
    """Every rank measures ``kernels`` in full; each one's slowest rank decides."""
    # Every rank times every finalist in full: a cut on one rank would leave the others' times to be compared with
    # a time it never took.
    local = [_as_row(result) for result in timer.measure(kernels, cut_clear_losers=False)] if kernels else []
    return _reduce(_gather(local), kernels)
