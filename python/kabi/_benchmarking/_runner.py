"""``kabi.benchmark``: run an op's suite against the peers, write the results after every problem, resume.

One run: check the arguments, measure the roof (once; a resumed run keeps the one it measured), then for every
(dtype, shape, layout) of the suite measure the problem (:mod:`._problem_run`) in a fresh temporary tuning cache
(so kabi tunes every problem afresh and its tuning time is measured, and the user's cache is left alone), and
rewrite the results file. Rerunning with the same ``out`` and the same parameters skips the problems already in
it; ``fresh=True`` starts over. A progress bar goes to stderr when it is a terminal.

Example::

    >>> results = kabi.benchmark("matmul", suite="quick", device="cpu", out="quick.json")  # doctest: +SKIP
    >>> results.summary["ratios"]["primary"]["auto/oracle"]["geomean"]                   # doctest: +SKIP
    0.99
"""

from __future__ import annotations

import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import torch

from .._base.declarations import op_name_of, op_spec
from .._base.errors import InvalidArgumentError, NotFoundError, UnavailableError
from .._selection import cache as tuning_cache
from ._environment import environment
from ._ops import op_benchmark
from ._peers import Peer
from ._plot import plot_results, require_matplotlib
from ._problem_run import measure_problem
from ._problems import BenchProblem
from ._results import SCHEMA_VERSION, BenchmarkResults, read_document, summarize, write_document
from ._roof import Roof, measure_roof
from ._timing import TimingSettings

__all__ = ["benchmark"]


def _device(device: str | torch.device) -> torch.device:
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError):
        raise InvalidArgumentError(f"kabi bench: device must be cpu, cuda or cuda:N, got {device!r}") from None
    if resolved.type not in ("cpu", "cuda"):
        raise InvalidArgumentError(f"kabi bench: device must be cpu, cuda or cuda:N, got {device!r}")
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise UnavailableError("kabi bench: device is cuda, but torch sees no CUDA device here")
    return resolved


def _peers(available: Sequence[Peer], names: Sequence[str] | None) -> list[Peer]:
    if names is None:
        return list(available)
    by_name = {peer.name: peer for peer in available}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise InvalidArgumentError(f"kabi bench: peers must be among {', '.join(map(repr, by_name))}, "
                                   f"got {', '.join(map(repr, unknown))}")
    return [by_name[name] for name in names]


def _problems(op: str, suite_name: str, dtypes: Sequence[str] | None) -> tuple[list[BenchProblem], list[str]]:
    spec = op_spec(op)
    if suite_name not in spec.suites:
        raise NotFoundError(f"kabi bench: suite must be one of {', '.join(spec.suites)} "
                            f"({spec.path.name}), got {suite_name!r}")
    suite = spec.suites[suite_name]
    chosen = list(dtypes) if dtypes else list(suite.dtypes)
    unknown = [dtype for dtype in chosen if dtype not in spec.problem_dtypes]
    if unknown:
        raise InvalidArgumentError(f"kabi bench: dtype must be among {', '.join(spec.problem_dtypes)} for {op}, "
                                   f"got {', '.join(unknown)}")
    problems = [BenchProblem(shape.positional(spec.shape_order), dtype, layout, routing)
                for dtype in chosen for shape in suite.shapes for layout in suite.layouts
                for routing in suite.routings or ("",)]
    return problems, chosen


def _start_document(out: Path | None, fresh: bool, parameters: dict[str, Any], console: Any) -> dict[str, Any]:
    if out is not None and out.exists() and not fresh:
        document = read_document(out)
        if document.get("schema_version") != SCHEMA_VERSION:
            raise InvalidArgumentError(
                f"kabi bench: {str(out)!r} holds results of schema version {document.get('schema_version')}, this "
                f"kabi writes version {SCHEMA_VERSION}; pass fresh=True (--fresh) to start over, or another out file")
        if document.get("parameters") != parameters:
            raise InvalidArgumentError(
                f"kabi bench: {str(out)!r} holds a run with other parameters ({document.get('parameters')}); "
                f"pass fresh=True (--fresh) to start over, or another out file")
        console.print(f"resuming {out}: {len(document['problems'])} problems already measured are skipped")
        return document
    return {"schema_version": SCHEMA_VERSION, "op": parameters["op"], "suite": parameters["suite"],
            "parameters": parameters, "runs": [], "roof": None, "problems": [], "complete": False, "summary": None}


def benchmark(
    op: Any,
    suite: str,
    *,
    dtypes: Sequence[str] | None = None,
    device: str | torch.device = "cpu",
    out: str | Path | None = None,
    plot: str | Path | None = None,
    fresh: bool = False,
    peers: Sequence[str] | None = None,
    settings: TimingSettings | None = None,
    command: Sequence[str] | None = None,
) -> BenchmarkResults:
    """Benchmark every problem of ``op``'s ``suite`` against its peers and return the results.

    An implementation that raises or answers wrongly, kabi's automatic call included, is recorded as failed with
    why, and the run goes on; a problem whose automatic call failed misses every ratio target.

    Args:
        op: an op name or a ``kabi.ops`` function.
        suite: a suite of the op's registry file (``registry/ops/<op>.toml``, ``[suites.<name>]``).
        dtypes: the dtypes to run (default: the suite's).
        device: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
        out: the JSON results file, rewritten after every problem; an existing one with the same parameters is
            resumed.
        plot: a PNG to draw the results into (needs matplotlib: ``pip install kabi[bench]``).
        fresh: ignore what ``out`` holds and start over.
        peers: names of the peers to measure (default: every peer of the op).
        settings: how long each implementation is measured.
        command: the command line to record (default: this process's).
    """
    name = op_name_of(op)
    benchmark_op = op_benchmark(name)
    resolved_device = _device(device)
    chosen_peers = _peers(benchmark_op.peers, peers)
    problems, chosen_dtypes = _problems(name, suite, dtypes)
    settings = settings if settings is not None else TimingSettings()
    if plot is not None:
        require_matplotlib()
    out_path = Path(out) if out is not None else None
    parameters = {"op": name, "suite": suite, "dtypes": chosen_dtypes, "device": str(resolved_device),
                  "peers": [peer.name for peer in chosen_peers], "timing": asdict(settings)}
    # rich costs a third of a second to import: only a benchmark run pays for it, not `import kabi`.
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True, highlight=False)
    document = _start_document(out_path, fresh, parameters, console)
    document["runs"].append(environment(resolved_device, command if command is not None else [Path(sys.argv[0]).name, *sys.argv[1:]]))
    if document["roof"] is None:
        console.print(f"measuring the roof on {resolved_device} ...")
        document["roof"] = measure_roof(resolved_device, chosen_dtypes).to_json()
    roof = Roof.from_json(document["roof"])
    done = {problem["key"] for problem in document["problems"]}
    pending = [problem for problem in problems if problem.key not in done]
    previous_cache = tuning_cache.directory()
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with tempfile.TemporaryDirectory(prefix="kabi-bench-cache-") as cache_directory, \
            Progress(*columns, console=console, disable=not console.is_terminal) as progress:
        tuning_cache.set_directory(cache_directory)
        try:
            task = progress.add_task(f"{name} {suite}", total=len(problems), completed=len(problems) - len(pending))
            for problem in pending:
                progress.update(task, description=f"{name} {suite}: {problem.key}")
                document["problems"].append(measure_problem(benchmark_op, problem, resolved_device, chosen_peers,
                                                            settings, roof))
                document["complete"] = len(document["problems"]) == len(problems)
                document["summary"] = summarize(document["problems"], benchmark_op.targets)
                if out_path is not None:
                    write_document(out_path, document)
                progress.advance(task)
        finally:
            tuning_cache.set_directory(previous_cache)
            # An interrupted run (Ctrl-C, `timeout -s INT`) still leaves the plot of what it measured.
            if plot is not None and document["problems"]:
                plot_results(document, Path(plot))
    document["complete"] = len(document["problems"]) == len(problems)
    document["summary"] = summarize(document["problems"], benchmark_op.targets)
    if out_path is not None:
        write_document(out_path, document)
    return BenchmarkResults(document, out_path)
