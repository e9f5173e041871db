"""Host time per call of ``kabi.ops.matmul`` against the implementation it chose, called directly.

On a tiny problem (8x8 float32 on the CPU by default) the kernel's own time is small, so the difference is kabi's
dispatch cost: building the decision-cache key, the lookup, and the call. Each figure comes from many short batches
of back-to-back calls (timeit-style), the three subjects interleaved batch by batch so that machine load hits them
alike; the median of the batches is reported, and the minimum too (the least disturbed figure on a busy machine).
Goal: kabi within +1 us of the chosen implementation.

    python benchmarks/overhead.py [--size 8] [--dtype float32] [--batches 400] [--calls 200]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

import torch

import kabi
from kabi._dispatch import front_of


def batch_us(fn: Callable[[], Any], calls: int) -> float:
    """Mean time per call of ``calls`` back-to-back calls, in microseconds."""
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn()
    return (time.perf_counter_ns() - start) / calls / 1e3


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args(argv)

    dtype = getattr(torch, args.dtype)
    a = torch.randn(args.size, args.size, dtype=dtype)
    b = torch.randn(args.size, args.size, dtype=dtype)
    matmul = kabi.ops.matmul
    matmul(a, b)
    matmul(a, b)
    front = front_of(matmul)
    (chosen,) = front.cache.entries.values()
    pick = kabi.explain(matmul, a, b).pick

    subjects = {
        "kabi.ops.matmul": lambda: matmul(a, b),
        f"chosen ({pick}) directly": lambda: chosen(a, b),
        "torch.matmul": lambda: torch.matmul(a, b),
    }
    samples: dict[str, list[float]] = {name: [] for name in subjects}
    for fn in subjects.values():
        batch_us(fn, args.calls)
    for _ in range(args.batches):
        for name, fn in subjects.items():
            samples[name].append(batch_us(fn, args.calls))

    print(f"matmul {args.size}x{args.size}x{args.size} {args.dtype} on cpu, torch {torch.__version__}")
    print(f"  {'us per call':<40} {'median':>8} {'min':>8}")
    for name, values in samples.items():
        print(f"  {name:<40} {statistics.median(values):8.3f} {min(values):8.3f}")
    kabi_samples, chosen_samples = samples["kabi.ops.matmul"], samples[f"chosen ({pick}) directly"]
    for statistic in (statistics.median, min):
        kabi_us, chosen_us = statistic(kabi_samples), statistic(chosen_samples)
        print(
            f"  kabi dispatch overhead ({statistic.__name__}): {kabi_us - chosen_us:+.3f} us "
            f"({kabi_us / chosen_us:.2f}x the chosen implementation)"
        )
    integration(args)


# -- torch integration: the custom op, arrays and autograd routing (kabi._torch_ops, _arrays, _autograd) ----------


def integration(args: argparse.Namespace) -> None:
    """Host time per call of the torch-integration paths on the same problem, on the CPU and on a GPU if present:
    ``torch.ops.kabi.matmul`` (``.default`` is what a compiled graph calls at run time) beside a plain
    ``torch.library.custom_op`` wrapping torch.matmul; eager kabi with an input that requires grad (through autograd,
    and under no_grad, where the decision is wrapped but autograd is skipped); numpy arrays in and out."""
    import numpy

    @torch.library.custom_op("kabi_overhead::plain_matmul", mutates_args=())
    def plain_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)

    @torch.no_grad()
    def under_no_grad(matmul: Callable[..., Any], a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return matmul(a, b)

    dtype = getattr(torch, args.dtype)
    custom_op = torch.ops.kabi.matmul
    compiled_call = torch.ops.kabi.matmul.default
    for device in ["cpu"] + (["cuda"] if torch.cuda.is_available() else []):
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
        samples: dict[str, list[float]] = {name: [] for name in subjects}
        for fn in subjects.values():
            batch_us(fn, args.calls)
        for _ in range(args.batches):
            for name, fn in subjects.items():
                samples[name].append(batch_us(fn, args.calls))
                synchronize()
        print(f"torch integration, matmul {args.size}x{args.size}x{args.size} {args.dtype} on {device}")
        print(f"  {'us per call':<44} {'median':>8} {'min':>8}")
        for name, values in samples.items():
            print(f"  {name:<44} {statistics.median(values):8.3f} {min(values):8.3f}")


if __name__ == "__main__":
    main()
