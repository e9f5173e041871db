"""``kabi verify OP (--shape MxNxK ... | --suite NAME) [--dtype D] [--device DEV]``: run the correctness gate offline.

Gates every eligible kernel (plugins included) once on each problem and records the verdicts in the tuning cache,
so that C callers, which select only kernels that passed the gate, can serve those problems. Prints one table per
problem: each kernel and its verdict. Exits 1 if no kernel passed some problem.

Example::

    $ kabi verify matmul --shape 64x64x64 --shape 1x1024x1024 --dtype float32 --device cpu
    $ KABI_PLUGIN_PATH=libacme_kabi.so kabi verify matmul --suite cpu
"""

from __future__ import annotations

import argparse

from rich.table import Table

from ..._selection.verify import VerifyReport, verify
from ...ops._front import front_of
from .._arguments import add_suite_or_shapes_arguments, known_op, make_inputs, resolve_device, suite_or_shapes


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("verify", help="gate every eligible kernel on given shapes and record the verdicts")
    add_suite_or_shapes_arguments(parser, "verify")
    parser.set_defaults(handler=run)


def _table(shape: tuple[int, ...], dtype: str, report: VerifyReport) -> Table:
    table = Table(title=f"{'x'.join(map(str, shape))} {dtype} on {report.device}  ({report.problem})",
                  title_justify="left")
    for header in ("kernel", "verdict", "note"):
        table.add_column(header)
    for verdict in report.verdicts:
        earlier = "" if verdict.gated_now else " (recorded earlier)"
        if verdict.passed:
            table.add_row(verdict.kernel, "[green]passed[/]", "")
        else:
            table.add_row(verdict.kernel, f"[red]failed[/]{earlier}", verdict.note)
    return table


def run(arguments: argparse.Namespace, console) -> int:
    function = front_of(known_op(arguments.op)).function  # an unknown op fails here, before anything runs
    device = resolve_device(arguments.device)
    passed = True
    for shape, dtype in suite_or_shapes(arguments):
        problem = argparse.Namespace(shape=shape, dtype=dtype, device=str(device),
                                     transpose_a=arguments.transpose_a, transpose_b=arguments.transpose_b)
        report = verify(function, *make_inputs(problem, seed=0))
        console.print(_table(shape, dtype, report))
        if not report.passed:
            console.print("[bold red]no kernel passed: C callers cannot serve this problem[/]\n")
        passed = passed and report.passed
    return 0 if passed else 1
