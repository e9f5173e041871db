"""Does holding the device ahead of the host make per-call timing steady? (issue 15: the odd suite's bimodal rounds)

On the H200 the odd suite's 1001x1003x1005 bfloat16 problem measured kabi's choice (cuda.cublaslt.aligned_copies)
at 23.7-37.2 us per round, the same kernel forced by hand at 22.9 us in every round, and multi-launch Python
candidates at 74-217 us. This times, in one process and interleaved over rounds as `kabi bench` does, kabi's
automatic choice, that candidate forced, triton.matmul.aligned_copies forced, and torch.matmul, twice: with
kabi.bench as it was (no hold, no host floor) and as it is (the device held ahead of the host, a sample floored at
the host's issue time). Each subject's round medians are printed.

    python scripts/debug/held_timing_probe.py [--shape 1001 1003 1005] [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import tempfile

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=int, nargs=3, default=[1001, 1003, 1005], metavar=("M", "N", "K"))
    parser.add_argument("--rounds", type=int, default=7)
    arguments = parser.parse_args()
    os.environ.setdefault("KABI_CACHE_DIR", tempfile.mkdtemp(prefix="kabi-held-probe-"))

    import kabi
    from kabi._benchmarking._timing import Subject, TimingSettings, measure_interleaved
    from kabi._selection import bench as bench_module

    m, n, k = arguments.shape
    device = torch.device("cuda")
    a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    b = torch.randn(k, n, device=device, dtype=torch.bfloat16)
    call = lambda: kabi.ops.matmul(a, b)
    call()
    print(str(kabi.explain(kabi.ops.matmul, a, b)).splitlines()[0])
    subjects = [Subject("auto", "auto", call), Subject("torch.matmul", "peer", lambda: torch.matmul(a, b))]
    for name in ("cuda.cublaslt.aligned_copies", "triton.matmul.aligned_copies"):
        subjects.append(Subject(name, "candidate", call, scope=lambda name=name: kabi.use(matmul=name)))
    settings = TimingSettings(rounds=arguments.rounds)

    held = bench_module._event_timed_samples

    def unheld(run, repeat, flush_l2, device, stream, **_):
        return held(run, repeat, flush_l2, device, stream)

    for label, timed_samples in (("unheld, no host floor (before)", unheld), ("held, host floor (now)", held)):
        bench_module._event_timed_samples = timed_samples
        timings = measure_interleaved(subjects, ("cuda-events",), device, settings)
        print(f"\n{m}x{n}x{k} bfloat16, {label}: round medians (us)")
        for subject in subjects:
            timing = timings[subject.name]["cuda-events"]
            rounds = ", ".join(f"{value:.1f}" for value in timing.round_medians_us)
            print(f"  {subject.name:32s} median {timing.median_us:7.1f}  rounds {rounds}")


if __name__ == "__main__":
    main()
