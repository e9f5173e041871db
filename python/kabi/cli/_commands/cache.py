"""``kabi cache show|retune|export PATH|import PATH|clear``: the persistent tuning cache.

Example::

    $ kabi cache show --op matmul
    $ kabi cache retune --noisy --older-than 7d     # measure again what was noisy or is a week old
    $ kabi cache export tuned-h200.log      # on the machine that tuned
    $ kabi cache import tuned-h200.log      # on another machine with the same device signature
"""

from __future__ import annotations

import argparse
import math
import time

from rich.table import Table

from ..._selection import cache


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("cache", help="show, export, import or clear the tuning cache")
    actions = parser.add_subparsers(dest="cache_action", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="every record per problem: the pick, each kernel's time, spread, age and "
                              "flags, or why it failed")
    show.add_argument("--op", help="only this op's records")
    show.set_defaults(handler=_show)
    retune = actions.add_parser("retune", help="measure again the problems of the records it selects (all by default)")
    retune.add_argument("--op", help="only this op's problems")
    retune.add_argument("--noisy", action="store_true",
                        help="only problems with a record whose spread exceeds the noise bound (KABI_TUNE_MAX_SPREAD)")
    retune.add_argument("--older-than", type=_duration, metavar="DURATION",
                        help="only problems whose oldest record is older than this: 90s, 30m, 12h, 7d")
    retune.set_defaults(handler=_retune)
    export = actions.add_parser("export", help="write every valid record to a file")
    export.add_argument("path")
    export.set_defaults(handler=_export)
    load = actions.add_parser("import", help="merge the records of an exported file into the cache")
    load.add_argument("path")
    load.set_defaults(handler=_import)
    clear = actions.add_parser("clear", help="forget every recorded measurement")
    clear.set_defaults(handler=_clear)


def _show(arguments: argparse.Namespace, console) -> int:
    records = cache.show(arguments.op)
    summary = cache.stats()
    corrupt = f", {summary.corrupt_records} corrupt skipped" if summary.corrupt_records else ""
    console.print(f"tuning cache {summary.path}: {summary.records} records{corrupt}")
    if not records:
        console.print("no records" + (f" for {arguments.op}" if arguments.op else ""))
        return 0
    _print_problems(console, records)
    return 0


def _print_problems(console, records: list[cache.CacheRecord]) -> None:
    """One table per device, op and problem: each record with its execution mode, time, spread, age and flags, and
    the variant it ran where a kernel names one; * marks the pick of each mode."""
    problems: dict[tuple[str, str, str], list[cache.CacheRecord]] = {}
    for record in records:
        problems.setdefault((record.device, record.op, record.problem), []).append(record)
    now = time.time()
    device = None
    for (record_device, op, problem), group in problems.items():
        if record_device != device:
            device = record_device
            console.print(f"device {device}")
        picks = [_pick([record for record in group if record.execution_mode == mode]) for mode in ("eager", "graph")]
        table = Table(title=f"{op} {problem}", title_justify="left")
        variants = any(record.variant for record in group)
        columns = ("pick", "kernel", "mode", "time", "spread", "age", "flags", "note")
        for column in (*columns, "variant") if variants else columns:
            table.add_column(column, overflow="fold")
        for record in group:
            timed = math.isfinite(record.time_us) and not record.gate_only
            picked = any(record is pick for pick in picks)
            table.add_row("*" if picked else "", record.kernel, record.execution_mode,
                          f"{record.time_us:.2f} us" if timed else "-",
                          f"{record.spread:.0%}" if timed else "-",
                          _age(record.recorded_at, now), ", ".join(_flags(record)), record.note,
                          *((record.variant,) if variants else ()),
                          style="bold green" if picked else ("dim" if not timed else ""))
        console.print(table)


def _pick(records: list[cache.CacheRecord]) -> cache.CacheRecord | None:
    """The record the core would pick among these: the fastest finite timed one that was not screened out (the
    first on a tie)."""
    timed = [record for record in records
             if math.isfinite(record.time_us) and not record.gate_only and not record.screened]
    return min(timed, key=lambda record: record.time_us) if timed else None


def _flags(record: cache.CacheRecord) -> list[str]:
    return [name for name, present in (("gate only", record.gate_only), ("memory only", record.memory_only),
                                       ("screened", record.screened), ("failed", math.isinf(record.time_us)))
            if present]


def _age(recorded_at: int, now: float) -> str:
    """How long ago ``recorded_at`` (seconds since the epoch) was, in its largest whole unit; "?" when unknown."""
    if recorded_at <= 0:
        return "?"
    seconds = max(0.0, now - recorded_at)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} s"


_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(text: str) -> float:
    """``"30m"`` -> 1800.0 seconds; a number followed by s, m, h or d."""
    number, unit = text[:-1], text[-1:]
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if unit not in _DURATION_UNITS or not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"expected a duration such as 90s, 30m, 12h or 7d, got {text!r}")
    return value * _DURATION_UNITS[unit]


def _retune(arguments: argparse.Namespace, console) -> int:
    result = cache.retune(arguments.op, noisy=arguments.noisy, older_than_s=arguments.older_than)
    for skipped in result.skipped:
        console.print(f"skipped {skipped.op} {skipped.problem} (device {skipped.device}): {skipped.reason}")
    if not result.reports:
        console.print("nothing to retune" if not result.skipped else "nothing retuned")
        return 0
    console.print(f"retuned {len(result.reports)} problems")
    measured = {(report.op, report.problem) for report in result.reports}
    _print_problems(console, [record for record in cache.show(arguments.op) if (record.op, record.problem) in measured])
    return 0


def _export(arguments: argparse.Namespace, console) -> int:
    count = cache.export(arguments.path)
    console.print(f"exported {count} records to {arguments.path}")
    return 0


def _import(arguments: argparse.Namespace, console) -> int:
    count = cache.import_(arguments.path)
    console.print(f"imported {count} records from {arguments.path} into {cache.directory()}")
    return 0


def _clear(arguments: argparse.Namespace, console) -> int:
    count = cache.stats().records
    cache.clear()
    console.print(f"cleared {count} records from {cache.directory()}")
    return 0
