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
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from . import _core

__all__ = ["CacheRecord", "CacheStats", "directory", "set_directory", "show", "export", "import_", "clear",
           "reload", "stats"]


@dataclass(frozen=True)
class CacheRecord:
    """One kernel on one problem. ``time_us`` is inf for a kernel that failed; ``note`` says why. ``gate_only``
    records say the kernel passed the correctness gate without being timed; ``memory_only`` ones live in this
    process alone (e.g. a measurement too noisy to persist). ``spread`` is the relative spread of the timing
    ((slowest - fastest) / median of its rounds; 0 when unknown), ``recorded_at`` when it was recorded (seconds since
    the epoch; 0 when unknown)."""

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

    @classmethod
    def from_core(cls, raw: dict) -> CacheRecord:
        flags = raw["flags"]
        return cls(raw["device"], raw["op"], raw["problem"], raw["kernel"], raw["fingerprint"], raw["time_us"],
                   raw["note"], bool(flags & _core.TUNING_RECORD_GATE_ONLY),
                   bool(flags & _core.TUNING_RECORD_MEMORY_ONLY), raw["spread"], raw["recorded_at"])


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
