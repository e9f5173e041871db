"""How close auto-selection comes to the best single kernel, and what tuning costs, on a registry shape suite.

For every (shape, dtype) of the suite, in a fresh temporary tuning cache:

- the first ``kabi.ops.matmul`` call tunes the problem; its tuning time (``kabi.stats().tuning_seconds``) and
  the whole first call's time are recorded;
- then ``kabi.ops.matmul`` as auto-selected, and each eligible kernel forced with ``kabi.use``, are timed with
  ``kabi.bench`` through the same front, interleaved round by round so machine load hits them alike; each figure is
  the least of the rounds' medians (the least disturbed one on a busy machine); the order rotates each round.

The figure of merit is **best_candidate_time / autoselected_time** per problem — higher is better; 1.0 means the
auto-selected kernel is as fast as the best kernel forced by hand — and its geometric mean over the suite (goal:
>= 0.95). The same ratio of the fastest single samples is recorded too: on a machine shared with other work it is
the least disturbed estimate. Results go to a JSON file with the command, date, versions and machine.

    python benchmarks/autoselect.py [--suite cpu] [--device cpu] [--rounds 5] [--repeat 7] [--threads N]
                                    [--output benchmarks/results/cpu-autoselect.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import json
import math
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch

import kabi
from kabi._registry import op_spec
from kabi._tuning_policy import current_settings


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _processor_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _versions() -> dict[str, str]:
    versions = {"kabi": kabi.__version__, "torch": torch.__version__, "python": platform.python_version()}
    for package in ("numpy", "scipy-openblas32"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def _machine(device: torch.device) -> dict[str, Any]:
    machine = {
        "platform": platform.platform(),
        "processor": _processor_name(),
        "logical_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "thread_environment": {name: os.environ[name] for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")
                               if name in os.environ},
        "load_average_at_start": list(os.getloadavg()),
    }
    if device.type == "cuda":
        machine["gpu"] = torch.cuda.get_device_name(device)
    return machine


def _measure(fn: Callable[[], Any], device: torch.device, arguments: argparse.Namespace) -> kabi.BenchResult:
    return kabi.bench(fn, warmup=2, repeat=arguments.repeat, min_time_s=arguments.min_time_s, device=device)


def _geometric_mean(values: Any) -> float:
    return math.exp(statistics.fmean(math.log(value) for value in values))


def measure_problem(shape: tuple[int, ...], dtype_name: str, device: torch.device,
                    arguments: argparse.Namespace) -> dict[str, Any]:
    m, n, k = shape
    dtype = getattr(torch, dtype_name)
    generator = torch.Generator().manual_seed(m * 1_000_003 + n * 1009 + k)
    a = torch.randn(m, k, generator=generator).to(device=device, dtype=dtype)
    b = torch.randn(k, n, generator=generator).to(device=device, dtype=dtype)
    matmul = kabi.ops.matmul

    before = kabi.stats()
    start = time.perf_counter()
    matmul(a, b)
    _synchronize(device)
    first_call_s = time.perf_counter() - start
    tuning_s = kabi.stats().tuning_seconds - before.tuning_seconds
    explanation = kabi.explain(matmul, a, b)
    candidates = [candidate.name for candidate in explanation.candidates if candidate.eligible]

    def forced(name: str) -> Callable[[], kabi.BenchResult]:
        def run() -> kabi.BenchResult:
            with kabi.use(matmul=name):
                return _measure(lambda: matmul(a, b), device, arguments)

        return run

    subjects: dict[str, Callable[[], kabi.BenchResult]] = {"auto": lambda: _measure(lambda: matmul(a, b), device, arguments)}
    subjects.update({name: forced(name) for name in candidates})
    rounds: dict[str, list[kabi.BenchResult]] = {name: [] for name in subjects}
    order = list(subjects)
    for round_index in range(arguments.rounds):
        # Rotate who goes first: the first measurement after other work pays for threads still winding down.
        for name in order[round_index % len(order):] + order[: round_index % len(order)]:
            time.sleep(arguments.settle_s)
            rounds[name].append(subjects[name]())
    times = {name: min(result.median_us for result in results) for name, results in rounds.items()}
    fastest_samples = {name: min(result.min_us for result in results) for name, results in rounds.items()}
    best = min(candidates, key=lambda name: times[name])
    best_by_samples = min(candidates, key=lambda name: fastest_samples[name])
    return {
        "shape": list(shape),
        "dtype": dtype_name,
        "problem_key": explanation.problem_key,
        "pick": explanation.pick,
        "pick_reason": explanation.reason,
        "autoselected_us": times["auto"],
        "candidates_us": {name: times[name] for name in candidates},
        "tuned_us": {c.name: c.tuned_time_us for c in explanation.candidates if c.eligible},
        "best_candidate": best,
        "pick_is_best_candidate": explanation.pick == best,
        "best_candidate_us": times[best],
        "ratio": times[best] / times["auto"],
        "ratio_of_fastest_samples": fastest_samples[best_by_samples] / fastest_samples["auto"],
        "tuning_ms": tuning_s * 1e3,
        "first_call_ms": first_call_s * 1e3,
        "round_medians_us": {name: [result.median_us for result in results] for name, results in rounds.items()},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="cpu", help="a shape suite of registry/ops/matmul.toml (default cpu)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per subject (default 5)")
    parser.add_argument("--repeat", type=int, default=7, help="samples per kabi.bench measurement (default 7)")
    parser.add_argument("--min-time-s", type=float, default=0.05, help="least duration of one measurement")
    parser.add_argument("--settle-s", type=float, default=0.2,
                        help="idle time before each measurement, so threads a previous kernel left spinning "
                             "(OpenMP, OpenBLAS) go to sleep instead of competing with the next one (default 0.2)")
    parser.add_argument("--threads", type=int, help="torch's intra-op threads; set OPENBLAS_NUM_THREADS alike. On a "
                        "machine shared with other work, multi-threaded kernels stall for scheduler slices; 1 thread "
                        "keeps the comparison fair")
    parser.add_argument("--output", type=Path, help="JSON results (default benchmarks/results/<device>-autoselect.json)")
    arguments = parser.parse_args(argv)
    if arguments.threads is not None:
        if os.environ.get("OPENBLAS_NUM_THREADS") != str(arguments.threads):
            raise SystemExit(f"--threads {arguments.threads}: run with OPENBLAS_NUM_THREADS={arguments.threads} too "
                             "(OpenBLAS reads it when kabi loads its CPU plugin)")
        torch.set_num_threads(arguments.threads)
    device = torch.device(arguments.device)
    suite = op_spec("matmul").suites[arguments.suite]
    output = arguments.output or Path(__file__).parent / "results" / f"{device.type}-autoselect.json"
    machine = _machine(device)

    results = []
    with tempfile.TemporaryDirectory(prefix="kabi-autoselect-") as cache_directory:
        kabi.cache.set_directory(cache_directory)
        try:
            for dtype_name in suite.dtypes:
                for shape in suite.shapes:
                    result = measure_problem(tuple(shape), dtype_name, device, arguments)
                    results.append(result)
                    print(f"{'x'.join(map(str, shape)):>14} {dtype_name:<8} pick {result['pick']:<18} "
                          f"auto {result['autoselected_us']:10.1f} us  best {result['best_candidate']:<18} "
                          f"{result['best_candidate_us']:10.1f} us  ratio {result['ratio']:.3f}  "
                          f"tuning {result['tuning_ms']:8.1f} ms", flush=True)
        finally:
            kabi.cache.set_directory(None)

    geometric_mean = _geometric_mean(result["ratio"] for result in results)
    geometric_mean_of_fastest = _geometric_mean(result["ratio_of_fastest_samples"] for result in results)
    machine["load_average_at_end"] = list(os.getloadavg())
    report = {
        "benchmark": "autoselect",
        "metric": "best_candidate_time / autoselected_time per problem (higher is better; 1.0 = auto-selection "
                  "as fast as the best single kernel forced by hand), geometric mean over the suite",
        "goal": 0.95,
        "geometric_mean_ratio": geometric_mean,
        "geometric_mean_ratio_of_fastest_samples": geometric_mean_of_fastest,
        "problems_where_the_pick_is_the_best_candidate": f"{sum(r['pick_is_best_candidate'] for r in results)} of {len(results)}",
        "tuning_ms_per_problem": {"median": statistics.median(r["tuning_ms"] for r in results),
                                  "max": max(r["tuning_ms"] for r in results)},
        "suite": arguments.suite,
        "device": str(device),
        "command": shlex.join([Path(sys.executable).name, *sys.argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": _versions(),
        "machine": machine,
        "settings": {"rounds": arguments.rounds, "repeat": arguments.repeat, "min_time_s": arguments.min_time_s,
                     "settle_s": arguments.settle_s,
                     "tuning": dataclasses.asdict(current_settings())},
        "problems": results,
    }
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"geometric mean of best/auto: {geometric_mean:.3f} (goal >= 0.95; of the fastest samples: "
          f"{geometric_mean_of_fastest:.3f}); the pick was the best candidate in "
          f"{report['problems_where_the_pick_is_the_best_candidate']} problems; "
          f"tuning per problem: median {report['tuning_ms_per_problem']['median']:.0f} ms, "
          f"max {report['tuning_ms_per_problem']['max']:.0f} ms; wrote {output}")


if __name__ == "__main__":
    main()
