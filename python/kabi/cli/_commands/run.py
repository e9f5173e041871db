"""``kabi run OP --shape MxNxK --dtype D --device DEV [--repeat N]``: the main job.

Runs the op through ``kabi.ops`` on fresh random inputs, checks the result against the op's reference computed in
float64 with the op's tolerance for the dtype (``registry/ops/<op>.toml``), and prints the pick, the reason, the
error and the median time. Exits 1 if the result is wrong.
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch
from rich.table import Table

from ... import ops
from ..._base.declarations import op_spec
from ..._base.errors import InvalidArgumentError
from ..._selection.bench import bench
from ..._selection.correctness import check_output, reference_output
from ..._selection.explain import explain
from ...ops._scopes import use
from .._arguments import add_problem_arguments, known_op, make_inputs


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


def run(arguments: argparse.Namespace, console) -> int:
    spec = op_spec(known_op(arguments.op))
    if arguments.repeat < 1:
        raise InvalidArgumentError(f"--repeat must be at least 1, got {arguments.repeat}")
    function = getattr(ops, arguments.op)
    a, b = make_inputs(arguments)
    device = a.device
    scope = use(**{arguments.op: arguments.force}) if arguments.force else contextlib.nullcontext()
    with scope:
        start = time.perf_counter()
        result = function(a, b)
        _synchronize(device)
        first_call_ms = (time.perf_counter() - start) * 1e3
        record = explain(function, a, b)  # after the call: the decision it made (tuned on a first call)
        timing = bench(lambda: function(a, b), repeat=arguments.repeat, device=device)

    reference = reference_output(getattr(torch, spec.reference.removeprefix("torch.")), [a, b])
    tolerance = spec.tolerance[arguments.dtype]
    failure = check_output(result, reference, tolerance, expected_dtype=a.dtype)
    norm_error, extreme_error = _relative_errors(result, reference)
    *batch, m, n, k = arguments.shape
    flops = 2.0 * (batch[0] if batch else 1) * m * n * k

    table = Table(title=f"kabi run {arguments.op}", title_justify="left", show_header=False)
    table.add_column("", style="bold")
    table.add_column("")
    layouts = ", ".join(record.problem.layouts) if record.problem else "?"
    table.add_row("problem", f"{'x'.join(map(str, arguments.shape))} {arguments.dtype} on {device} ({layouts})")
    table.add_row("pick", f"{record.pick} ({record.pick_reason})")
    table.add_row("reason", record.reason)
    table.add_row(
        "error vs float64",
        f"norm {norm_error:.2e} (tolerance {tolerance.norm:g}), extreme {extreme_error:.2e} (tolerance {tolerance.extreme:g})",
    )
    table.add_row("check", "[green]PASS[/]" if failure is None else f"[red]FAIL[/]: {failure}")
    table.add_row("first call", f"{first_call_ms:.3f} ms (validation + selection + tuning if due + run)")
    table.add_row("median time", f"{timing.median_us:.2f} us ({flops / timing.median_us / 1e3:.2f} GFLOP/s; "
                                 f"min {timing.min_us:.2f}, max {timing.max_us:.2f}; {timing.count} samples x "
                                 f"{timing.calls_per_sample} calls, {timing.mode})")
    console.print(table)
    return 0 if failure is None else 1
