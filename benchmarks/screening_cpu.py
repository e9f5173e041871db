"""What the screen saves on the CPU: tuning time per problem with N candidates, screen on and off.

The candidates are the CPU's own matmul kernels (the CPU plugin's OpenBLAS GEMM, torch's) plus N - 2 torch-native
stand-ins that do the same product and k extra ones (k = 1..N-2): a large set in which most candidates are clearly
slower than the best, as a GPU's Triton configs are. Each problem is tuned with ``kabi.tune`` in a fresh cache,
screen off (``screen_margin`` inf: every candidate measured in full, as before the screen) and on (the default),
alternately, ``--runs`` times; the medians are printed and written as JSON.

    OPENBLAS_NUM_THREADS=1 python benchmarks/screening_cpu.py [--candidates 12] [--problems 64x64x64 256x256x256]
        [--runs 3] [--threads 1] [--output F]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import tempfile
import time
from pathlib import Path

import torch

import kabi
from kabi._selection.tuning_policy import current_settings


def _slower(extra: int):
    def kernel(a, b, out=None):
        result = torch.matmul(a, b)
        for _ in range(extra):
            result = torch.matmul(a, b)
        return result
    return kernel


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=12)
    parser.add_argument("--problems", nargs="+", default=[(64, 64, 64), (256, 256, 256)], metavar="MxNxK",
                        type=lambda text: tuple(int(size) for size in text.split("x")))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: on a shared machine, oversubscribed threads stall for whole slices)")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    names = [f"bench.slower{extra}" for extra in range(1, args.candidates - 1)]
    for extra, name in enumerate(names, start=1):
        kabi.register_kernel("matmul", _slower(extra), name=name, dtypes=["float32"])
    rows = []
    with tempfile.TemporaryDirectory(prefix="kabi-screening-") as directory:
        for m, n, k in args.problems:
            a, b = torch.randn(m, k), torch.randn(k, n)
            seconds: dict[str, list[float]] = {"off": [], "on": []}
            measured: dict[str, int] = {}
            for run in range(args.runs):
                for label, margin in (("off", math.inf), ("on", 0.25)):
                    kabi.cache.set_directory(Path(directory, f"{m}x{n}x{k}-{label}-{run}"))
                    settings = dataclasses.replace(current_settings(), screen_margin=margin)
                    start = time.perf_counter()
                    report = kabi.tune(kabi.ops.matmul, a, b, settings=settings)
                    seconds[label].append(time.perf_counter() - start)
                    measured[label] = sum(item.contends for item in report.measurements)
            row = {"problem": [m, n, k], "candidates": len(report.measurements),
                   "tuning_s_screen_off": statistics.median(seconds["off"]),
                   "tuning_s_screen_on": statistics.median(seconds["on"]),
                   "measured_in_full_screen_off": measured["off"], "measured_in_full_screen_on": measured["on"],
                   "pick": report.pick}
            rows.append(row)
            print(f"{m}x{n}x{k}: {row['candidates']} candidates; tuning {row['tuning_s_screen_off']:.3f} s with the "
                  f"screen off ({measured['off']} in full), {row['tuning_s_screen_on']:.3f} s on "
                  f"({measured['on']} in full); pick {report.pick}")
    kabi.cache.set_directory(None)
    if args.output is not None:
        args.output.write_text(json.dumps({"rows": rows, "runs": args.runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
