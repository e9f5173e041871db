"""``kabi explain OP --shape M=512,N=512,K=512 [--attr NAME=VALUE ...] --dtype D --device DEV [--tune]``: the candidates, their reasons, the pick and
what the call will do; ``--tune`` tunes the problem first (as ``kabi tune``) and explains the result."""

from __future__ import annotations

import argparse
import contextlib

from ..._selection.explain import explain
from ..._selection.tuner import tune
from ...ops._scopes import use
from ...ops._front import front_of
from .._arguments import add_problem_arguments, problems


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("explain", help="why a problem runs the kernel it runs")
    add_problem_arguments(parser)
    parser.add_argument("--tune", action="store_true", help="tune the problem first, then explain the tuned pick")
    parser.set_defaults(handler=run)


def run(arguments: argparse.Namespace, console) -> int:
    [problem] = problems(arguments)
    function = front_of(problem.op).function  # an op without a kabi.ops function fails here, naming the ops
    inputs, attributes = problem.inputs(seed=0), dict(problem.attributes)
    scope = use(**{problem.op: arguments.force}) if arguments.force else contextlib.nullcontext()
    with scope:
        if arguments.tune:
            tune(function, *inputs, **attributes)
        record = explain(function, *inputs, **attributes)
    console.print(record)
    return 0 if record.pick is not None else 1
