"""``kabi list``: ops x kernels, with each kernel's device, archs, dtypes, layouts and priority."""

from __future__ import annotations

import argparse

from rich.table import Table

from ... import _core
from ..._plugins.discovery import complete_registry
from ...ops._kernel_registration import kernels
from .._arguments import known_op


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("list", help="ops and their kernels")
    parser.add_argument("op", nargs="?", help="only this op")
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace, console) -> int:
    complete_registry()  # plugins may add ops as well as kernels
    ops = [known_op(arguments.op)] if arguments.op else _core.op_list()
    for op in ops:
        info = _core.op_info(op)
        table = Table(title=f"{op}: {info['schema']}", title_justify="left")
        for header in ("kernel", "backend", "kind", "device", "archs", "features", "dtypes", "layouts", "batch", "priority", "plugin"):
            table.add_column(header, overflow="fold")
        for kernel in sorted(kernels(op), key=lambda k: (k.device, -k.priority, k.name)):
            table.add_row(
                kernel.name,
                kernel.backend,
                kernel.kind,
                kernel.device,
                kernel.archs_text,
                ",".join(kernel.features) or "-",
                ",".join(kernel.dtypes),
                "any" if len(kernel.layouts) == len(_core.LAYOUTS) else ",".join(kernel.layouts),
                kernel.batch_mode,
                str(kernel.priority),
                kernel.plugin or "-",
            )
        console.print(table)
    return 0
