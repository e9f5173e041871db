"""The ``kabi`` command line: ``kabi info``, ``kabi list``, ``kabi explain``, ``kabi run`` and more.

Each subcommand group is a module of ``kabi.cli._commands`` with a ``register(subparsers)`` function that adds its
parser and sets ``handler`` (a function taking the parsed arguments and a rich console, returning an exit status). New
groups (``kabi tune``, ``kabi cache``) are new modules there: this file does not change.

Example::

    $ kabi run matmul --shape 512x512x512            # on the GPU if there is one, else the CPU
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import re
import sys
from typing import Sequence

__all__ = ["build_parser", "main"]

# Without a terminal rich would wrap at 80 columns; tables of kernel names need more.
_WIDTH_WITHOUT_TERMINAL = 200


class _Parser(argparse.ArgumentParser):
    """argparse, except that an argument starting with "-" and a digit is a value, never an option: argparse takes
    only plain negative numbers as values, so ``--shape -3x4x4`` would fail with "expected one argument" instead of
    the shape's own message. No kabi option starts with a digit."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\d")


def _version_text() -> str:
    from .. import _core

    abi = _core.abi_version()
    return f"kabi {_core.library_version()} (C ABI {abi >> 16}.{abi & 0xFFFF})"


def build_parser() -> argparse.ArgumentParser:
    """The parser with every subcommand module of ``kabi.cli._commands`` registered, in name order."""
    from . import _commands

    parser = _Parser(prog="kabi", description="kabi: run the fastest correct kernel for your device.")
    parser.add_argument("--version", action="version", version=_version_text())
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_info in sorted(pkgutil.iter_modules(_commands.__path__), key=lambda m: m.name):
        importlib.import_module(f"{_commands.__name__}.{module_info.name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (also the process's, as the console script).

    Every error reaches the user the same way: a ``kabi.KabiError`` from any command prints one line,
    ``error: <message>``, and exits 2, as argparse does for a malformed command line (by ``SystemExit``)."""
    from rich.console import Console

    from .._base.errors import KabiError

    arguments = build_parser().parse_args(argv)
    width = None if sys.stdout.isatty() or "COLUMNS" in os.environ else _WIDTH_WITHOUT_TERMINAL
    console = Console(highlight=False, width=width)
    try:
        return int(arguments.handler(arguments, console) or 0)
    except KabiError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2

