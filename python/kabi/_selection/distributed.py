"""Agreement across ranks: in a torch.distributed job every rank uses the same kernel for the same problem.

**The choice: every rank measures, the per-candidate times are reduced with MAX, and every rank records the same
reduced times.** A kernel is then as fast as it is on the slowest rank, which is what a synchronous data- or
tensor-parallel step waits for; a candidate that fails the correctness gate on any rank is failed on all of them
(MAX of inf is inf); and identical records give identical picks without anyone trusting one rank's noise. The
alternative, rank 0 tunes and broadcasts, costs the same wall time (the other ranks wait for rank 0) and lets one
rank's noisy measurement or device quirk decide for everyone.

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

from .measure import CandidateMeasurement

__all__ = ["Agreement", "DecisionState", "agree", "agreement_active", "set_agreement_group"]

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
    """The outcome of an exchange: what to record locally (None: nothing) and whether ranks could agree."""

    measurements: tuple[CandidateMeasurement, ...] | None
    agreed: bool
    source: str


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


def agree(state: DecisionState, measure: Callable[[], Sequence[CandidateMeasurement]]) -> Agreement:
    """Exchange ``state`` with the other ranks and decide together; ``measure`` runs on every rank when they must
    tune. Every rank of the group must call this for the same problem at the same point."""
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
    local = [(result.kernel, result.time_us, result.note, result.spread, result.noisy) for result in measure()]
    per_rank = _gather(local)
    return Agreement(_reduce(per_rank, state.kernels), True, f"MAX of {len(per_rank)} ranks' times")
