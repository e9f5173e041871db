"""`kabi.stats()`: process-wide counters of what tuning and dispatch did, so tests and services can check that a
warm cache measures nothing.

Example::

    >>> import kabi
    >>> before = kabi.stats()
    >>> # ... run a model ...
    >>> kabi.stats().tuning_runs - before.tuning_runs   # 0 once the tuning cache is warm
    0
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields

from .._base.decision_cache import decision_counts, reset_decision_counts

__all__ = ["Stats", "stats", "count", "reset_stats"]


@dataclass(frozen=True)
class Stats:
    """A snapshot of the counters since the process started (or since :func:`reset_stats`).

    - ``tuning_runs``: problems measured (one run measures every eligible candidate of one problem);
    - ``candidates_benchmarked``: candidates that passed the correctness gate and were timed (screened or in full);
    - ``candidates_screened_out``: of those, the ones whose time is a screened one, never final: cut by the screen
      (timed for one round only) or during their full measurement, once they had clearly lost;
    - ``candidates_cut``: finalists whose full measurement stopped early because they had clearly lost, in eager and
      CUDA-graph rounds alike (``kabi._selection.measure.CUT_MARGIN``);
    - ``gate_failures``: candidates rejected (wrong result, NaN/Inf, raised, wrote into their inputs);
    - ``tuning_skipped``: decision misses that would have tuned but the policy forbade (off, compiling, capturing);
    - ``tuning_seconds``: wall time spent tuning; of it, ``tuning_gate_seconds`` gating the candidates (the
      reference included), ``tuning_screen_seconds`` in the screens' single rounds, ``tuning_measure_seconds`` in the
      finalists' full rounds, and ``tuning_graph_seconds`` timing (screen and rounds) replayed in CUDA graphs, their
      captures included;
    - ``decision_cache_hits`` / ``decision_cache_misses``: calls of the op fronts answered from their remembered
      decisions, and calls that went to the miss path (validation and selection), summed over every op.
    """

    tuning_runs: int = 0
    candidates_benchmarked: int = 0
    candidates_screened_out: int = 0
    candidates_cut: int = 0
    gate_failures: int = 0
    tuning_skipped: int = 0
    tuning_seconds: float = 0.0
    tuning_gate_seconds: float = 0.0
    tuning_screen_seconds: float = 0.0
    tuning_measure_seconds: float = 0.0
    tuning_graph_seconds: float = 0.0
    decision_cache_hits: int = 0
    decision_cache_misses: int = 0


_COUNTERS = tuple(field.name for field in fields(Stats) if not field.name.startswith("decision_cache"))
_lock = threading.Lock()
_values: dict[str, float] = dict.fromkeys(_COUNTERS, 0)


def count(name: str, amount: float = 1) -> None:
    """Add ``amount`` to the counter ``name`` (one of :class:`Stats`' tuning fields)."""
    if name not in _values:
        raise ValueError(f"unknown counter {name!r}; expected one of {', '.join(_COUNTERS)}")
    with _lock:
        _values[name] += amount


def stats() -> Stats:
    """The current counters. See :class:`Stats` for what each one counts."""
    with _lock:
        snapshot = dict(_values)
    hits, misses = decision_counts()
    counted = {name: type(getattr(Stats, name))(snapshot[name]) for name in _COUNTERS}
    return Stats(**counted, decision_cache_hits=hits, decision_cache_misses=misses)


def reset_stats() -> None:
    """Zero every counter."""
    with _lock:
        for name in _COUNTERS:
            _values[name] = 0
    reset_decision_counts()
