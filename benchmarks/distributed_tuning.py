"""Tuning time on 1 and on several ranks, and whether the ranks agree (issue 14, item 5).

Each run starts WORLD processes (torch.distributed, NCCL on CUDA or gloo on CPU), one device each, every rank with
an empty tuning cache of its own, as nodes of a job would have. Every rank then calls ``kabi.ops.matmul`` on the
same problems in the same order, with tuning on the first call: on one rank that is plain tuning; on several, the
ranks agree by the op's distributed strategy (``split`` for matmul: each rank gates and screens a share of the
candidates, then every rank measures the finalists in full). Per rank it records the wall time of each first call,
the tuning seconds and candidate measurements kabi counted (``kabi.stats()``: timed, and of those screened out),
and each pick; the report gives the slowest rank's figures
per world size and whether every rank picked alike.

    python benchmarks/distributed_tuning.py [--worlds 1 2] [--device cuda] [--dtype bfloat16] [--problems MxNxK ...]
        [--output FILE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

# (M, N, K): Llama-3 8B layers at decode and prefill, both weight layouts below.
PROBLEMS = [(1, 6144, 4096), (16, 4096, 4096), (64, 28672, 4096), (16, 4096, 14336), (512, 6144, 4096),
            (2048, 4096, 4096)]


def _rank_main(rank: int, world: int, args: argparse.Namespace, directory: str) -> None:
    import kabi
    from kabi.ops import _stats

    device = torch.device(args.device, rank) if args.device == "cuda" else torch.device("cpu")
    if args.device == "cuda":
        torch.cuda.set_device(device)
    if world > 1:
        dist.init_process_group("nccl" if args.device == "cuda" else "gloo",
                                init_method=f"file://{directory}/init-{world}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=300))
    try:
        kabi.cache.set_directory(os.path.join(directory, f"cache-{world}-{rank}"))
        dtype = getattr(torch, args.dtype)
        generator = torch.Generator(device=device).manual_seed(0)
        rows = []
        with kabi.tuning("first-call"):
            for m, n, k in args.problems:
                for layout in ("row_major", "nn_linear"):
                    a = torch.randn(m, k, dtype=dtype, device=device, generator=generator)
                    b = (torch.randn(k, n, dtype=dtype, device=device, generator=generator) if layout == "row_major"
                         else torch.randn(n, k, dtype=dtype, device=device, generator=generator).t())
                    before = _stats.stats()
                    if args.device == "cuda":
                        torch.cuda.synchronize(device)
                    start = time.perf_counter()
                    kabi.ops.matmul(a, b)
                    if args.device == "cuda":
                        torch.cuda.synchronize(device)
                    seconds = time.perf_counter() - start
                    after = _stats.stats()
                    rows.append({
                        "problem": [m, n, k], "layout": layout, "first_call_s": seconds,
                        "tuning_s": after.tuning_seconds - before.tuning_seconds,
                        "measurements": after.candidates_benchmarked - before.candidates_benchmarked,
                        "screened_out": after.candidates_screened_out - before.candidates_screened_out,
                        "pick": kabi.explain(kabi.ops.matmul, a, b).pick,
                    })
        with open(os.path.join(directory, f"world{world}-rank{rank}.json"), "w") as out:
            json.dump(rows, out)
    finally:
        if world > 1:
            dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--problems", nargs="+", default=PROBLEMS, metavar="MxNxK",
                        type=lambda text: tuple(int(size) for size in text.split("x")))
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    if args.device == "cuda" and max(args.worlds) > torch.cuda.device_count():
        parser.error(f"--worlds {max(args.worlds)} needs as many GPUs; this machine has {torch.cuda.device_count()}")

    report: dict[str, Any] = {
        "command": " ".join([sys.executable, *sys.argv]),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "versions": {"python": platform.python_version(), "torch": torch.__version__},
        "device": torch.cuda.get_device_name() if args.device == "cuda" else platform.processor(),
        "dtype": args.dtype, "worlds": {},
    }
    with tempfile.TemporaryDirectory(prefix="kabi-distributed-tuning-") as directory:
        # An unreported pass on one rank first fills the compile caches every later process shares (Triton's JIT
        # cache, kabi's device binaries): the reported worlds then differ in tuning alone, not in who compiled first.
        warm_up = os.path.join(directory, "compile-warm-up")
        os.makedirs(warm_up)
        mp.spawn(_rank_main, args=(1, args, warm_up), nprocs=1, join=True)
        for world in args.worlds:
            mp.spawn(_rank_main, args=(world, args, directory), nprocs=world, join=True)
            ranks = [json.loads(Path(directory, f"world{world}-rank{rank}.json").read_text()) for rank in range(world)]
            picks_agree = all(rank_rows[i]["pick"] == ranks[0][i]["pick"] for rank_rows in ranks
                              for i in range(len(ranks[0])))
            slowest_tuning = max(sum(row["tuning_s"] for row in rows) for rows in ranks)
            slowest_first_calls = max(sum(row["first_call_s"] for row in rows) for rows in ranks)
            report["worlds"][str(world)] = {
                "ranks": ranks, "picks_agree": picks_agree, "slowest_rank_tuning_s": slowest_tuning,
                "slowest_rank_first_calls_s": slowest_first_calls,
                "measurements_per_rank": [sum(row["measurements"] for row in rows) for rows in ranks],
                "measured_in_full_per_rank": [sum(row["measurements"] - row["screened_out"] for row in rows)
                                              for rows in ranks],
            }
            print(f"world {world}: tuning {slowest_tuning:.2f} s, first calls {slowest_first_calls:.2f} s on the "
                  f"slowest rank; measurements per rank "
                  f"{report['worlds'][str(world)]['measurements_per_rank']} (in full: "
                  f"{report['worlds'][str(world)]['measured_in_full_per_rank']}); picks agree: {picks_agree}")
    if args.output is not None:
        args.output.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
