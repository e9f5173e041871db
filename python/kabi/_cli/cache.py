"""``kabi cache show|export PATH|import PATH|clear``: the persistent tuning cache.

Example::

    $ kabi cache show --op matmul
    $ kabi cache export tuned-h200.log      # on the machine that tuned
    $ kabi cache import tuned-h200.log      # on another machine with the same device signature
"""

from __future__ import annotations

import argparse
import math

from rich.table import Table

from .. import _cache_api as cache


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("cache", help="show, export, import or clear the tuning cache")
    actions = parser.add_subparsers(dest="cache_action", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="every recorded measurement: problem, kernel, time or why it failed")
    show.add_argument("--op", help="only this op's records")
    show.set_defaults(handler=_show)
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
    fastest: dict[tuple[str, str, str], float] = {}
    for record in records:
        group = (record.device, record.op, record.problem)
        fastest[group] = min(fastest.get(group, math.inf), record.time_us)
    for device in sorted({record.device for record in records}):
        table = Table(title=f"device {device}", title_justify="left")
        for column in ("op", "problem", "kernel", "time", "note"):
            table.add_column(column, overflow="fold")
        previous = None
        for record in (r for r in records if r.device == device):
            group = (record.device, record.op, record.problem)
            if not math.isfinite(record.time_us):
                time_text, style = "failed", "dim"
            else:
                time_text, style = f"{record.time_us:.2f} us", "bold green" if record.time_us == fastest[group] else ""
            shown = (record.op, record.problem) if group != previous else ("", "")
            table.add_row(*shown, record.kernel, time_text, record.note, style=style)
            previous = group
        console.print(table)
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
