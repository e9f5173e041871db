"""``kabi tune OP (--shape M=64,N=64,K=64 ... | --suite NAME) [--attr NAME=VALUE] [--dtype D] [--device DEV]``: tune offline.

Measures every eligible kernel on each problem (whatever the tuning cache already holds), records the results in
the tuning cache so later processes start tuned, and prints one table per problem: every candidate of the op on the
device, with its median time or why it was rejected (by selection, e.g. for the dtype, or by the correctness gate),
and the pick. Exits 1 if some problem has no correct candidate.

Example::

    $ kabi tune matmul --shape 256x256x256 --shape 1x1024x1024 --dtype float32 --device cpu
    $ kabi tune matmul --suite cpu
    $ kabi tune matmul --shape 1x4096x4096 --dtype bfloat16 --device cuda --mode both

``--mode`` says how the candidates are timed: ``eager`` (back to back), ``graph`` (replayed in a CUDA graph, for
calls that run under capture; the candidates are still gated eagerly) or ``both``. Without it, as a call's first
miss would: eager, and in a CUDA graph too for a host-bound problem on a CUDA device.
"""

from __future__ import annotations

import argparse
import dataclasses

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..._base.core_answers import Candidate
from ..._selection.explain import explain
from ..._selection.tuner import MEASUREMENT_MODES, TuningReport, tune
from ..._selection.tuning_policy import TuningSettings, current_settings
from ...ops._front import front_of
from .._arguments import CommandProblem, add_suite_or_shapes_arguments, problems


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tune", help="measure every eligible kernel on given shapes and record the picks")
    add_suite_or_shapes_arguments(parser, "tune")
    parser.add_argument("--warmup", type=int, help="calls before timing each candidate (default from KABI_TUNE_WARMUP or 2)")
    parser.add_argument("--repeat", type=int, help="timed samples per candidate (default from KABI_TUNE_REPEAT or 11)")
    parser.add_argument("--min-time-s", type=float, help="least time the samples of one candidate last together")
    parser.add_argument("--mode", choices=tuple(MEASUREMENT_MODES),
                        help="time eagerly, replayed in a CUDA graph, or both (default: eager, and graph too for "
                             "host-bound problems on CUDA)")
    parser.set_defaults(handler=run)


def _settings(arguments: argparse.Namespace) -> TuningSettings:
    """The environment's (or the scope's) settings, in first-call mode, with the command line's budget."""
    base = current_settings()
    return dataclasses.replace(
        base,
        mode="first-call",
        warmup=arguments.warmup if arguments.warmup is not None else base.warmup,
        repeat=arguments.repeat if arguments.repeat is not None else base.repeat,
        min_time_s=arguments.min_time_s if arguments.min_time_s is not None else base.min_time_s,
    )


def _table(problem: CommandProblem, report: TuningReport, candidates: tuple[Candidate, ...]) -> Table:
    """Measured candidates, fastest first, then those selection rejected before measuring. Only the result column
    wraps, at word boundaries: kernel names and times stay whole."""
    table = Table(title=f"{problem.label} on {report.device}  ({report.problem})",
                  title_justify="left")
    table.add_column("kernel", no_wrap=True)
    table.add_column("median", justify="right", no_wrap=True)
    table.add_column("result", overflow="fold")
    for item in sorted(report.measurements, key=lambda item: item.time_us):
        if not item.passed:
            table.add_row(item.kernel, "-", f"[red]rejected:[/] {item.note}", style="dim")
        elif report.pick is None:  # some passed, yet no pick: the eager run only gated (--mode graph)
            table.add_row(item.kernel, "-", "passed the gate, not timed eagerly")
        else:
            verdict = "[bold green]pick[/]" if item.kernel == report.pick else ""
            table.add_row(item.kernel, f"{item.time_us:.2f} us", verdict)
    for item in sorted(report.graph_measurements, key=lambda item: item.time_us):
        if item.passed:
            verdict = "[bold green]pick in a CUDA graph[/]" if item.kernel == report.graph_pick else "in a CUDA graph"
            table.add_row(item.kernel, f"{item.time_us:.2f} us", verdict)
        else:
            table.add_row(item.kernel, "-", f"[red]failed in a CUDA graph:[/] {item.note}", style="dim")
    measured = {item.kernel for item in report.measurements}
    for candidate in candidates:
        if not candidate.eligible and candidate.name not in measured:
            table.add_row(candidate.name, "-", f"[red]rejected:[/] {candidate.reason}", style="dim")
    return table


def run(arguments: argparse.Namespace, console) -> int:
    command_problems = problems(arguments)
    function = front_of(arguments.op).function  # an op without a kabi.ops function fails here, before any measuring
    settings = _settings(arguments)
    reports = []
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(f"tuning {arguments.op}", total=len(command_problems))
        for problem in command_problems:
            progress.update(task, description=f"tuning {arguments.op} {problem.label}")
            inputs, attributes = problem.inputs(seed=0), dict(problem.attributes)
            report = tune(function, *inputs, settings=settings, mode=arguments.mode, **attributes)
            reports.append((problem, report, explain(function, *inputs, **attributes).candidates))
            progress.advance(task)
    for problem, report, candidates in reports:
        console.print(_table(problem, report, candidates))
        picks = [(label, name) for label, name in (("pick", report.pick), ("pick in a CUDA graph", report.graph_pick))
                 if name is not None]
        summary = "  ".join(f"{label}: [bold]{name}[/]" for label, name in picks) or \
            "pick: [bold red]none: every candidate was rejected[/]"
        console.print(f"{summary}  (measured in {report.seconds:.2f} s)\n")
    return 0 if all(report.pick is not None or report.graph_pick is not None for _, report, _ in reports) else 1
