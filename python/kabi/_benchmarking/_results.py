"""The results document of one ``kabi bench`` run: ratios per problem, the suite summary checked against the
targets, and reading and writing the JSON (atomically, after every problem, so an interrupted run can resume).

Ratios are speed ratios, higher is better for kabi: ``auto/X = time(X) / time(auto)``; ``auto/oracle`` compares
kabi's automatic choice with the fastest candidate forced by hand, ``auto/<peer>`` with each peer, and ``auto/pick``
with kabi's own pick forced: the same kernel timed twice, so its distance from 1 is the run's measurement noise on
that problem (and, for microsecond calls, what the automatic call's lookup costs). Each problem is
compared in its primary mode (CUDA-graph replays for host-bound decode problems, L2-flushed events otherwise; the
CPU clock on the CPU); every mode's figures are kept.

Example::

    >>> geometric_mean([1.0, 4.0])
    2.0
"""

from __future__ import annotations

import json
import math
import os
import statistics
from pathlib import Path
from typing import Any, Iterable, Mapping

from .._base.errors import KabiIOError

__all__ = ["BenchmarkResults", "TARGETS", "geometric_mean", "problem_ratios", "read_document", "summarize",
           "write_document"]

# 2: a timing's median_us is the median of its round medians (in 1 it was the least of them).
SCHEMA_VERSION = 2
CUBLAS_PEER = "torch.matmul"
INDUCTOR_PEER = "torch.compile"
# (ratio, statistic over the suite's problems, goal): the targets, for the primary figures: matmul's and
# linear's; an op with other peers declares its own (OpBenchmark.targets).
TARGETS: tuple[tuple[str, str, float], ...] = (
    ("auto/oracle", "geomean", 0.98),
    ("auto/oracle", "min", 0.95),
    (f"auto/{CUBLAS_PEER}", "geomean", 1.03),
    (f"auto/{CUBLAS_PEER}", "min", 0.98),
    (f"auto/{INDUCTOR_PEER}", "geomean", 1.0),
)
# A candidate that beats cuBLAS by more than this is headroom the automatic choice must capture.
CAPTURE_MARGIN = 1.03


def geometric_mean(values: Iterable[float]) -> float:
    return math.exp(statistics.fmean(math.log(value) for value in values))


def problem_ratios(implementations: list[Mapping[str, Any]], mode: str,
                   pick: str | None = None) -> tuple[str | None, dict[str, float]]:
    """The oracle (fastest candidate) in ``mode`` and the speed ratios of kabi's choice against it, against its own
    ``pick`` forced (where that candidate was timed) and against each peer."""
    times = {item["name"]: item["times"][mode]["median_us"] for item in implementations if mode in item["times"]}
    candidates = [item["name"] for item in implementations if item["kind"] == "candidate" and item["name"] in times]
    auto = next((item["name"] for item in implementations if item["kind"] == "auto"), None)
    if auto not in times:
        return None, {}
    oracle = min(candidates, key=times.__getitem__) if candidates else None
    ratios = {"auto/oracle": times[oracle] / times[auto]} if oracle else {}
    if pick in candidates:
        ratios["auto/pick"] = times[pick] / times[auto]
    for item in implementations:
        if item["kind"] == "peer" and item["name"] in times:
            ratios[f"auto/{item['name']}"] = times[item["name"]] / times[auto]
    return oracle, ratios


def _statistics(values: Mapping[str, float]) -> dict[str, Any]:
    worst = min(values, key=values.__getitem__)
    return {"geomean": geometric_mean(values.values()), "min": values[worst], "count": len(values), "worst": worst}


def _setup_seconds(problems: list[Mapping[str, Any]], name: str) -> list[float]:
    return [item["setup_s"] for problem in problems for item in problem["implementations"]
            if item["name"] == name and item["setup_s"] is not None]


def summarize(problems: list[Mapping[str, Any]],
              targets_declared: Iterable[tuple[str, str, float]] | None = None) -> dict[str, Any]:
    """Geometric means and minima of every ratio over the problems (per mode and on the primary figures), tuning
    times of kabi and Inductor, and each target of ``targets_declared`` (None: :data:`TARGETS`) met (True), missed
    (False) or without data (None: the peer did not run), with the problems below its goal."""
    by_mode: dict[str, dict[str, dict[str, float]]] = {}
    for problem in problems:
        modes = {**{mode: mode for mode in problem["modes"]}, "primary": problem["primary_mode"]}
        for label, mode in modes.items():
            for ratio, value in problem["ratios"].get(mode, {}).items():
                by_mode.setdefault(label, {}).setdefault(ratio, {})[problem["key"]] = value
    ratios = {label: {ratio: _statistics(values) for ratio, values in table.items()} for label, table in by_mode.items()}
    primary = by_mode.get("primary", {})
    # A problem whose automatic call failed has no ratio, and misses every target.
    auto_failed = [problem["key"] for problem in problems if _auto_failed(problem)]
    targets = []
    for ratio, statistic, goal in TARGETS if targets_declared is None else targets_declared:
        values = primary.get(ratio, {})
        value = ratios["primary"][ratio][statistic] if values else None
        misses = sorted([key for key, item in values.items() if item < goal] + auto_failed)
        met = False if auto_failed else None if value is None else value >= goal
        targets.append({"ratio": ratio, "statistic": statistic, "goal": goal, "value": value, "met": met,
                        "misses": misses})
    headroom = [problem["key"] for problem in problems if _beats_cublas(problem)]
    missed = [key for key in headroom if primary.get(f"auto/{CUBLAS_PEER}", {}).get(key, 0.0) < CAPTURE_MARGIN]
    targets.append({"ratio": f"auto/{CUBLAS_PEER}", "statistic": f"where the oracle beats {CUBLAS_PEER} by > 3%",
                    "goal": CAPTURE_MARGIN, "value": len(headroom) - len(missed), "met": not missed, "misses": missed})
    kabi_tuning = [problem["kabi"]["tuning_s"] for problem in problems]
    inductor = _setup_seconds(problems, INDUCTOR_PEER)
    return {
        "problems": len(problems),
        "ratios": ratios,
        "tuning_s": {
            "kabi": {"total": sum(kabi_tuning), "median": statistics.median(kabi_tuning) if kabi_tuning else None},
            INDUCTOR_PEER: {"total": sum(inductor), "median": statistics.median(inductor) if inductor else None},
        },
        "targets": targets,
    }


def _auto_failed(problem: Mapping[str, Any]) -> bool:
    return any(item["kind"] == "auto" and item["status"] == "failed" for item in problem["implementations"])


def _beats_cublas(problem: Mapping[str, Any]) -> bool:
    ratios = problem["ratios"].get(problem["primary_mode"], {})
    if "auto/oracle" not in ratios or f"auto/{CUBLAS_PEER}" not in ratios:
        return False
    return ratios[f"auto/{CUBLAS_PEER}"] / ratios["auto/oracle"] > CAPTURE_MARGIN


def read_document(path: Path) -> dict[str, Any]:
    """A results file written by :func:`write_document`; ``KabiIOError`` naming the file if it cannot be read."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise KabiIOError(f"kabi bench: cannot read results file {str(path)!r}: {error}") from None


def write_document(path: Path, document: Mapping[str, Any]) -> None:
    """Write the document atomically (a reader or a later resume never sees half a file)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    partial.write_text(json.dumps(document, indent=1, allow_nan=False) + "\n")
    os.replace(partial, path)


class BenchmarkResults:
    """What ``kabi.benchmark`` returns: the results document (also written to ``path`` when one was given).

    ``problems`` lists each problem's record, ``summary`` the suite's ratios and targets, ``document`` the whole
    JSON as written (its schema is ``kabi/_benchmarking/result.schema.json``).
    """

    def __init__(self, document: dict[str, Any], path: Path | None) -> None:
        self.document, self.path = document, path

    @property
    def problems(self) -> list[dict[str, Any]]:
        return self.document["problems"]

    @property
    def summary(self) -> dict[str, Any]:
        return self.document["summary"]

    @property
    def complete(self) -> bool:
        return self.document["complete"]

    def __repr__(self) -> str:
        return (f"BenchmarkResults({self.document['op']!r}, suite={self.document['suite']!r}, "
                f"problems={len(self.problems)}, complete={self.complete})")
