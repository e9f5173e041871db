"""Host time per call of ``kabi.ops.matmul`` and ``kabi.ops.linear`` against the implementation each chose, called
directly: a Python kernel as the front calls it, a native one through its prepared launch (``_core.PreparedLaunch``,
the leanest call of a native kernel from Python).

On a tiny problem (8x8 float32 on the CPU by default) the kernel's own time is small, so the difference is kabi's
dispatch cost: binding the arguments, keying the call, the decision-table lookup, and the call. linear adds what matmul's key lacks: an
optional input (the bias), an attribute (activation="relu") and a given out. Each figure comes from many short batches
of back-to-back calls (timeit-style), the three subjects interleaved batch by batch so that machine load hits them
alike; the median of the batches is reported, and the minimum too (the least disturbed figure on a busy machine).
The overhead itself is the median of the paired differences: kabi's batch minus the chosen implementation's batch
that ran right after it, so that a drift of the machine's speed during the run (which moves both medians, not
always alike) cancels pair by pair; its interquartile range says how far to trust it. The difference of the two
medians is reported beside it. Goal: kabi within +0.5 us of the chosen implementation.

    python benchmarks/overhead.py [--size 8] [--dtype float32] [--batches 400] [--calls 200] [--cpu N] [--output FILE]
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

import kabi
from kabi import _core
from kabi._base.tensors import descriptor
from kabi.ops._front import front_of


def batch_us(fn: Callable[[], Any], calls: int) -> float:
    """Mean time per call of ``calls`` back-to-back calls, in microseconds."""
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - start) / calls / 1e3


def interleaved_samples(subjects: dict[str, Callable[[], Any]], args: argparse.Namespace,
                        synchronize: Callable[[], Any]) -> dict[str, list[float]]:
    """Microseconds per call of each batch of each subject, batches of the subjects interleaved (in the order of
    ``subjects``), in the order they ran."""
    samples: dict[str, list[float]] = {name: [] for name in subjects}
    for fn in subjects.values():
        batch_us(fn, args.calls)
    for _ in range(args.batches):
        for name, fn in subjects.items():
            samples[name].append(batch_us(fn, args.calls))
            synchronize()
    return samples


def medians_and_minima(samples: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    return {name: {"median_us": statistics.median(values), "min_us": min(values)} for name, values in samples.items()}


def print_table(title: str, figures: dict[str, dict[str, float]]) -> None:
    print(title)
    print(f"  {'us per call':<48} {'median':>8} {'min':>8}")
    for name, figure in figures.items():
        print(f"  {name:<48} {figure['median_us']:8.3f} {figure['min_us']:8.3f}")


def report_overhead(title: str, subjects: dict[str, Callable[[], Any]], kabi_name: str, chosen_name: str,
                    args: argparse.Namespace, device: str) -> dict[str, Any]:
    """Time the subjects, print them, and return the figures with kabi's overhead over the chosen implementation."""
    synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    samples = interleaved_samples(subjects, args, synchronize)
    figures = medians_and_minima(samples)
    print_table(title, figures)
    overhead = {}
    for statistic in ("median_us", "min_us"):
        kabi_us, chosen_us = figures[kabi_name][statistic], figures[chosen_name][statistic]
        overhead[statistic] = kabi_us - chosen_us
        print(f"  kabi dispatch overhead ({statistic}): {kabi_us - chosen_us:+.3f} us "
              f"({kabi_us / chosen_us:.2f}x the chosen implementation)")
    differences = [kabi_us - chosen_us for kabi_us, chosen_us in zip(samples[kabi_name], samples[chosen_name])]
    quartiles = statistics.quantiles(differences, n=4)
    overhead["paired_median_us"] = statistics.median(differences)
    overhead["paired_quartiles_us"] = [quartiles[0], quartiles[2]]
    print(f"  kabi dispatch overhead (median of {len(differences)} paired batches): "
          f"{overhead['paired_median_us']:+.3f} us (quartiles {quartiles[0]:+.3f}, {quartiles[2]:+.3f})")
    return {"figures": figures, "overhead_us": overhead}


def direct_call(chosen: Callable[..., Any], inputs: tuple, device: str, out: Any = None) -> Callable[[], Any]:
    """The leanest call of the implementation kabi chose: a native pick's prepared launch itself (what the hit path
    launches from C), with the output allocated as the front allocates it where no ``out`` is given; a Python pick's
    kernel itself, given the attributes its decision binds as keywords (a hit calls it so, not through the
    ``functools.partial`` that binds them, which costs more than the call it makes)."""
    prepared = getattr(chosen, "prepared", None)
    if prepared is None:
        kernel, keywords = (chosen.func, chosen.keywords) if isinstance(chosen, functools.partial) else (chosen, {})
        if out is None:
            return lambda: kernel(*inputs, **keywords)
        return lambda: kernel(*inputs, **keywords, out=out)
    run = prepared.on_current_stream if device == "cuda" else prepared
    if out is not None:
        return lambda: run(*inputs, out)
    allocate = chosen.allocate_output

    def call() -> Any:
        result = allocate()
        run(*inputs, result)
        return result

    return call


def dispatch_overhead(args: argparse.Namespace, device: str) -> dict[str, Any]:
    """kabi.ops.matmul against the implementation it chose, called directly, and torch.matmul."""
    dtype = getattr(torch, args.dtype)
    a = torch.randn(args.size, args.size, dtype=dtype, device=device)
    b = torch.randn(args.size, args.size, dtype=dtype, device=device)
    matmul = kabi.ops.matmul
    matmul(a, b)
    matmul(a, b)
    chosen, _, _ = front_of(matmul).cache.find((a, b), (), None)
    pick = kabi.explain(matmul, a, b).pick
    subjects = {
        "kabi.ops.matmul": lambda: matmul(a, b),
        f"chosen ({pick}) directly": direct_call(chosen, (a, b), device),
        "torch.matmul": lambda: torch.matmul(a, b),
    }
    title = f"matmul {args.size}x{args.size}x{args.size} {args.dtype} on {device}, torch {torch.__version__}"
    return {"pick": pick, **report_overhead(title, subjects, "kabi.ops.matmul", f"chosen ({pick}) directly", args,
                                            device)}


def linear_dispatch_overhead(args: argparse.Namespace, device: str) -> dict[str, Any]:
    """kabi.ops.linear with every argument kind (x, w, a bias, an activation attribute, out=) against the
    implementation it chose, called directly as the front calls it (the decision binds the attributes), and torch's
    F.linear followed by the activation."""
    dtype = getattr(torch, args.dtype)
    x = torch.randn(args.size, args.size, dtype=dtype, device=device)
    w = torch.randn(args.size, args.size, dtype=dtype, device=device)
    bias = torch.randn(args.size, dtype=dtype, device=device)
    out = torch.empty(args.size, args.size, dtype=dtype, device=device)
    linear = kabi.ops.linear
    cache = front_of(linear).cache
    cache.clear()
    linear(x, w, bias, activation="relu", out=out)
    linear(x, w, bias, activation="relu", out=out)
    chosen, _, _ = cache.find((x, w, bias), ("relu",), None)
    pick = kabi.explain(linear, x, w, bias, activation="relu").pick
    subjects = {
        "kabi.ops.linear": lambda: linear(x, w, bias, activation="relu", out=out),
        f"chosen ({pick}) directly": direct_call(chosen, (x, w, bias), device, out),
        "torch: F.linear, then relu": lambda: torch.relu(torch.nn.functional.linear(x, w, bias)),
    }
    if hasattr(chosen, "prepared"):
        # What a hit cost before the front launched native decisions itself, and still costs where it cannot.
        subjects["its Python launcher"] = lambda: chosen(x, w, bias, out=out)
    title = (f"linear x {args.size}x{args.size}, w {args.size}x{args.size}, bias, activation=relu, out= "
             f"{args.dtype} on {device}")
    return {"pick": pick, **report_overhead(title, subjects, "kabi.ops.linear", f"chosen ({pick}) directly", args,
                                            device)}


def mode_split_dispatch_overhead(args: argparse.Namespace, device: str) -> dict[str, Any]:
    """kabi.ops.matmul where the pick for calls being captured in a CUDA graph is another kernel than the eager pick
    (tuning records stored to make it so, in a throwaway tuning cache), against the eager pick called directly: what
    a hit pays to ask the core whether torch's current stream is being captured (nothing on the CPU, which never is)."""
    dtype = getattr(torch, args.dtype)
    a = torch.randn(args.size, args.size, dtype=dtype, device=device)
    b = torch.randn(args.size, args.size, dtype=dtype, device=device)
    matmul = kabi.ops.matmul
    previous = kabi.cache.directory()
    with tempfile.TemporaryDirectory() as directory:
        kabi.cache.set_directory(directory)
        try:
            matmul(a, b)  # gates the candidates
            eligible = [candidate.name for candidate in kabi.explain(matmul, a, b).candidates if candidate.eligible]
            if len(eligible) < 2:
                return {"skipped": f"needs two eligible kernels on {device}, found {eligible}"}
            eager_pick, graph_pick = eligible[:2]
            graph = _core.TUNING_RECORD_GRAPH_MODE
            _core.tuning_store("matmul", [descriptor(a), descriptor(b)], [], [
                record for index, name in enumerate(eligible)
                for record in ((name, 1.0 if name == eager_pick else 2.0 + index, "", 0, 0.0),
                               (name, 1.0 if name == graph_pick else 2.0 + index, "", graph, 0.0))])
            matmul(a, b)
            matmul(a, b)
            table = front_of(matmul).cache
            chosen, _, kernel = table.find((a, b), (), None)
            captured_kernel = table.find((a, b), (), None, capturing=True)[2]
            if (kernel, captured_kernel) != (eager_pick, graph_pick):
                raise RuntimeError(f"expected a decision of {eager_pick} with {graph_pick} for captured calls, "
                                   f"got {kernel} and {captured_kernel}")
            subjects = {
                "kabi.ops.matmul": lambda: matmul(a, b),
                f"eager pick ({eager_pick}) directly": direct_call(chosen, (a, b), device),
            }
            title = (f"matmul {args.size}x{args.size}x{args.size} {args.dtype} on {device}, eager pick {eager_pick}, "
                     f"{graph_pick} when captured")
            return {"pick": eager_pick, "pick_when_capturing": graph_pick,
                    **report_overhead(title, subjects, "kabi.ops.matmul", f"eager pick ({eager_pick}) directly", args,
                                      device)}
        finally:
            kabi.cache.set_directory(previous)


def pin_to_cpu(cpu: int) -> int | None:
    """Run the process on ``cpu`` (-1: the last CPU it may use; -2: unpinned) and return the CPU, or None where it
    stays unpinned (-2, or no sched_setaffinity on this platform)."""
    if cpu == -2 or not hasattr(os, "sched_setaffinity"):
        return None
    allowed = sorted(os.sched_getaffinity(0))
    chosen = allowed[-1] if cpu == -1 else cpu
    if chosen not in allowed:
        raise SystemExit(f"--cpu {cpu}: this process may run on CPUs {allowed}")
    os.sched_setaffinity(0, {chosen})
    return chosen


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--output", type=Path, help="also write the figures as JSON, with command, date and versions")
    parser.add_argument("--cpu", type=int, default=-1,
                        help="the CPU the process runs on (default: the last it may use; -2: leave it unpinned). "
                             "Pinned, a batch is never split by a migration to another core, whose caches are cold: "
                             "on the 16-core GPU host that spread kabi's and the chosen kernel's batches alike by 2x")
    args = parser.parse_args(argv)
    pinned_cpu = pin_to_cpu(args.cpu)

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    report: dict[str, Any] = {
        "command": " ".join([sys.executable, *sys.argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": {"python": platform.python_version(), "torch": torch.__version__, "kabi": kabi.__version__},
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None},
        "problem": {"size": args.size, "dtype": args.dtype},
        "pinned_cpu": pinned_cpu,
        "dispatch": {device: dispatch_overhead(args, device) for device in devices},
        "linear_dispatch": {device: linear_dispatch_overhead(args, device) for device in devices},
        "mode_split_dispatch": {device: mode_split_dispatch_overhead(args, device) for device in devices},
        "integration": {device: integration(args, device) for device in devices},
    }
    if args.output is not None:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {args.output}")


# -- torch integration: the custom op, arrays and autograd routing (kabi.ops._torch_ops, _arrays, _autograd) ----------


@functools.cache
def plain_custom_op() -> Callable[..., Any]:
    """A plain torch.library custom op wrapping torch.matmul: the usual cost of a custom op, for comparison."""

    @torch.library.custom_op("kabi_overhead::plain_matmul", mutates_args=())
    def plain_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)

    return plain_matmul


def integration(args: argparse.Namespace, device: str) -> dict[str, dict[str, float]]:
    """Host time per call of the torch-integration paths on the same problem, on the CPU and on a GPU if present:
    ``torch.ops.kabi.matmul`` (``.default`` is what a compiled graph calls at run time) beside a plain
    ``torch.library.custom_op`` wrapping torch.matmul; eager kabi with an input that requires grad (through autograd,
    and under no_grad, where the decision is wrapped but autograd is skipped); numpy arrays in and out."""
    import numpy

    plain_matmul = plain_custom_op()

    @torch.no_grad()
    def under_no_grad(matmul: Callable[..., Any], a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return matmul(a, b)

    dtype = getattr(torch, args.dtype)
    custom_op = torch.ops.kabi.matmul
    compiled_call = torch.ops.kabi.matmul.default
    a = torch.randn(args.size, args.size, dtype=dtype, device=device)
    b = torch.randn(args.size, args.size, dtype=dtype, device=device)
    weight = b.clone().requires_grad_()
    subjects = {
        "kabi.ops.matmul": lambda: kabi.ops.matmul(a, b),
        "torch.ops.kabi.matmul": lambda: custom_op(a, b),
        "torch.ops.kabi.matmul.default": lambda: compiled_call(a, b),
        "plain torch.library custom op": lambda: plain_matmul(a, b),
        "torch.matmul": lambda: torch.matmul(a, b),
        "kabi.ops.matmul, b requires grad": lambda: kabi.ops.matmul(a, weight),
        "torch.matmul, b requires grad": lambda: torch.matmul(a, weight),
        "under no_grad: kabi.ops.matmul, b req. grad": lambda: under_no_grad(kabi.ops.matmul, a, weight),
        "under no_grad: torch.matmul, b req. grad": lambda: under_no_grad(torch.matmul, a, weight),
    }
    if device == "cpu":
        a_array, b_array = a.numpy(), b.numpy()
        subjects["kabi.ops.matmul on numpy arrays"] = lambda: kabi.ops.matmul(a_array, b_array)
        subjects["numpy.matmul"] = lambda: numpy.matmul(a_array, b_array)
    synchronize = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    figures = medians_and_minima(interleaved_samples(subjects, args, synchronize))
    print_table(f"torch integration, matmul {args.size}x{args.size}x{args.size} {args.dtype} on {device}", figures)
    return figures


if __name__ == "__main__":
    main()
