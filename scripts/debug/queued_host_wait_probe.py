"""Which kernel's host call waits for the device work queued ahead of it (issue 15: the odd suite's timing).

Session 24 measured ``cuda.cublaslt.aligned_copies`` at 122-292 us per call when each sample was held behind a
sleeping kernel, against 21.3 us unheld: its host call grew with the work queued before it, so something in that call
waits on the device. Reading the code found nothing that synchronizes: the workspace is a per-thread buffer kept
between calls (csrc/core/memory.cpp), the padded copies are plain launches on the call's stream, and the cuBLASLt
plan is cached. This probe measures instead of guessing.

For each subject (a kernel forced with ``kabi.use``), after warm-up calls, it times the host side of one call
(``time.perf_counter`` around it, no synchronization inside) in two ways, many times each, interleaved:

- ``idle``: the device has nothing queued;
- ``queued``: ``torch.cuda._sleep`` holds the stream for ``--sleep-us`` first.

A host call that does not wait costs about the same either way; one that waits costs about the sleep more when
queued. Subjects: the aligned-copies kernels (cuBLASLt's, torch's, Triton's), a cuBLASLt slot and torch.matmul on an
odd problem and on its aligned neighbour, and a plain torch copy as the control. With ``--eager-modules`` the same
runs again in a child with ``CUDA_MODULE_LOADING=EAGER``, which tells a lazy module load (the first launch of a
kernel loads its module, and that can wait for the device) from a wait in every call.

    python scripts/debug/queued_host_wait_probe.py [--problem 1001x1003x1005] [--sleep-us 2000] [--samples 40]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

import kabi

_ODD_SUBJECTS = ("cuda.cublaslt.aligned_copies", "torch.matmul.aligned_copies.cuda", "triton.matmul.aligned_copies",
                 "cuda.cublaslt.algo0", "torch.matmul.cuda")
_ALIGNED_SUBJECTS = ("cuda.cublaslt.algo0", "torch.matmul.cuda")


def _sleep_cycles(sleep_us: float) -> int:
    """Clock cycles of ``torch.cuda._sleep`` that hold the device for about ``sleep_us``, calibrated with events."""
    calibration_cycles = 10_000_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(calibration_cycles)
    start.record()
    torch.cuda._sleep(calibration_cycles)
    end.record()
    end.synchronize()
    cycles_per_us = calibration_cycles / (start.elapsed_time(end) * 1e3)
    return int(sleep_us * cycles_per_us)


def _host_times(call, cycles: int, samples: int) -> dict:
    """Median and spread of the call's host time, idle and behind a queued sleep, samples interleaved."""
    idle, queued = [], []
    for _ in range(samples):
        for hold, into in ((False, idle), (True, queued)):
            torch.cuda.synchronize()
            if hold:
                torch.cuda._sleep(cycles)
            start = time.perf_counter()
            call()
            into.append((time.perf_counter() - start) * 1e6)
            torch.cuda.synchronize()
    return {mode: {"median_us": round(statistics.median(times), 1), "min_us": round(min(times), 1),
                   "max_us": round(max(times), 1)} for mode, times in (("idle", idle), ("queued", queued))}


def _measure(problem: tuple[int, int, int], sleep_us: float, samples: int) -> list[dict]:
    m, k, n = problem
    cycles = _sleep_cycles(sleep_us)
    rows = []
    aligned = tuple(-(-size // 64) * 64 for size in problem)
    for shape, subjects in ((problem, _ODD_SUBJECTS), (aligned, _ALIGNED_SUBJECTS)):
        a = torch.randn(shape[0], shape[1], device="cuda", dtype=torch.bfloat16)
        b = torch.randn(shape[1], shape[2], device="cuda", dtype=torch.bfloat16)
        for subject in subjects:
            def call(subject=subject):
                with kabi.use(matmul=subject):
                    kabi.ops.matmul(a, b)
            try:
                for _ in range(5):
                    call()
                torch.cuda.synchronize()
            except Exception as error:  # noqa: BLE001 - a subject that cannot run here is reported, not fatal
                rows.append({"problem": "x".join(map(str, shape)), "subject": subject,
                             "error": f"{type(error).__name__}: {error}"[:200]})
                continue
            rows.append({"problem": "x".join(map(str, shape)), "subject": subject,
                         **_host_times(call, cycles, samples)})
        control = torch.empty_like(a)
        rows.append({"problem": "x".join(map(str, shape)), "subject": "control: torch copy_",
                     **_host_times(lambda: control.copy_(a), cycles, samples)})
    return rows


def _print(rows: list[dict], label: str, sleep_us: float) -> None:
    print(f"{label} (queued: behind a {sleep_us:.0f} us sleep; host time per call, median [min, max] us)")
    for row in rows:
        if "error" in row:
            print(f"  {row['problem']:>16} {row['subject']:34} error: {row['error']}")
            continue
        idle, queued = row["idle"], row["queued"]
        print(f"  {row['problem']:>16} {row['subject']:34} idle {idle['median_us']:8.1f} "
              f"[{idle['min_us']:.1f}, {idle['max_us']:.1f}]  queued {queued['median_us']:8.1f} "
              f"[{queued['min_us']:.1f}, {queued['max_us']:.1f}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", default="1001x1003x1005", help="MxKxN of the odd problem")
    parser.add_argument("--sleep-us", type=float, default=2000.0)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--eager-modules", action="store_true", help="also run with CUDA_MODULE_LOADING=EAGER")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON (the child's output)")
    arguments = parser.parse_args()
    problem = tuple(int(size) for size in arguments.problem.split("x"))
    rows = _measure(problem, arguments.sleep_us, arguments.samples)
    if arguments.json:
        print(json.dumps(rows))
        return
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA_MODULE_LOADING="
          f"{os.environ.get('CUDA_MODULE_LOADING', '(default)')}")
    _print(rows, "this process", arguments.sleep_us)
    if arguments.eager_modules:
        child = subprocess.run([sys.executable, __file__, "--problem", arguments.problem, "--sleep-us",
                                str(arguments.sleep_us), "--samples", str(arguments.samples), "--json"],
                               env={**os.environ, "CUDA_MODULE_LOADING": "EAGER"}, capture_output=True, text=True,
                               check=True)
        _print(json.loads(child.stdout.strip().splitlines()[-1]), "CUDA_MODULE_LOADING=EAGER", arguments.sleep_us)


if __name__ == "__main__":
    main()
