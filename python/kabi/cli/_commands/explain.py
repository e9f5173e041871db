"""``kabi explain OP --shape MxNxK --dtype D --device DEV [--tune]``: the candidates, their reasons, the pick and
what the call will do; ``--tune`` tunes the problem first (as ``kabi tune``) and explains the result."""

from __future__ import annotations

import argparse
import contextlib

from ..._selection.explain import explain
from ..._selection.tuner import tune
from ...ops._scopes import use
from .._arguments import add_problem_arguments, known_op, make_inputs


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("explain", help="why a problem runs the kernel it runs")
    add_problem_arguments(parser)
    parser.add_argument("--tune", action="store_true", help="tune the problem first, then explain the tuned pick")
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace, console) -> int:
    known_op(arguments.op)
    a, b = make_inputs(arguments, seed=0)
    scope = use(**{arguments.op: arguments.force}) if arguments.force else contextlib.nullcontext()
    with scope:
        if arguments.tune:
            tune(arguments.op, a, b)
        record = explain(arguments.op, a, b)
    console.print(record)
    return 0 if record.pick is not None else 1
