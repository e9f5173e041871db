"""Where the host time of a kabi hit goes, beyond the chosen kernel's own: ``kabi.ops.linear`` with its torch pick
forced (x, w, bias and out, all 8x8 float32 CPU tensors, activation relu) against that kernel called directly, each
timed (best of five batches), then both profiled with ``perf record`` and the per-symbol difference printed in ns per
call (perf's self time, scaled by each run's time per call). Needs Linux perf.

    python scripts/debug/hit_path_profile.py [--calls 300000]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

import kabi
from kabi.ops._front import front_of
from kabi.ops._scopes import _active


def subjects():
    """The hit and the direct call of its implementation, as callables of no arguments; call them inside
    ``kabi.use(linear="torch.linear.cpu")``."""
    x, w, bias, out = torch.randn(8, 8), torch.randn(8, 8), torch.randn(8), torch.empty(8, 8)
    linear = kabi.ops.linear
    linear(x, w, bias, activation="relu", out=out)
    linear(x, w, bias, activation="relu", out=out)
    chosen, _, _ = front_of(linear).cache.find((x, w, bias), ("relu",), _active.get())
    kernel, keywords = chosen.func, chosen.keywords
    return {"kabi": lambda: linear(x, w, bias, activation="relu", out=out),
            "direct": lambda: kernel(x, w, bias, **keywords, out=out)}


def time_per_call(call, calls: int) -> float:
    """Best of five batches, in us per call."""
    for _ in range(1000):
        call()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def self_ns(report: str, us_per_call: float) -> dict[str, float]:
    """perf report's self percentages as ns per call."""
    table = {}
    for line in report.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].endswith("%") and not line.startswith("#"):
            table[" ".join(parts[1:])[:100]] = float(parts[0].rstrip("%")) / 100 * us_per_call * 1000
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300000)
    parser.add_argument("--subject", choices=("kabi", "direct"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.subject:
        with kabi.use(linear="torch.linear.cpu"):
            print(time_per_call(subjects()[args.subject], args.calls))
        return
    print(f"linear 8x8 float32 CPU, torch pick forced, torch {torch.__version__}")
    times, reports = {}, {}
    with tempfile.TemporaryDirectory() as directory:
        for subject in ("kabi", "direct"):
            data = Path(directory) / f"{subject}.data"
            command = [sys.executable, __file__, "--subject", subject, "--calls", str(args.calls)]
            run = subprocess.run(["perf", "record", "-q", "-o", str(data), *command], capture_output=True, text=True,
                                 check=True)
            times[subject] = float(run.stdout.strip().splitlines()[-1])
            reports[subject] = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort",
                                               "dso,symbol", "-g", "none", "--stdio"], capture_output=True, text=True,
                                              check=True).stdout
    print(f"us per call (best of 5 batches of {args.calls}): kabi {times['kabi']:.3f}, direct {times['direct']:.3f}, "
          f"difference {times['kabi'] - times['direct']:+.3f}")
    kabi_ns, direct_ns = self_ns(reports["kabi"], times["kabi"]), self_ns(reports["direct"], times["direct"])
    differences = sorted(((kabi_ns.get(name, 0.0) - direct_ns.get(name, 0.0), name)
                          for name in set(kabi_ns) | set(direct_ns)), reverse=True)
    print("ns per call more in kabi's run, by symbol (perf self time):")
    for difference, name in differences[:25]:
        print(f"  {difference:7.1f}  {name}")


if __name__ == "__main__":
    main()
