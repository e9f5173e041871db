"""Host time per call of ``kabi.ops.matmul`` against the implementation it chose, called directly.

On a tiny problem (8x8 float32 on the CPU by default) the kernel's own time is small, so the difference is kabi's
dispatch cost: building the decision-cache key, the lookup, and the call. Each figure is the median over many
batches of back-to-back calls (timeit-style). Goal: kabi within +1 us of the chosen implementation.

    python benchmarks/overhead.py [--size 8] [--dtype float32] [--batches 200] [--calls 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

import torch

import kabi
from kabi._dispatch import front_of


def per_call_us(fn: Callable[[], Any], batches: int, calls: int) -> float:
    """Median over ``batches`` of the mean time of ``calls`` back-to-back calls, in microseconds."""
    for _ in range(calls):
        fn()
    samples = []
    for _ in range(batches):
        start = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter_ns() - start) / calls / 1e3)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--batches", type=int, default=200)
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args(argv)

    dtype = getattr(torch, args.dtype)
    a = torch.randn(args.size, args.size, dtype=dtype)
    b = torch.randn(args.size, args.size, dtype=dtype)
    matmul = kabi.ops.matmul
    matmul(a, b)
    front = front_of(matmul)
    (chosen,) = front.cache.entries.values()
    pick = kabi.explain(matmul, a, b).pick

    # Interleave the measurements so that machine noise hits all three alike; keep each one's best round.
    rounds = {"kabi.ops.matmul": [], f"chosen ({pick}) directly": [], "torch.matmul": []}
    calls = {
        "kabi.ops.matmul": lambda: matmul(a, b),
        f"chosen ({pick}) directly": lambda: chosen(a, b),
        "torch.matmul": lambda: torch.matmul(a, b),
    }
    for _ in range(5):
        for name, fn in calls.items():
            rounds[name].append(per_call_us(fn, args.batches // 5, args.calls))
    results = {name: min(values) for name, values in rounds.items()}

    kabi_us = results["kabi.ops.matmul"]
    chosen_us = results[f"chosen ({pick}) directly"]
    print(f"matmul {args.size}x{args.size}x{args.size} {args.dtype} on cpu, torch {torch.__version__}")
    for name, value in results.items():
        print(f"  {name:<40} {value:8.3f} us/call")
    print(f"  kabi dispatch overhead: {kabi_us - chosen_us:+.3f} us ({kabi_us / chosen_us:.2f}x the chosen implementation)")


if __name__ == "__main__":
    main()
