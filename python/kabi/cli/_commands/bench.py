"""``kabi bench OP --suite NAME [--dtype D] [--device cuda|cpu] --out FILE.json --plot FILE.png``: kabi's automatic
choice against every candidate and the peers a user would call instead, with the roof measured in the same run;
and ``kabi bench-report FILE.json... [--into FILE.md]``: the markdown tables (and plots) of results files.

An interrupted run resumes: run the same command again and the problems already in ``--out`` are skipped
(``--fresh`` starts over).

Example::

    $ kabi bench matmul --suite quick --device cpu --out quick.json --plot quick.png
    $ kabi bench-report benchmarks/results/*.json --into benchmarks/results/README.md
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from rich.table import Table

from ..._base.errors import InvalidArgumentError
from ..._benchmarking import TimingSettings, benchmark, read_document, render_markdown, replace_section
from .._arguments import resolve_device


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("bench", help="benchmark an op's suite: kabi's choice against every candidate "
                                                 "and the peers, with the measured roof")
    parser.add_argument("op", help="the op, e.g. matmul")
    parser.add_argument("--suite", required=True, help="a suite of registry/ops/<op>.toml (e.g. quick, llama3-8b-decode)")
    parser.add_argument("--dtype", action="append", help="a dtype to run; repeat for more (default: the suite's)")
    parser.add_argument("--device", default="auto",
                        help="cpu, cuda or cuda:N (default: the GPU if there is one, else the CPU)")
    parser.add_argument("--out", type=Path, help="the JSON results file, written after every problem; rerun the "
                        "same command to resume an interrupted run")
    parser.add_argument("--plot", type=Path, help="a PNG of the results (needs matplotlib)")
    parser.add_argument("--fresh", action="store_true", help="start over instead of resuming --out")
    parser.add_argument("--peer", action="append", help="measure only this peer; repeat for more (default: all)")
    defaults = TimingSettings()
    parser.add_argument("--rounds", type=int, default=defaults.rounds, help=f"interleaved rounds (default {defaults.rounds})")
    parser.add_argument("--repeat", type=int, default=defaults.repeat, help=f"samples per round (default {defaults.repeat})")
    parser.add_argument("--min-time-s", type=float, default=defaults.min_time_s,
                        help=f"least time of one implementation's samples in a round (default {defaults.min_time_s})")
    parser.add_argument("--steady-state-s", type=float, default=defaults.steady_state_s,
                        help="on a GPU, seconds of unmeasured calls before a problem's first round, to reach the "
                        f"power-limited clock (default {defaults.steady_state_s})")
    parser.add_argument("--condition-s", type=float, default=defaults.condition_s,
                        help="on a GPU, seconds of an implementation's own unmeasured calls before each of its "
                        f"measurements, so that none is timed at the clock another left (default {defaults.condition_s})")
    parser.set_defaults(handler=run)

    report = subparsers.add_parser("bench-report", help="markdown tables (and plots) of kabi bench results files")
    report.add_argument("files", type=Path, nargs="+", help="results files written by kabi bench --out")
    report.add_argument("--into", type=Path, help="a markdown file whose section between <!-- kabi-bench:begin --> "
                        "and <!-- kabi-bench:end --> is replaced (default: print the markdown)")
    report.set_defaults(handler=run_report)


def _command(arguments: argparse.Namespace) -> list[str]:
    """The command line that reproduces this run, every option spelled out."""
    command = ["kabi", "bench", arguments.op, "--suite", arguments.suite, "--device", arguments.device]
    for dtype in arguments.dtype or ():
        command += ["--dtype", dtype]
    for peer in arguments.peer or ():
        command += ["--peer", peer]
    command += ["--rounds", str(arguments.rounds), "--repeat", str(arguments.repeat),
                "--min-time-s", str(arguments.min_time_s), "--steady-state-s", str(arguments.steady_state_s),
                "--condition-s", str(arguments.condition_s)]
    for option in ("out", "plot"):
        if getattr(arguments, option) is not None:
            command += [f"--{option}", str(getattr(arguments, option))]
    return command + (["--fresh"] if arguments.fresh else [])


def _summary_table(results) -> Table:
    table = Table(title=f"{results.document['op']} {results.document['suite']}: kabi's choice against each "
                        f"(primary figures; > 1 means kabi is faster)", title_justify="left")
    for column in ("ratio", "geomean", "min", "worst problem", "problems"):
        table.add_column(column, justify="left" if column in ("ratio", "worst problem") else "right")
    for ratio, values in results.summary["ratios"].get("primary", {}).items():
        table.add_row(ratio, f"{values['geomean']:.3f}", f"{values['min']:.3f}", values["worst"], str(values["count"]))
    return table


def run(arguments: argparse.Namespace, console) -> int:
    arguments.device = str(resolve_device(arguments.device))
    try:
        settings = TimingSettings(arguments.rounds, arguments.repeat, arguments.min_time_s, arguments.steady_state_s,
                                  arguments.condition_s)
    except ValueError as error:
        raise InvalidArgumentError(str(error)) from None
    results = benchmark(arguments.op, arguments.suite, dtypes=arguments.dtype, device=arguments.device,
                        out=arguments.out, plot=arguments.plot, fresh=arguments.fresh, peers=arguments.peer,
                        settings=settings, command=_command(arguments))
    console.print(_summary_table(results))
    for target in results.summary["targets"]:
        verdict = {True: "[green]met[/]", False: "[red]missed[/]", None: "[yellow]no data[/]"}[target["met"]]
        misses = f" (below the goal: {', '.join(target['misses'])})" if target["misses"] else ""
        console.print(f"target {target['ratio']} {target['statistic']} >= {target['goal']}: {verdict}{misses}")
    skipped = sorted({f"{item['name']}: {item['error']}" for problem in results.problems
                      for item in problem["implementations"] if item["status"] == "skipped"})
    for line in skipped:
        console.print(f"[yellow]{line}[/]")
    written = [str(path) for path in (arguments.out, arguments.plot) if path is not None]
    state = "complete" if results.complete else "incomplete"
    console.print(f"{len(results.problems)} problems, {state}" + (f"; wrote {', '.join(written)}" if written else ""))
    return 0


def run_report(arguments: argparse.Namespace, console) -> int:
    documents = [read_document(path) for path in arguments.files]
    base = arguments.into.parent if arguments.into is not None else Path.cwd()
    plots = []
    for path in arguments.files:
        plot = path.with_suffix(".png")
        plots.append(Path(os.path.relpath(plot, base)) if plot.exists() else None)
    markdown = render_markdown(documents, plots)
    if arguments.into is None:
        console.print(markdown, markup=False, highlight=False, soft_wrap=True)
        return 0
    arguments.into.write_text(replace_section(arguments.into.read_text(), markdown, name=str(arguments.into)))
    console.print(f"wrote the results of {len(documents)} files into {arguments.into}")
    return 0
