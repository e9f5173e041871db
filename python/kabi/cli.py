"""The ``kabi`` command line: ``kabi info``, ``kabi list``, ``kabi explain``, ``kabi run`` and more.

Each subcommand group is a module of ``kabi._cli`` with a ``register(subparsers)`` function that adds its parser
and sets ``handler`` (a function taking the parsed arguments and a rich console, returning an exit status). New
groups (``kabi tune``, ``kabi cache``) are new modules there: this file does not change.

Example::

    $ kabi run matmul --shape 512x512x512            # on the GPU if there is one, else the CPU
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from typing import Sequence

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The parser with every subcommand module of ``kabi._cli`` registered, in name order."""
    from . import _cli

    parser = argparse.ArgumentParser(prog="kabi", description="kabi: run the fastest correct kernel for your device.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_info in sorted(pkgutil.iter_modules(_cli.__path__), key=lambda m: m.name):
        if not module_info.name.startswith("_"):
            importlib.import_module(f"{_cli.__name__}.{module_info.name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (also the process's, as the console script)."""
    from rich.console import Console

    from ._errors import KabiError

    arguments = build_parser().parse_args(argv)
    console = Console(highlight=False)
    try:
        return int(arguments.handler(arguments, console) or 0)
    except KabiError as error:
        Console(stderr=True, highlight=False).print(f"[bold red]error:[/] {type(error).__name__}: {error}", markup=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
