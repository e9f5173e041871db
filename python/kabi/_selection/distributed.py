"""Agreement across ranks: in a torch.distributed job every rank uses the same kernel for the same problem.

**The choice: every rank measures, the per-candidate times are reduced with MAX, and every rank records the same
reduced times.** A kernel is then as fast as it is on the slowest rank, which is what a synchronous data- or
tensor-parallel step waits for; a candidate that fails the correctness gate on any rank is failed on all of them
(MAX of inf is inf); and identical records give identical picks without anyone trusting one rank's noise. The
alternative, rank 0 tunes and broadcasts, costs the same wall time (the other ranks wait for rank 0) and lets one
rank's noisy measurement or device quirk decide for everyone.

How the candidates are measured is a strategy, chosen per op (``[tuning] distributed`` in its declaration):

- ``"every-rank"``: every rank measures every candidate, and the times are reduced with MAX, as above;
- ``"split"`` (the default): the ranks share the candidates out (candidate ``i`` to rank ``i % world``), gather the
  times, and then every rank measures the finalists, the candidates within ``FINALIST_MARGIN`` of the fastest,
  whose times are MAX-reduced. Should a finalist's reduced time fall behind a candidate only one rank measured,
  that candidate joins the finalists and is measured everywhere too, so the pick is always a candidate every rank
  measured and passed the correctness gate on. Tuning time falls with the number of ranks: a rank measures about
  1/world of the candidates and the few finalists, where "every-rank" measures all of them.

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
from typing import Any, Callable, Sequence

import torch.distributed as dist

from .._base.declarations import DISTRIBUTED_TUNING_STRATEGIES
from .measure import CandidateMeasurement

__all__ = ["Agreement", "DecisionState", "FINALIST_MARGIN", "STRATEGIES", "agree", "agreement_active",
           "measure_together", "set_agreement_group"]

# How ranks share the measuring (see the module docstring); an op declares its own.
STRATEGIES = DISTRIBUTED_TUNING_STRATEGIES
# Under "split", the candidates whose time is within this factor of the fastest are measured on every rank.
FINALIST_MARGIN = 1.10

_DEFAULT_GROUP = object()
_group: Any = _DEFAULT_GROUP
_disabled_reason: str | None = None


@dataclass(frozen=True)
class DecisionState:
    """What one rank knows of a problem when its decision misses.

    ``remembered`` maps each eligible kernel to its recorded time when the rank's tuning cache holds a complete,
    current record for the problem, else is None. ``may_tune`` is False when the rank's policy forbids tuning.
    """

    problem: str
    kernels: tuple[str, ...]
    remembered: tuple[tuple[str, float, str], ...] | None
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
    """Each kernel's slowest rank decides its time; its spread is the widest and it is noisy if any rank found it
    so (a noisy record is then kept out of every rank's cache file alike)."""
    reduced = []
    for index, name in enumerate(kernels):
        times = [results[index][1] for results in per_rank]
        notes = [(rank, results[index][2]) for rank, results in enumerate(per_rank) if results[index][2]]
        note = "" if not notes else (notes[0][1] if len(per_rank) == 1 else f"rank {notes[0][0]}: {notes[0][1]}")
        noisy = any(results[index][4] for results in per_rank)
        reduced.append(CandidateMeasurement(name, max(times), note if not math.isfinite(max(times)) or noisy else "",
                                            spread=max(results[index][3] for results in per_rank), noisy=noisy))
    return tuple(reduced)


def agree(state: DecisionState, measure: Callable[[Sequence[str]], Sequence[CandidateMeasurement]],
          strategy: str = "split") -> Agreement:
    """Exchange ``state`` with the other ranks and decide together; ``measure(kernels)`` gates and times the named
    kernels on this rank, called when the ranks must tune, as ``strategy`` shares the work out (see
    ``STRATEGIES``). Every rank of the group must call this for the same problem at the same point."""
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
        adopted = tuple(CandidateMeasurement(name, time_us, note) for name, time_us, note in other.remembered)
        if all(peer.remembered == other.remembered for peer in gathered):
            return Agreement(None, True, "every rank remembers the same records")
        return Agreement(adopted, True, f"adopted the records of rank {rank}")
    if not all(other.may_tune for other in gathered):
        return Agreement(None, True, "tuning is not allowed on every rank; all use the heuristic")
    return measure_together(measure, state.kernels, strategy)


def measure_together(measure: Callable[[Sequence[str]], Sequence[CandidateMeasurement]], kernels: Sequence[str],
                     strategy: str = "split") -> Agreement:
    """Measure ``kernels`` with the other ranks as ``strategy`` shares the work out, and return the times every rank
    records alike. Every rank of the group must call this with the same kernels at the same point (``agree`` does,
    once the ranks know they must tune; the tuner again for the CUDA-graph times of the agreed survivors)."""
    world = dist.get_world_size(_resolved_group())
    if strategy == "every-rank" or world == 1:
        return Agreement(_measured_everywhere(measure, kernels), True, f"MAX of {world} ranks' times", True)
    return _split(measure, kernels, world)


def _as_row(result: CandidateMeasurement) -> tuple[str, float, str, float, bool]:
    return (result.kernel, result.time_us, result.note, result.spread, result.noisy)


def _measured_everywhere(measure: Callable[[Sequence[str]], Sequence[CandidateMeasurement]],
                         kernels: Sequence[str]) -> tuple[CandidateMeasurement, ...]:
    """Every rank measures ``kernels``; each one's slowest rank decides."""
    local = [_as_row(result) for result in measure(kernels)] if kernels else []
    return _reduce(_gather(local), kernels)


def _split(measure: Callable[[Sequence[str]], Sequence[CandidateMeasurement]], kernels: Sequence[str],
           world: int) -> Agreement:
    """The "split" strategy: a share of the candidates per rank, then the finalists on every rank."""
    rank = dist.get_rank(_resolved_group())
    share = [name for index, name in enumerate(kernels) if index % world == rank]
    local = {result.kernel: result for result in (measure(share) if share else [])}
    owners = _gather([_as_row(local[name]) for name in share])
    results = {row[0]: CandidateMeasurement(row[0], row[1], f"rank {owner}: {row[2]}" if row[2] else "",
                                            spread=row[3], noisy=row[4])
               for owner, rows in enumerate(owners) for row in rows}
    everywhere: set[str] = set()
    while True:
        finite = {name: result.time_us for name, result in results.items() if math.isfinite(result.time_us)}
        if not finite:
            break
        best = min(finite.values())
        finalists = [name for name in kernels if name not in everywhere and name in finite
                     and finite[name] <= best * FINALIST_MARGIN]
        if not finalists:
            break
        everywhere.update(finalists)
        results.update({result.kernel: result for result in _measured_everywhere(measure, finalists)})
    once = len(kernels) - len(everywhere)
    return Agreement(tuple(results[name] for name in kernels), True,
                     f"split among {world} ranks: {once} candidates measured on one rank, {len(everywhere)} "
                     f"finalists on every rank (MAX)", True)
