"""Do long compute-bound picks lose under sustained load what they won in tuning? (issues 13 and 15's prefill misses)

On the H100 (benchmarks/results/nvidia-h100-matmul-llm-prefill-bfloat16.json, 2026-12-07) two llm-prefill picks lost
between tuning and measurement: at 4096x14336x4096 the tuner timed the CUTLASS pingpong 128x128x64 kernel at
707.8 us, the benchmark at 782 us (round medians 747-825 us) against cuBLASLt's 717 us; at 4096x4096x14336 cuBLASLt's
algo3 went from 703.6 to 738 us against torch's 694 us. The benchmark times each subject after 0.3 s of its own load;
the tuner after at most 30 ms of it. The hypothesis: a power-limited card settles at a clock that depends on the
kernel, so the ranks of near-equal kernels after seconds of load differ from their ranks in a short burst.

For each problem this tunes kabi afresh ``--tunes`` times (kabi.tune: the tuner's own times for each finalist, to
show how much they move from one tuning to the next), then times the fastest ``--top`` finalists of the first tuning,
and torch.matmul, interleaved over ``--rounds`` rounds in alternating order, two ways: after ``--idle-s`` of idling
("burst", near what the tuner sees) and after ``--sustain-s`` of the subject's own calls ("sustained", what a
prefill server sees), each sample a kabi.bench median (L2 flushed, one event pair per call). Beside each regime it
records the SM clock and board power, sampled by benchmarks/fp8_peak.py's sampler while the subject ran. It prints,
per subject, the tuner's times, each regime's median and range over the rounds, and the rank in each.

    python scripts/debug/sustained_pick_probe.py [--problems 4096x14336x4096 ...] [--rounds 4] [--top 4]

``--device cpu`` (with small ``--problems``) runs the same steps on the CPU, a check of the script, not a measurement.

``--condition-calls N`` sets the tuner's conditioning (``kabi._selection.measure.CONDITION_CALLS``, 16) for this
process, to see whether tunings that run each finalist longer before its samples (with KABI_TUNE_CONDITION_S raised
to match) agree with one another and with the sustained ranks.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import tempfile
import time
from pathlib import Path

import torch

import kabi

_FP8_PEAK_SPEC = importlib.util.spec_from_file_location(
    "fp8_peak", Path(__file__).resolve().parents[2] / "benchmarks" / "fp8_peak.py")
fp8_peak = importlib.util.module_from_spec(_FP8_PEAK_SPEC)
_FP8_PEAK_SPEC.loader.exec_module(fp8_peak)

DEFAULT_PROBLEMS = ("4096x14336x4096", "4096x4096x14336", "8192x8192x8192")


def _median_of(summaries: list[dict], key: str) -> float:
    """The median over rounds of one sampler figure; NaN where nothing was sampled (no nvidia-smi: the CPU)."""
    values = [summary[key] for summary in summaries if summary.get("samples")]
    return statistics.median(values) if values else float("nan")


def _run_for(fn, seconds: float, device: torch.device) -> None:
    """Calls fn back to back for about ``seconds`` (its own load), then waits for the device."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for _ in range(8):
            fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)


def _subjects(a: torch.Tensor, b: torch.Tensor, kernels: list[str]) -> dict[str, tuple[object, str | None]]:
    subjects = {name: (lambda: kabi.ops.matmul(a, b), name) for name in kernels}
    subjects["torch.matmul (direct)"] = (lambda: torch.matmul(a, b), None)
    return subjects


def _forcing(forced: str | None):
    """kabi.use with the subject's kernel forced, or kabi's own choice (torch.matmul called directly makes none)."""
    return kabi.use(matmul=forced) if forced else kabi.use()


def _sample(fn, forced: str | None) -> float:
    with _forcing(forced):
        return kabi.bench(fn, repeat=11, min_time_s=0.05, flush_l2=True).median_us


def probe(problem: str, args: argparse.Namespace) -> None:
    m, n, k = (int(size) for size in problem.split("x"))
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(m, k, dtype=dtype, device=device)
    b = torch.randn(k, n, dtype=dtype, device=device)
    reports = [kabi.tune(kabi.ops.matmul, a, b) for _ in range(args.tunes)]
    finalists = sorted((item for item in reports[0].measurements if item.passed and not item.screened),
                       key=lambda item: item.time_us)
    kernels = [item.kernel for item in finalists[:args.top]]
    subjects = _subjects(a, b, kernels)
    names = list(subjects)
    regimes = {"burst": args.idle_s, "sustained": args.sustain_s}
    times = {(name, regime): [] for name in names for regime in regimes}
    states = {(name, regime): [] for name in names for regime in regimes}
    for round_index in range(args.rounds):
        order = names if round_index % 2 == 0 else names[::-1]
        for name in order:
            fn, forced = subjects[name]
            for regime, seconds in regimes.items():
                if regime == "burst":
                    time.sleep(seconds)
                with fp8_peak._ClockSampler() as sampler:
                    if regime == "sustained":
                        with _forcing(forced):
                            _run_for(fn, seconds, device)
                    times[(name, regime)].append(_sample(fn, forced))
                states[(name, regime)].append(sampler.summary())
    flops = 2.0 * m * n * k
    print(f"matmul {problem} {str(dtype).removeprefix('torch.')} row_major; picks of {args.tunes} tunings: "
          f"{', '.join(report.pick or 'none' for report in reports)}")
    medians = {key: statistics.median(values) for key, values in times.items()}
    ranks = {regime: sorted(names, key=lambda name: medians[(name, regime)]) for regime in regimes}
    for name in names:
        tuned = [report.measurement(name) for report in reports]
        tuned_text = " ".join(f"{item.time_us:.1f}" if item is not None and item.passed else "-" for item in tuned)
        print(f"  {name}")
        print(f"    tuned us: {tuned_text}")
        for regime in regimes:
            values = times[(name, regime)]
            clock = _median_of(states[(name, regime)], "sm_clock_mhz_median")
            power = _median_of(states[(name, regime)], "power_w_median")
            median = medians[(name, regime)]
            print(f"    {regime:<9} median {median:8.1f} us ({flops / median / 1e6:5.0f} TF/s)"
                  f" range {min(values):.1f}-{max(values):.1f}  rank {ranks[regime].index(name) + 1}"
                  f"  SM clock {clock:.0f} MHz, power {power:.0f} W")


def measure_settings() -> str:
    """The tuner's conditioning as this process runs it."""
    from kabi._selection import measure, tuning_policy

    settings = tuning_policy.current_settings()
    return (f"{measure.CONDITION_CALLS} calls up to {settings.condition_s} s, {settings.repeat} rounds, "
            f"warmup {settings.warmup}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+", default=list(DEFAULT_PROBLEMS))
    parser.add_argument("--tunes", type=int, default=3)
    parser.add_argument("--top", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--idle-s", type=float, default=1.0)
    parser.add_argument("--sustain-s", type=float, default=2.0)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--condition-calls", type=int, default=None)
    args = parser.parse_args()
    if args.condition_calls is not None:
        from kabi._selection import measure

        measure.CONDITION_CALLS = args.condition_calls
    print(f"tuner: condition {measure_settings()}")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("sustained_pick_probe.py needs a CUDA device (or --device cpu, a check of the script)")
    # A cache of its own: the tunings here are the probe's, not a user's.
    with tempfile.TemporaryDirectory() as cache_directory:
        kabi.cache.set_directory(cache_directory)
        print(torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "torch", torch.__version__)
        for problem in args.problems:
            probe(problem, args)


if __name__ == "__main__":
    main()
