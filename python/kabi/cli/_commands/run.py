"""``kabi run OP --shape M=512,N=512,K=512 [--batch 2,3] [--attr NAME=VALUE ...] [--dtype D] [--absent INPUT]
[--device DEV] [--repeat N]``: the main job.

Runs the op through its ``kabi.ops`` function on fresh inputs from the op's input generator (attributes by name),
checks the result against the op's reference (``registry/ops/<op>.toml``, computed in float64) with the op's
tolerance for the dtype, and prints the pick, the reason, the error and the median time. Exits 1 if the result is
wrong.
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch
from rich.table import Table

from ... import _core, ops
from ..._base.declarations import op_spec, resolve_callable
from ..._base.errors import InvalidArgumentError
from ..._base.tensors import torch_dtype
from ..._benchmarking._ops import OP_BENCHMARKS
from ..._benchmarking._problems import BenchProblem
from ..._selection.bench import bench
from ..._selection.correctness import check_output, reference_output
from ..._selection.explain import explain
from ...ops._scopes import use
from .._arguments import CommandProblem, add_problem_arguments, problems


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("run", help="run an op on random inputs, check it, time it")
    add_problem_arguments(parser)
    parser.add_argument("--repeat", type=int, default=21, help="timed samples (default 21)")
    parser.set_defaults(handler=run)


def _relative_errors(result: torch.Tensor, reference: torch.Tensor) -> tuple[float, float]:
    difference = result.to(torch.float64) - reference
    norm = float(torch.linalg.vector_norm(difference) / max(float(torch.linalg.vector_norm(reference)), 1e-300))
    extreme = float(difference.abs().max() / max(float(reference.abs().max()), 1e-300)) if reference.numel() else 0.0
    return norm, extreme


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _throughput(problem: CommandProblem, median_us: float) -> str:
    """``"12.3 GFLOP/s; "`` for an op ``kabi bench`` knows the work of, else nothing."""
    benchmark = OP_BENCHMARKS.get(problem.op)
    if benchmark is None:
        return ""
    shape = problem.shape.positional(op_spec(problem.op).shape_order)
    return f"{benchmark.flops(BenchProblem(shape, problem.dtype, 'row_major')) / median_us / 1e3:.2f} GFLOP/s; "


def run(arguments: argparse.Namespace, console) -> int:
    if arguments.repeat < 1:
        raise InvalidArgumentError(f"--repeat must be at least 1, got {arguments.repeat}")
    [problem] = problems(arguments)
    function = getattr(ops, problem.op, None)
    if function is None:
        raise InvalidArgumentError(f"kabi run: {problem.op} has no kabi.ops function (it is registered in libkabi "
                                   "only); register it with kabi.register_op to run it from Python")
    spec = op_spec(problem.op)
    inputs = problem.inputs()
    attributes = dict(problem.attributes)
    device = problem.device
    first_output = _core.op_schema(problem.op)["outputs"][0]
    output_dtype = problem.dtypes[first_output["type_variable"]] if first_output["type_variable"] else first_output["dtype"]
    scope = use(**{problem.op: arguments.force}) if arguments.force else contextlib.nullcontext()
    with scope:
        start = time.perf_counter()
        result = function(*inputs, **attributes)
        _synchronize(device)
        first_call_ms = (time.perf_counter() - start) * 1e3
        record = explain(function, *inputs, **attributes)  # after the call: the decision it made (tuned on a first call)
        timing = bench(lambda: function(*inputs, **attributes), repeat=arguments.repeat, device=device)

    reference = reference_output(resolve_callable(spec.reference), inputs, attributes)
    tolerance = spec.tolerance[problem.dtype]
    failure = check_output(result, reference, tolerance, expected_dtype=torch_dtype(output_dtype))
    norm_error, extreme_error = _relative_errors(result, reference)

    table = Table(title=f"kabi run {arguments.op}", title_justify="left", show_header=False)
    table.add_column("", style="bold")
    table.add_column("")
    layouts = ", ".join(record.problem.layouts) if record.problem else "?"
    table.add_row("problem", f"{problem.label} on {device} ({layouts})")
    table.add_row("pick", f"{record.pick} ({record.pick_reason})")
    table.add_row("reason", record.reason)
    table.add_row(
        "error vs float64",
        f"norm {norm_error:.2e} (tolerance {tolerance.norm:g}), extreme {extreme_error:.2e} (tolerance {tolerance.extreme:g})",
    )
    table.add_row("check", "[green]PASS[/]" if failure is None else f"[red]FAIL[/]: {failure}")
    table.add_row("first call", f"{first_call_ms:.3f} ms (validation + selection + tuning if due + run)")
    table.add_row("median time", f"{timing.median_us:.2f} us ({_throughput(problem, timing.median_us)}"
                                 f"min {timing.min_us:.2f}, max {timing.max_us:.2f}; {timing.count} samples x "
                                 f"{timing.calls_per_sample} calls, {timing.mode})")
    console.print(table)
    return 0 if failure is None else 1
