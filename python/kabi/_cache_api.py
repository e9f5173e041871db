"""`kabi.cache`: the persistent tuning cache seen from Python.

The cache lives in a directory (``KABI_CACHE_DIR``, else ``$XDG_CACHE_HOME/kabi``, else ``~/.cache/kabi``) as one
append-only record log that libkabi reads and writes, so a C++ caller sees the decisions Python made and the other
way round. Each record is one measured kernel on one problem: (device signature, op, problem key, kernel,
fingerprint, time in microseconds or inf, note). A record stops counting once the kernel's fingerprint or the
device signature (driver and runtime versions included) changes.

Example::

    >>> import kabi
    >>> kabi.cache.directory()                          # doctest: +SKIP
    PosixPath('/home/me/.cache/kabi')
    >>> for record in kabi.cache.show(op="matmul"):     # doctest: +SKIP
    ...     print(record.problem, record.kernel, record.time_us)
    >>> kabi.cache.export("tuned-h200.log")             # doctest: +SKIP
    >>> kabi.cache.import_("tuned-h200.log")            # doctest: +SKIP
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import _core

__all__ = ["CacheRecord", "CacheStats", "directory", "set_directory", "show", "export", "import_", "clear",
           "reload", "stats"]

_FIELD_COUNT = 9
_UNESCAPED = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}


@dataclass(frozen=True)
class CacheRecord:
    """One measured kernel on one problem. ``time_us`` is inf for a kernel that failed; ``note`` says why."""

    device: str
    op: str
    problem: str
    kernel: str
    fingerprint: str
    time_us: float
    note: str


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
    ``KABI_CACHE_DIR`` or the default. Decisions are reloaded from the new place."""
    _core.cache_set_directory(None if path is None else _path_argument("path", path))


def reload() -> None:
    """Re-read the cache file: picks up what other processes recorded since this one loaded it."""
    _core.cache_reload()


def clear() -> None:
    """Forget every recorded measurement, in memory and on disk."""
    _core.cache_clear()


def export(path: str | os.PathLike) -> int:
    """Write every valid record to ``path`` (the cache's own format, replacing the file); returns how many."""
    target = _path_argument("path", path)
    _core.cache_export(target)
    return len(_parse_records(Path(target).read_text(encoding="utf-8")))


def import_(path: str | os.PathLike) -> int:
    """Merge the records of a file written by :func:`export` into the cache; returns how many. A file that is not
    such an export is refused whole, naming its first bad line."""
    source = _path_argument("path", path)
    _core.cache_import(source)
    return len(_parse_records(Path(source).read_text(encoding="utf-8")))


def stats() -> CacheStats:
    """Record counts of the cache (valid, and corrupt ones skipped at the last load) and its directory."""
    records, corrupt = _core.cache_stats()
    return CacheStats(records=records, corrupt_records=corrupt, path=directory())


def show(op: str | None = None) -> list[CacheRecord]:
    """Every valid record, sorted by device, op, problem and kernel; only ``op``'s when given."""
    if op is not None and not isinstance(op, str):
        raise TypeError(f"kabi.cache.show: op must be an op name (str) or None, got {op!r}")
    with tempfile.TemporaryDirectory(prefix="kabi-cache-show-") as scratch:
        snapshot = os.path.join(scratch, "records.log")
        _core.cache_export(snapshot)
        records = _parse_records(Path(snapshot).read_text(encoding="utf-8"))
    return [record for record in records if op is None or record.op == op]


def _unescape(field: str) -> str:
    if "\\" not in field:
        return field
    out, index = [], 0
    while index < len(field):
        character = field[index]
        if character == "\\" and index + 1 < len(field):
            out.append(_UNESCAPED.get(field[index + 1], field[index + 1]))
            index += 2
        else:
            out.append(character)
            index += 1
    return "".join(out)


def _parse_records(text: str) -> list[CacheRecord]:
    # Only libkabi's export feeds this, which writes valid, checksummed records; see csrc/core/tuning_cache.cpp.
    records = []
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) != _FIELD_COUNT:
            continue
        _, device, op, problem, kernel, fingerprint, time_text, note, _ = map(_unescape, fields)
        time_us = math.inf if time_text == "inf" else float(time_text)
        records.append(CacheRecord(device, op, problem, kernel, fingerprint, time_us, note))
    return records
