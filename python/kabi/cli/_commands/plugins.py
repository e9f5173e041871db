"""``kabi plugins check PATH...``: load each plugin library in a child process and say what it did.

A plugin runs inside the process that loads it, so one whose ``kabi_plugin_init`` crashes takes ``kabi info`` (or
any C program) down with it. ``check`` shows which library it is: each path gets a verdict, loaded (name, version,
kernels), refused (why), crashed (the signal) or timed out. Exits 1 unless every plugin loaded.

Example::

    $ kabi plugins check build/libacme_kabi.so /opt/vendor/lib/*.so
"""

from __future__ import annotations

import argparse

from rich.table import Table

from ..._base.errors import InvalidArgumentError
from ..._plugins.check import check_plugins

_STYLES = {"loaded": "green", "refused": "red", "crashed": "bold red", "timed out": "bold red"}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("plugins", help="check plugin libraries safely, each in a child process")
    actions = parser.add_subparsers(dest="plugins_action", metavar="ACTION", required=True)
    check = actions.add_parser("check", help="load each plugin library in a child process and report its verdict")
    check.add_argument("paths", nargs="+", metavar="PATH", help="plugin shared libraries")
    check.add_argument("--timeout-s", type=float, default=60.0,
                       help="seconds one plugin may take to load before it counts as hung (default 60)")
    check.set_defaults(handler=_check)


def _check(arguments: argparse.Namespace, console) -> int:
    if not arguments.timeout_s > 0:
        raise InvalidArgumentError(f"--timeout-s must be a number of seconds > 0, got {arguments.timeout_s:g}")
    verdicts = check_plugins(arguments.paths, arguments.timeout_s)
    table = Table(title="plugins check", title_justify="left")
    for header in ("path", "verdict", "plugin", "version", "kernels", "why"):
        table.add_column(header, overflow="fold")
    for verdict in verdicts:
        table.add_row(
            verdict.path,
            f"[{_STYLES[verdict.state]}]{verdict.state}[/]",
            verdict.name or "-",
            verdict.version or "-",
            " ".join(verdict.kernels) or "-",
            verdict.message,
        )
    console.print(table)
    return 0 if all(verdict.state == "loaded" for verdict in verdicts) else 1
