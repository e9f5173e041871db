"""``kabi verify OP (--shape M=64,N=64,K=64 ... | --suite NAME) [--attr NAME=VALUE] [--dtype D] [--device DEV]``: run the correctness gate offline.

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
from .._arguments import CommandProblem, add_suite_or_shapes_arguments, problems


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("verify", help="gate every eligible kernel on given shapes and record the verdicts")
    add_suite_or_shapes_arguments(parser, "verify")
    parser.set_defaults(handler=run)


def _table(problem: CommandProblem, report: VerifyReport) -> Table:
    table = Table(title=f"{problem.label} on {report.device}  ({report.problem})",
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
    command_problems = problems(arguments)
    function = front_of(arguments.op).function  # an op without a kabi.ops function fails here, before anything runs
    passed = True
    for problem in command_problems:
        report = verify(function, *problem.inputs(seed=0), **problem.attributes)
        console.print(_table(problem, report))
        if not report.passed:
            console.print("[bold red]no kernel passed: C callers cannot serve this problem[/]\n")
        passed = passed and report.passed
    return 0 if passed else 1
