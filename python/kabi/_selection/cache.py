"""`kabi.cache`: the persistent tuning cache seen from Python.

The cache lives in a directory (``KABI_CACHE_DIR``, else ``$XDG_CACHE_HOME/kabi``, else ``~/.cache/kabi``) as one
append-only record log that libkabi reads and writes, so a C++ caller sees the decisions Python made and the other
way round. Each record is one kernel on one problem: (device signature, op, problem key, kernel, fingerprint, time
in microseconds or inf, note, flags, spread, when it was recorded). A record is a measurement (a finite time), a
failed gate (inf, with the note saying why), or a gate verdict without a time (``gate_only``). A record stops
counting once the kernel's fingerprint or the device signature (driver and runtime versions included) changes.

Example::

    >>> import kabi
    >>> kabi.cache.directory()                          # doctest: +SKIP
    PosixPath('/home/me/.cache/kabi')
    >>> for record in kabi.cache.show(op="matmul"):     # doctest: +SKIP
    ...     print(record.problem, record.kernel, record.time_us, record.spread)
    >>> kabi.cache.export("tuned-h200.log")             # doctest: +SKIP
    >>> kabi.cache.import_("tuned-h200.log")            # doctest: +SKIP
    >>> kabi.cache.retune(noisy=True)                   # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from .. import _core
from .._base import devices as _devices
from .._base.errors import ArgumentTypeError, InvalidArgumentError, KabiError
from .tuning_keys import representative_problem
from .tuning_policy import TuningSettings, current_settings

if TYPE_CHECKING:
    from .tuner import TuningReport

__all__ = ["CacheRecord", "CacheStats", "Retuned", "SkippedProblem", "directory", "set_directory", "show", "export",
           "import_", "clear", "reload", "stats", "retune"]


@dataclass(frozen=True)
class CacheRecord:
    """One kernel on one problem. ``time_us`` is inf for a kernel that failed; ``note`` says why. ``gate_only``
    records say the kernel passed the correctness gate without being timed; ``memory_only`` ones live in this
    process alone (e.g. a measurement too noisy to persist). ``spread`` is the relative spread of the timing
    ((slowest - fastest) / median of its rounds; 0 when unknown), ``recorded_at`` when it was recorded (seconds since
    the epoch; 0 when unknown). ``execution_mode`` is how it was timed: "eager", or "graph" (replayed in a CUDA
    graph); a kernel may have one record of each. A ``screened`` record's time comes from the tuner's short screen,
    which found the kernel clearly slower than the fastest (:mod:`kabi._selection.measure`): it says the kernel was
    measured, and never wins. ``variant`` is what a kernel that names its variants ran (e.g. the cuBLASLt algorithm
    behind a slot kernel; "" for other kernels and for records made before kabi kept it): a record of another
    variant than the kernel now runs for the problem is stale, and selection ignores it."""

    device: str
    op: str
    problem: str
    kernel: str
    fingerprint: str
    time_us: float
    note: str
    gate_only: bool = False
    memory_only: bool = False
    spread: float = 0.0
    recorded_at: int = 0
    execution_mode: str = "eager"
    screened: bool = False
    variant: str = ""

    @classmethod
    def from_core(cls, raw: dict) -> CacheRecord:
        flags = raw["flags"]
        return cls(raw["device"], raw["op"], raw["problem"], raw["kernel"], raw["fingerprint"], raw["time_us"],
                   raw["note"], bool(flags & _core.TUNING_RECORD_GATE_ONLY),
                   bool(flags & _core.TUNING_RECORD_MEMORY_ONLY), raw["spread"], raw["recorded_at"],
                   "graph" if flags & _core.TUNING_RECORD_GRAPH_MODE else "eager",
                   bool(flags & _core.TUNING_RECORD_SCREENED), raw["variant"])


@dataclass(frozen=True)
class CacheStats:
    """How many valid records the cache holds, how many corrupt ones its last load skipped, and where it is."""

    records: int
    corrupt_records: int
    path: Path


def _path_argument(name: str, value: object) -> str:
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise TypeError(f"kabi.cache: {name} must be a non-empty path (str or os.PathLike), got {value!r}")
    return os.fspath(value)


def directory() -> Path:
    """The cache directory in use."""
    return Path(_core.cache_directory())


def set_directory(path: str | os.PathLike | None) -> None:
    """Use another cache directory from now on (created when first written); ``None`` goes back to
    ``KABI_CACHE_DIR`` or the default. Decisions are reloaded from the new place; this process's memory-only records
    stay with the old one."""
    _core.cache_set_directory(None if path is None else _path_argument("path", path))


def reload() -> None:
    """Re-read the cache file: picks up what other processes recorded since this one loaded it."""
    _core.cache_reload()


def clear() -> None:
    """Forget every recorded measurement, in memory and on disk."""
    _core.cache_clear()


def _count_records(path: str) -> int:
    # libkabi writes, and accepts on import, only files whose every non-empty line is a valid record.
    with open(path, encoding="utf-8") as file:
        return sum(1 for line in file if line.strip())


def export(path: str | os.PathLike) -> int:
    """Write every valid persistent record to ``path`` (the cache's own format, replacing the file); returns how
    many."""
    target = _path_argument("path", path)
    _core.cache_export(target)
    return _count_records(target)


def import_(path: str | os.PathLike) -> int:
    """Merge the records of a file written by :func:`export` into the cache; returns how many. A file that is not
    such an export is refused whole, naming its first bad line."""
    source = _path_argument("path", path)
    _core.cache_import(source)
    return _count_records(source)


def stats() -> CacheStats:
    """Record counts of the cache (valid, and corrupt ones skipped at the last load) and its directory."""
    records, corrupt = _core.cache_stats()
    return CacheStats(records=records, corrupt_records=corrupt, path=directory())


def show(op: str | None = None) -> list[CacheRecord]:
    """Every live record (the latest per device, op, problem and kernel), sorted by device, op, problem and kernel;
    only ``op``'s when given. Re-reads the file first, so records of other processes are included."""
    if op is not None and not isinstance(op, str):
        raise TypeError(f"kabi.cache.show: op must be an op name (str) or None, got {op!r}")
    return [CacheRecord.from_core(raw) for raw in _core.cache_list(op)]


@dataclass(frozen=True)
class SkippedProblem:
    """A problem :func:`retune` selected but did not measure, and why."""

    device: str
    op: str
    problem: str
    reason: str


@dataclass(frozen=True)
class Retuned:
    """What :func:`retune` did: a tuning report per problem it measured again, and the problems it skipped."""

    reports: tuple[TuningReport, ...]
    skipped: tuple[SkippedProblem, ...]


def _is_noisy(record: CacheRecord, settings: TuningSettings) -> bool:
    # A screened record never decides the pick, however noisy its screen was.
    return not record.screened and (record.memory_only or record.spread > settings.max_spread)


def retune(op: str | None = None, *, noisy: bool = False, older_than_s: float | None = None,
           settings: TuningSettings | None = None) -> Retuned:
    """Measure again every problem of the live records that the filters select (all of them without filters; both
    filters must hold when both are given), and record the new results.

    Args:
        op: only this op's problems.
        noisy: only problems with a record whose spread exceeds ``settings.max_spread`` or that is memory-only
            (screened records aside: they never decide the pick).
        older_than_s: only problems whose oldest record is older than this many seconds (a record of unknown age
            counts as old).
        settings: the measurement budget; ``kabi.tuning``'s (or the environment's) when None.

    Each problem is rebuilt from its key (:func:`kabi._selection.tuning_keys.representative_problem`) and measured with
    :func:`kabi.tune`. Problems recorded on a device other than this machine's, or whose key cannot be rebuilt, are
    skipped with the reason.

    Example::

        result = kabi.cache.retune("matmul", older_than_s=7 * 86400)
        for report in result.reports:
            print(report)
    """
    from .tuner import tune  # the tuner records through this module, so it is imported when first needed

    if not isinstance(noisy, bool):
        raise ArgumentTypeError(f"kabi.cache.retune: noisy must be True or False, got {noisy!r}")
    if older_than_s is not None and (isinstance(older_than_s, bool) or not isinstance(older_than_s, (int, float))
                                     or not 0 <= older_than_s < math.inf):
        raise InvalidArgumentError(f"kabi.cache.retune: older_than_s must be a number of seconds >= 0, "
                                   f"got {older_than_s!r}")
    settings = settings if settings is not None else current_settings()
    problems: dict[tuple[str, str, str], list[CacheRecord]] = {}
    for record in show(op):
        problems.setdefault((record.device, record.op, record.problem), []).append(record)
    now = time.time()
    here = {info.signature: torch.device(info.device_type, info.index) if info.device_type != "cpu"
            else torch.device("cpu") for info in _devices.devices()}
    reports, skipped = [], []
    for (device, op_name, problem), records in problems.items():
        if noisy and not any(_is_noisy(record, settings) for record in records):
            continue
        if older_than_s is not None and not min(record.recorded_at for record in records) < now - older_than_s:
            continue
        if device not in here:
            skipped.append(SkippedProblem(device, op_name, problem, "recorded on a device this machine does not have"))
            continue
        try:
            inputs, attributes = representative_problem(op_name, problem, here[device])
            reports.append(tune(op_name, *inputs, settings=settings, **attributes))
        except KabiError as error:
            skipped.append(SkippedProblem(device, op_name, problem, str(error)))
    return Retuned(tuple(reports), tuple(skipped))
