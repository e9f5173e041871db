"""Which configs of the persistent Triton grouped GEMM reach 0.8 of the roof on every MoE decode problem, where kabi
picks the shipped 16x128x128 config everywhere and Qwen3-30B-A3B down with Zipf routing reaches only 0.71 (issue 12)?

For the four decode problems of the moe-deepseek-v3 and moe-qwen3-30b-a3b suites (T = 512 routed rows, bfloat16,
weights in nn.Linear layout [E, N, K] passed as their transposed view), each with the suites' balanced and Zipf
routing, this makes the inputs, the traffic and the roof as ``kabi bench grouped_mm`` does (its GROUPED_MM and
measure_roof: max(bytes / copy bandwidth, FLOPs / bfloat16 matrix rate), bytes counting only the experts with rows)
and checks, then times F.grouped_mm, the decode configs of GROUPED_CONFIGS (block_m <= 64) and the configs below,
which kabi does not ship, each through launch_grouped_mm (Triton's JIT). Every implementation is first checked
against a float32 reference (norm error): a wrong or failing one is reported as such and not timed. The timing is
the suites' (measure_interleaved in cuda-events mode: one event pair per call, the L2 flushed before each, the
subjects interleaved in --rounds rounds), with shorter samples than the suites' 0.05 s (_TIMING) to fit ~90 s.

Before timing, every config is compiled once in --jobs worker processes that fill Triton's on-disk cache, where the
main process then finds it. Per (problem, routing) it prints the experts with rows and the most rows one has, the
roof, and per implementation: us, fraction of the roof, F.grouped_mm's time over its time, its work items per SM
(the waves of the persistent loop) and its error; the fastest is marked. At the end, per implementation: the
geometric mean over the cases of its time over the best shipped config's time in the same case (and over the
balanced and the Zipf cases apart), its worst case, and its least fraction of the roof; then per problem the config
whose worse routing is best, since kabi picks one config per shape for every routing (no routing in the tuning key).

The routings are kabi bench's draws: routed_offsets seeds them with hash(problem.key), a str hash Python salts per
process, so every run (the bench's too) draws other routings of the same law unless PYTHONHASHSEED is set.

    python scripts/debug/grouped_decode_sweep.py [--problems qwen3-30b-a3b-down ...] [--routings zipf]
        [--only SUBSTRING ...] [--rounds 3] [--jobs 16]
    python scripts/debug/grouped_decode_sweep.py --compile-only | --dry-run
    TRITON_INTERPRET=1 python scripts/debug/grouped_decode_sweep.py --interpret

--compile-only needs no GPU: it compiles every config for sm_90 as the family's binaries are (TMA, nn.Linear
layout; grouped_prefill_probe.py's table) and prints its registers, stack (spills), shared memory, the programs that
would fit on one SM (the persistent grid runs one per SM) and its TMA loads and MMA instructions. --dry-run lists
the cases (routing, traffic) and the configs with their waves per case. --interpret checks every config in Triton's
interpreter (the pointer path: no TMA there) on tiny problems of both routings, through the same check as the GPU
run. The float32 reference, the work items and the --compile-only table are grouped_prefill_probe.py's.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import functools
import math
import multiprocessing
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from kabi._base.declarations import SUITE_ROUTING_NAMES
from kabi._benchmarking._grouped import GROUPED_MM, routed_offsets
from kabi._benchmarking._problems import BenchProblem
from kabi._benchmarking._roof import measure_roof
from kabi._benchmarking._timing import Subject, TimingSettings, measure_interleaved
from kabi.backends.triton._configs import SMALL_M_LIMIT, MatmulConfig
from kabi.backends.triton._grouped import GROUPED_CONFIGS, grouped_unsupported_reason, launch_grouped_mm

from grouped_prefill_probe import _compile_only, _reference, _rows_and_items

# (name, experts, routed rows, N, K) of the suites' decode problems.
PROBLEMS = (
    ("deepseek-v3-gate_up", 256, 512, 4096, 7168),
    ("deepseek-v3-down", 256, 512, 7168, 2048),
    ("qwen3-30b-a3b-gate_up", 128, 512, 1536, 2048),
    ("qwen3-30b-a3b-down", 128, 512, 2048, 768),
)
_DTYPE = "bfloat16"
_LAYOUT = "transposed_b"
_ELEMENT_SIZE = 2
_ARCH = 90
_MULTIPROCESSORS = 132
_PEER = "F.grouped_mm"
# The suites time with TimingSettings() (0.05 s samples and conditioning, 0.3 s to steady state); shorter here.
_TIMING = dict(repeat=11, min_time_s=0.02, steady_state_s=0.2, condition_s=0.02)


def _config(block_m: int, block_n: int, block_k: int, num_warps: int, num_stages: int, **options) -> MatmulConfig:
    return MatmulConfig(block_m=block_m, block_n=block_n, block_k=block_k, num_warps=num_warps,
                        num_stages=num_stages, **options)


# short_m is new in the grouped family (a last row tile with at most that many rows left runs as a tile that tall):
# its configs are swept where this tree's MatmulConfig has it.
_HAS_SHORT_M = "short_m" in {field.name for field in dataclasses.fields(MatmulConfig)}


# One program per SM (the persistent grid), so a config changes the bytes each item streams (block_n * K), the
# items' count (the waves, and how evenly a Zipf routing's hot experts spread), the weight bytes in flight per SM
# ((num_stages - 1) * block_n * block_k * 2) and the row padding of experts with a few rows (block_m). 16 and 32
# rows: mma.sync, whose pipeline Triton gives num_stages - 1 buffers; 64 rows: wgmma, num_stages buffers. Each fits
# sm_90 by the family's own estimate (grouped_unsupported_reason: num_stages buffers); none spills (--compile-only).
NEW_CONFIGS = (
    # 16 rows, as shipped: fewer or more stages, 8 warps, wider K steps, wider and narrower column tiles (longer
    # items over K = 768; more items, fewer bytes each).
    _config(16, 128, 128, 4, 3),
    _config(16, 128, 128, 4, 5),
    _config(16, 128, 128, 4, 6),
    _config(16, 128, 128, 8, 4),
    _config(16, 128, 256, 4, 3),
    _config(16, 128, 256, 8, 3),
    _config(16, 128, 64, 4, 6),
    _config(16, 256, 64, 4, 4),
    _config(16, 256, 64, 4, 6),
    _config(16, 256, 64, 8, 5),
    _config(16, 256, 128, 4, 3),
    _config(16, 256, 128, 8, 3),
    _config(16, 64, 128, 4, 4),
    _config(16, 64, 256, 4, 3),
    _config(16, 32, 256, 4, 4),
    # 32 rows: a Zipf routing's hot experts (~100 rows) in half the row tiles of 16, balanced ones padded 2x more.
    _config(32, 128, 128, 4, 4),
    _config(32, 128, 128, 4, 5),
    _config(32, 128, 128, 8, 4),
    _config(32, 256, 64, 4, 4),
    _config(32, 256, 64, 8, 5),
    _config(32, 256, 128, 8, 3),
    _config(32, 64, 256, 4, 3),
    _config(32, 64, 256, 4, 4),
    # 64 rows (one wgmma warpgroup): wider K steps and deeper pipelines than the shipped 64x128x64 s4.
    _config(64, 128, 128, 4, 3),
    _config(64, 128, 128, 4, 4),
    _config(64, 128, 128, 8, 4),
    _config(64, 256, 64, 4, 4),
    _config(64, 256, 64, 8, 4),
    _config(64, 128, 64, 4, 6),
    _config(64, 64, 128, 4, 5),
    _config(64, 64, 256, 4, 3),
) + ((
    # 64 (or 32) rows for the hot experts of a Zipf routing, a 16-row tile (mma.sync) for the many experts with a
    # few rows: the items of the 64-row tile, the MMA work of the 16-row one.
    _config(64, 128, 128, 4, 3, short_m=16),
    _config(64, 128, 64, 4, 4, short_m=16),
    _config(32, 128, 128, 4, 4, short_m=16),
) if _HAS_SHORT_M else ())


def _variants(problems: list[tuple], only: list[str]) -> list[tuple[str, MatmulConfig]]:
    """("shipped", config) for each decode config of GROUPED_CONFIGS, then ("new", config) for each config of
    NEW_CONFIGS that kabi does not ship, takes every problem (the family's rule: shared memory) and whose tag
    contains one of ``only`` (all when empty). The shipped configs are always kept: they are the baseline."""
    shipped = [config for config in GROUPED_CONFIGS if config.block_m <= SMALL_M_LIMIT]
    new = []
    for config in NEW_CONFIGS:
        if config in shipped or config in new or (only and not any(part in config.tag for part in only)):
            continue
        reason = next(filter(None, (grouped_unsupported_reason(config, rows, n, k, _ELEMENT_SIZE, _ARCH)
                                    for _, _, rows, n, k in problems)), "")
        if reason:
            print(f"SKIPPED {config.tag}: {reason}", flush=True)
            continue
        new.append(config)
    return [("shipped", config) for config in shipped] + [("new", config) for config in new]


def _bench_problem(experts: int, rows: int, n: int, k: int, routing: str) -> BenchProblem:
    return BenchProblem((experts, rows, n, k), _DTYPE, _LAYOUT, routing)


def _counts(offsets: torch.Tensor) -> list[int]:
    return torch.diff(offsets.cpu(), prepend=offsets.new_zeros(1, device="cpu")).tolist()


def _routing_summary(counts: list[int]) -> str:
    used = [count for count in counts if count]
    return (f"{len(used)} of {len(counts)} experts with rows, max {max(used)}, median {statistics.median(used):g} "
            f"over those")


def _waves(config: MatmulConfig, counts: list[int], n: int, multiprocessors: int) -> float:
    return _rows_and_items(config, counts, n)[1] / multiprocessors


def _checked(call, reference: torch.Tensor, tolerance: float) -> tuple[float, str]:
    """(norm error of call() against the float32 reference, "" or why it is wrong or failed)."""
    try:
        out = call()
    except Exception as error:  # a config that fails to compile or launch is a result, not the end of the sweep
        return math.inf, f"FAILED {type(error).__name__}: {(str(error).splitlines() or [''])[0][:120]}"
    error = (torch.linalg.vector_norm(out.float() - reference) / torch.linalg.vector_norm(reference)).item()
    return error, "" if error <= tolerance else f"WRONG: norm error {error:.2e} > {tolerance:g}"


def _warm_up(config: MatmulConfig) -> str:
    """Launches ``config`` on a small problem that Triton specializes as it does the decode problems (sizes and
    strides multiples of 16, as many programs as SMs), so that the main process finds the kernel in Triton's
    cache; "" or the error."""
    try:
        problem = _bench_problem(16, 512, 2048, 256, "balanced")
        x, w, offsets = GROUPED_MM.make_inputs(problem, torch.device("cuda"))
        launch_grouped_mm(config, x, w, offsets)
        torch.cuda.synchronize()
    except Exception as error:  # reported again by the main process's own check, which fails the same way
        return f"{type(error).__name__}: {(str(error).splitlines() or [''])[0][:120]}"
    return ""


def _compile_all(configs: list[MatmulConfig], jobs: int) -> None:
    started = time.perf_counter()
    try:
        # spawn: a forked child of a process that has touched CUDA cannot use it.
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            errors = [(config, error) for config, error in zip(configs, pool.map(_warm_up, configs)) if error]
    except concurrent.futures.BrokenExecutor as error:
        print(f"compiling in worker processes stopped ({error}); the rest compiles at the first launch", flush=True)
        return
    print(f"compiled {len(configs)} configs in {time.perf_counter() - started:.0f} s with {jobs} processes",
          flush=True)
    for config, error in errors:
        print(f"  {config.tag}: {error}", flush=True)


def _interpret(variants: list[tuple[str, MatmulConfig]], routings: list[str], tolerance: float) -> bool:
    """Checks every config in Triton's interpreter on tiny problems of each routing (N past a whole column tile,
    K past two K steps), as the GPU run checks; True when all are right."""
    print(f"  {'config':<40} {'routing':<8} {'E x T x N x K':<18} {'error':>8}")
    all_right = True
    for origin, config in variants:
        for routing in routings:
            problem = _bench_problem(4, 40, config.block_n + 16, 2 * config.block_k + 16, routing)
            x, w, offsets = GROUPED_MM.make_inputs(problem, torch.device("cpu"))
            reference = _reference(x, w, _counts(offsets))
            error, wrong = _checked(functools.partial(launch_grouped_mm, config, x, w, offsets), reference, tolerance)
            all_right &= not wrong
            print(f"{' ' if origin == 'shipped' else '*'} {config.tag:<40} {routing:<8} "
                  f"{'x'.join(map(str, problem.shape)):<18} {error:8.1e} {wrong}", flush=True)
    return all_right


def _dry_run(cases: list[tuple], variants: list[tuple[str, MatmulConfig]]) -> None:
    """The cases (routing, traffic, work) and every config with its estimated shared memory and waves per case."""
    counts_by_case = []
    for index, (name, routing, (experts, rows, n, k)) in enumerate(cases):
        problem = _bench_problem(experts, rows, n, k, routing)
        counts = _counts(routed_offsets(problem))
        counts_by_case.append((counts, n))
        print(f"case {index}: {name} {routing}: E={experts} T={rows} N={n} K={k}; {_routing_summary(counts)}; "
              f"{GROUPED_MM.bytes_moved(problem) / 1e9:.3f} GB, {GROUPED_MM.flops(problem) / 1e9:.1f} GFLOP")
    print(f"\nwork items per SM ({_MULTIPROCESSORS} SMs: the persistent loop's waves) per case\n"
          f"  {'config':<40} {'KB smem':>7} " + " ".join(f"{index:>5}" for index in range(len(cases))))
    for origin, config in variants:
        waves = " ".join(f"{_waves(config, counts, n, _MULTIPROCESSORS):5.1f}" for counts, n in counts_by_case)
        print(f"{' ' if origin == 'shipped' else '*'} {config.tag:<40} "
              f"{config.shared_memory_bytes(_ELEMENT_SIZE) / 1024:7.0f} {waves}")
    print(f"\n{len(cases)} cases, {len(variants)} configs ({sum(origin == 'new' for origin, _ in variants)} new) and "
          f"{_PEER}")


def _label(origin: str, config: MatmulConfig) -> str:
    return f"{origin} {config.tag}"


def _time_case(name: str, routing: str, shape: tuple, variants, args, roof, device: torch.device,
               multiprocessors: int) -> dict:
    """Checks and times every implementation on one (problem, routing); prints its heading and table."""
    started = time.perf_counter()
    experts, rows, n, k = shape
    problem = _bench_problem(experts, rows, n, k, routing)
    x, w, offsets = GROUPED_MM.make_inputs(problem, device)
    counts = _counts(offsets)
    flops, bytes_moved = GROUPED_MM.flops(problem), GROUPED_MM.bytes_moved(problem)
    roof_us = roof.time_us(_DTYPE, flops, bytes_moved)
    memory_us, compute_us = bytes_moved / (roof.copy_gbps * 1e3), flops / (roof.matrix_tflops[_DTYPE] * 1e6)
    print(f"\n{name} {routing}: E={experts} T={rows} N={n} K={k}; {_routing_summary(counts)}; roof {roof_us:.1f} us "
          f"(memory {memory_us:.1f}: {bytes_moved / 1e9:.3f} GB; compute {compute_us:.1f})", flush=True)
    reference = _reference(x, w, counts)
    subjects = [Subject(_PEER, "peer", functools.partial(F.grouped_mm, x, w, offs=offsets))]
    subjects += [Subject(_label(origin, config), "candidate",
                         functools.partial(launch_grouped_mm, config, x, w, offsets)) for origin, config in variants]
    errors, wrong = {}, {}
    for subject in subjects:
        errors[subject.name], reason = _checked(subject.fn, reference, args.tolerance)
        if reason:
            wrong[subject.name] = reason
    timed = [subject for subject in subjects if subject.name not in wrong]
    settings = TimingSettings(rounds=args.rounds, **_TIMING)
    timings = measure_interleaved(timed, ("cuda-events",), device, settings)
    times = {label: by_mode["cuda-events"].median_us for label, by_mode in timings.items() if by_mode}
    wrong.update((subject.name, f"FAILED while timed: {subject.errors['cuda-events']}") for subject in timed
                 if subject.name not in times)
    waves = {_label(origin, config): _waves(config, counts, n, multiprocessors) for origin, config in variants}
    row = {"problem": name, "routing": routing, "roof_us": roof_us, "times": times, "errors": errors,
           "wrong": wrong, "origins": {subject.name: subject.name.split(" ")[0] for subject in subjects}}
    _print_case(row, waves)
    print(f"  ({time.perf_counter() - started:.1f} s)", flush=True)
    return row


def _best(row: dict, origin: str | None = None) -> str | None:
    """The fastest implementation of a case (of one origin, "shipped" or "new", when given)."""
    labels = [label for label in row["times"] if origin is None or row["origins"][label] == origin]
    return min(labels, key=row["times"].get, default=None)


def _print_case(row: dict, waves: dict) -> None:
    peer_us = row["times"].get(_PEER, math.nan)
    best, best_shipped = _best(row), _best(row, "shipped")
    print(f"  {'implementation':<46} {'us':>8} {'roof':>6} {'F.gm/it':>7} {'waves':>6} {'error':>8}")
    for label, error in row["errors"].items():
        if label in row["wrong"]:
            print(f"  {label:<46} {row['wrong'][label]}")
            continue
        us = row["times"][label]
        mark = "  <- best" if label == best else "  <- best shipped" if label == best_shipped else ""
        waves_text = f"{waves[label]:6.1f}" if label in waves else f"{'':>6}"
        print(f"  {label:<46} {us:8.1f} {row['roof_us'] / us:6.3f} {peer_us / us:7.2f} {waves_text} "
              f"{error:8.1e}{mark}")


def _geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(map(math.log, values))) if values else math.nan


def _print_summary(rows: list[dict]) -> None:
    """Per implementation, its times over the best shipped config's; per problem, the best single pick."""
    labels = list(dict.fromkeys(label for row in rows for label in row["errors"]))
    lines = []
    for label in labels:
        ratios = {(row["problem"], row["routing"]): row["times"][label] / row["times"][_best(row, "shipped")]
                  for row in rows if label in row["times"] and _best(row, "shipped")}
        fractions = [row["roof_us"] / row["times"][label] for row in rows if label in row["times"]]
        if not ratios:
            lines.append((math.inf, f"  {label:<46} never timed"))
            continue
        worst_case = max(ratios, key=ratios.get)
        by_routing = [f"{_geomean([ratio for (_, routing), ratio in ratios.items() if routing == name]):8.3f}"
                      for name in SUITE_ROUTING_NAMES]
        lines.append((_geomean(list(ratios.values())),
                      f"  {label:<46} {len(ratios):>5} {_geomean(list(ratios.values())):8.3f} {' '.join(by_routing)} "
                      f"{ratios[worst_case]:6.3f} {' '.join(worst_case):<32} {min(fractions):6.3f} "
                      f"{sum(fraction >= 0.8 for fraction in fractions):>5}"))
    print("\ntime over the best shipped config's time in the same case (below 1: faster), geometric mean over the "
          "cases; worst case; least fraction of the roof; cases at >= 0.8 of the roof")
    routings = " ".join(f"{name:>8}" for name in SUITE_ROUTING_NAMES)
    print(f"  {'implementation':<46} {'cases':>5} {'geomean':>8} {routings} {'worst':>6} {'(case)':<32} {'roof':>6} "
          f"{'>=0.8':>5}")
    for _, line in sorted(lines, key=lambda item: item[0]):
        print(line)
    print("\none pick per problem for every routing: the implementation whose worst time over its routings' best is "
          "least (fractions of the roof per routing), and the shipped configs' best by the same rule")
    for problem in dict.fromkeys(row["problem"] for row in rows):
        problem_rows = [row for row in rows if row["problem"] == problem]
        for origin in (None, "shipped"):
            scores = {}
            for label in problem_rows[0]["times"]:
                if (origin is None or problem_rows[0]["origins"][label] == origin) and \
                        all(label in row["times"] for row in problem_rows):
                    scores[label] = max(row["times"][label] / row["times"][_best(row)] for row in problem_rows)
            if not scores:
                continue
            pick = min(scores, key=scores.get)
            fractions = ", ".join(f"{row['routing']} {row['roof_us'] / row['times'][pick]:.3f}" for row in problem_rows)
            print(f"  {problem:<22} {'best' if origin is None else 'shipped':<8} {pick:<46} worst {scores[pick]:.3f}x "
                  f"of a routing's best; roof {fractions}")
    wrong = [f"{row['problem']} {row['routing']} {label}: {reason}" for row in rows
             for label, reason in row["wrong"].items()]
    print("\nwrong or failed: " + ("none" if not wrong else f"{len(wrong)}\n  " + "\n  ".join(wrong)))


def main() -> int:
    started = time.perf_counter()
    names = [name for name, *_ in PROBLEMS]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="+", default=names, choices=names, metavar="PROBLEM",
                        help=f"of {', '.join(names)}")
    parser.add_argument("--routings", nargs="+", default=list(SUITE_ROUTING_NAMES), choices=SUITE_ROUTING_NAMES)
    parser.add_argument("--only", nargs="+", default=[],
                        help="time only the new configs whose tag contains one of these (the shipped ones always)")
    parser.add_argument("--rounds", type=int, default=3, help="timings per implementation, interleaved")
    parser.add_argument("--tolerance", type=float, default=1e-2, help="largest norm error against float32")
    parser.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1),
                        help="processes compiling the configs before timing")
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument("--compile-only", action="store_true", help="compile for sm_90 and print resources; no GPU")
    modes.add_argument("--dry-run", action="store_true", help="list the cases and configs; no GPU")
    modes.add_argument("--interpret", action="store_true", help="check every config in Triton's interpreter")
    args = parser.parse_args()
    problems = [problem for problem in PROBLEMS if problem[0] in args.problems]
    variants = _variants(problems, args.only)
    cases = [(name, routing, shape) for name, *shape in problems for routing in args.routings]
    if args.compile_only:
        _compile_only(variants)
        return 0
    if args.dry_run:
        _dry_run(cases, variants)
        return 0
    if args.interpret:
        if os.environ.get("TRITON_INTERPRET") != "1":
            parser.error("--interpret runs the kernels in Triton's interpreter: set TRITON_INTERPRET=1")
        return 0 if _interpret(variants, args.routings, args.tolerance) else 1
    if not torch.cuda.is_available():
        print("grouped_decode_sweep: timing needs a CUDA GPU and torch sees none (--compile-only, --dry-run and "
              "--interpret run without one)", file=sys.stderr)
        return 2
    print(f"{len(cases)} cases; {len(variants)} configs ({sum(origin == 'new' for origin, _ in variants)} new) and "
          f"{_PEER}", flush=True)
    _compile_all([config for _, config in variants], args.jobs)
    compiled_s = time.perf_counter() - started
    device = torch.device("cuda")
    roof = measure_roof(device, (_DTYPE,))
    multiprocessors = torch.cuda.get_device_properties(device).multi_processor_count
    print(f"roof: {_DTYPE} {roof.matrix_tflops[_DTYPE]:.0f} TFLOP/s, copy {roof.copy_gbps:.0f} GB/s; "
          f"{torch.cuda.get_device_name(device)}, {multiprocessors} SMs; cuda-events (L2 flushed), {args.rounds} "
          f"rounds, {_TIMING}", flush=True)
    rows = []
    for name, routing, shape in cases:
        rows.append(_time_case(name, routing, shape, variants, args, roof, device, multiprocessors))
        torch.cuda.empty_cache()
    _print_summary(rows)
    print(f"\nelapsed {time.perf_counter() - started:.0f} s (compiling and starting {compiled_s:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
