"""Which decode configs would close the gap to cuBLAS at M = 8 and 16, where the best shipped tl.dot config reaches
0.85-0.95 of the HBM floor on the large layers and cuBLAS 0.92-1.07 (decode-cuda-mma-wave-splits-nvidia-h200.json)?

For Llama-3 8B qkv, gate_up and down, 70B o and gate_up and a Mixtral expert's up projection (bfloat16), M in --m and
both weight layouts (an nn.Linear weight read in place as ``w.T``; a row-major [K, N]), this checks and times cuBLAS
and a sweep of ``dot`` decode configs: the shipped ones and the new ones below, which vary the weight bytes each
program keeps in flight, the programs per SM (shared memory), the number of programs (block_n, split_k) and the
warps. Configs the family's rules reject for a problem are skipped. Every config goes through the decode family's
Python launcher (Triton's JIT), is first checked against a float32 reference (a wrong one is marked with its error
and not timed), then timed as benchmarks/decode.py times (its helpers): kabi.bench in CUDA-graph replay, rotating
over enough copies of the weight that every call reads it from HBM, against the copy bandwidth measured in the same
run. A split-K launch from Python zeroes its tile counters with a memset captured into the graph beside it (one
more graph node per call), as such a call in a captured model does.

Before timing, every (config, M) that some problem takes is compiled once (Triton specializes M = 16 apart from 8,
as a multiple of 16: two kernels per config; and a --shapes weight with K or N not a multiple of 16 apart from the
aligned ones, as if neither were) in --jobs worker processes that fill Triton's on-disk cache, where the
main process then finds it. Per (layer, M, layout) it prints the floor (us), cuBLAS's fraction of it, the best
shipped and the best new config with theirs, the top 3 of all (new ones marked *), the largest relative error of
the timed and the wrong ones; at the end, the new configs that beat every shipped config by >= 2% on at least two
problems, with those problems. Progress goes to stderr. Meant to take under ~200 s on an H200.

    python scripts/debug/decode_config_sweep.py [--layers llama3-8b.qkv ...] [--m 8 16] [--layouts n_by_k k_by_n]
        [--only SUBSTRING ...] [--rounds 3] [--jobs 16]
    python scripts/debug/decode_config_sweep.py --layers --shapes 4097x14335 --m 7 --layouts k_by_n
    python scripts/debug/decode_config_sweep.py --compile-only [--unaligned]
    TRITON_INTERPRET=1 python scripts/debug/decode_config_sweep.py --interpret

--compile-only needs no GPU: it compiles every config for sm_90 (bfloat16, 16 rows per program, the layout it reads)
and prints its registers, stack (spills), shared memory, the programs that fit on one SM, the weight bytes in
flight per program and per SM, its asynchronous copies (cp.async in the PTX: the loads Triton's pipeliner keeps in
flight) and its widest global load. With --unaligned it compiles each config the way Triton's JIT specializes an odd
problem (M, N, K and the row pitches not multiples of 16; only the base pointers aligned), as the Python kernels
serve 7x14335x4097: there the k_by_n configs took 135-200 us on the H100, against 91 us for cuBLAS and 76 us for
Inductor (benchmarks/results/nvidia-h100-matmul-odd-bfloat16.json); the in-flight columns are then only what the
pipeliner would keep, which it does not without asynchronous copies. ``--shapes KxN ...`` adds weights of any size
to the layers (4097x14335: that odd problem's), and with them the small [K, N] tiles of UNALIGNED_CONFIGS, which
compile to fewer registers there. --interpret needs no GPU either: it checks
every config in Triton's interpreter on tiny float32 problems (K past a whole number of blocks, N too where
block_n > 16) against a float64 reference.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import importlib.util
import multiprocessing
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import torch

from kabi.backends.triton import DECODE_CONFIGS, DecodeConfig
from kabi.backends.triton._families import FAMILIES, MatmulProblem

_ROOT = Path(__file__).resolve().parents[2]
_DECODE_SPEC = importlib.util.spec_from_file_location("decode_benchmark", _ROOT / "benchmarks" / "decode.py")
decode_benchmark = importlib.util.module_from_spec(_DECODE_SPEC)
_DECODE_SPEC.loader.exec_module(decode_benchmark)

DEFAULT_LAYERS = ("llama3-8b.qkv", "llama3-8b.gate_up", "llama3-8b.down", "llama3-70b.o", "llama3-70b.gate_up",
                  "mixtral.expert_up")
_FAMILY = FAMILIES["decode"]
_SHIPPED = tuple(config for config in DECODE_CONFIGS if config.style == "dot")


def _dot(layout: str, block_n: int, block_k: int, num_warps: int, num_stages: int, split_k: int = 1) -> DecodeConfig:
    return DecodeConfig("dot", layout, block_n, block_k, num_warps, num_stages, split_k)


# Shared memory at 16 rows (bfloat16, sm_90) is (num_stages - 1) * (16 + block_n) * block_k * 2 bytes; the weight
# bytes in flight per program (num_stages - 1) * block_n * block_k * 2. --compile-only prints both and the programs
# per SM. The shipped configs keep 32-64 KB in flight per program, 96-160 KB per SM.
NEW_CONFIGS = (
    # nn.Linear weight: rows of block_k * 2 contiguous bytes. More in flight per SM (bn32 s4, bn64, bn128), the
    # same in finer steps (bk128), 8 warps issuing the copies, and split-K for layers of few programs (70B o: 256
    # programs at bn32; 8B qkv: 192).
    _dot("n_by_k", 32, 256, 4, 4),      # 72 KB, 3/SM, 48 KB
    _dot("n_by_k", 32, 256, 8, 3),      # 48 KB, 4/SM, 32 KB
    _dot("n_by_k", 32, 128, 4, 4),      # 36 KB, 6/SM, 24 KB
    _dot("n_by_k", 32, 128, 4, 6),      # 60 KB, 3/SM, 40 KB
    _dot("n_by_k", 32, 512, 4, 3),      # 96 KB, 2/SM, 64 KB
    _dot("n_by_k", 32, 512, 8, 3),
    _dot("n_by_k", 32, 256, 4, 3, 2),   # 48 KB, 4/SM, 32 KB, twice the programs
    _dot("n_by_k", 32, 256, 4, 4, 2),
    _dot("n_by_k", 32, 128, 4, 4, 2),
    _dot("n_by_k", 16, 256, 4, 4),      # 48 KB, 4/SM, 24 KB
    _dot("n_by_k", 16, 512, 4, 3),      # 64 KB, 3/SM, 32 KB
    _dot("n_by_k", 16, 512, 8, 4),      # 96 KB, 2/SM, 48 KB
    _dot("n_by_k", 16, 256, 4, 5, 2),   # 64 KB, 3/SM, 32 KB
    _dot("n_by_k", 64, 128, 4, 3),      # 40 KB, 5/SM, 32 KB
    _dot("n_by_k", 64, 128, 4, 4),      # 60 KB, 3/SM, 48 KB
    _dot("n_by_k", 64, 128, 8, 4),
    _dot("n_by_k", 64, 256, 4, 3),      # 80 KB, 2/SM, 64 KB
    _dot("n_by_k", 64, 256, 8, 3),
    _dot("n_by_k", 64, 128, 4, 3, 2),
    _dot("n_by_k", 128, 64, 4, 4),      # 54 KB, 4/SM, 48 KB
    _dot("n_by_k", 128, 128, 8, 3),     # 72 KB, 3/SM, 64 KB
    # [K, N] weight: runs of block_n * 2 bytes (128-byte runs read at full rate, 32-byte ones at half: no block_n
    # 16). Deeper queues of 128-byte runs, 256-byte runs (bn128), 8 warps, split-K where N/64 gives fewer programs
    # than SMs (70B o: 128; 8B qkv: 96; 8B down: 64), and two bn32 configs (64-byte runs, twice the programs).
    _dot("k_by_n", 64, 128, 8, 3),      # 40 KB, 5/SM, 32 KB
    _dot("k_by_n", 64, 128, 4, 4),      # 60 KB, 3/SM, 48 KB
    _dot("k_by_n", 64, 128, 8, 4),
    _dot("k_by_n", 64, 64, 4, 5),       # 40 KB, 5/SM, 32 KB
    _dot("k_by_n", 64, 64, 4, 6),       # 50 KB, 4/SM, 40 KB
    _dot("k_by_n", 64, 256, 8, 3),      # 80 KB, 2/SM, 64 KB
    _dot("k_by_n", 64, 256, 4, 4),      # 120 KB, 1/SM, 96 KB
    _dot("k_by_n", 64, 512, 8, 3),      # 160 KB, 1/SM, 128 KB
    _dot("k_by_n", 64, 256, 4, 3, 2),   # 80 KB, 2/SM, 64 KB
    _dot("k_by_n", 64, 128, 4, 3, 2),   # 40 KB, 5/SM, 32 KB
    _dot("k_by_n", 64, 128, 4, 4, 2),   # 60 KB, 3/SM, 48 KB
    _dot("k_by_n", 64, 128, 4, 3, 4),
    _dot("k_by_n", 128, 64, 4, 4),      # 54 KB, 4/SM, 48 KB
    _dot("k_by_n", 128, 64, 8, 5),      # 72 KB, 3/SM, 64 KB
    _dot("k_by_n", 128, 128, 4, 3),     # 72 KB, 3/SM, 64 KB
    _dot("k_by_n", 128, 128, 8, 3),
    _dot("k_by_n", 128, 128, 8, 4),     # 108 KB, 2/SM, 96 KB
    _dot("k_by_n", 128, 64, 4, 4, 2),
    _dot("k_by_n", 32, 256, 4, 3),      # 48 KB, 4/SM, 32 KB
    _dot("k_by_n", 32, 256, 4, 4, 2),   # 72 KB, 3/SM, 48 KB
    _dot("k_by_n", 32, 128, 4, 4),      # 36 KB, 6/SM, 24 KB
)
# [K, N] weights whose sizes and pitches are not multiples of 16 (swept with --shapes): Triton then loads them 16 bits
# at a time with no asynchronous copies, and the shipped tiles need 168-255 registers (1-3 programs an SM) or spill
# (--compile-only --unaligned). These smaller tiles need 76-128 (3-8 programs an SM).
UNALIGNED_CONFIGS = (
    _dot("k_by_n", 64, 32, 4, 1),
    _dot("k_by_n", 64, 32, 4, 2),
    _dot("k_by_n", 64, 32, 2, 1),
    _dot("k_by_n", 32, 64, 4, 1),
    _dot("k_by_n", 128, 32, 4, 1),
    _dot("k_by_n", 128, 32, 8, 1),
    _dot("k_by_n", 64, 64, 8, 1),
    _dot("k_by_n", 64, 32, 4, 2, 4),
    # One of Inductor's mm templates at M <= 16 (32 x 128, two stages; its 64 x 128 three-stage tile is in
    # NEW_CONFIGS), the peer that leads at 7x14335x4097 (75.7 us on the H100 against cuBLAS's 91). 168 registers.
    _dot("k_by_n", 32, 128, 4, 2),
)
# sm_90: shared memory and registers per SM, the shared memory the system reserves per block, threads per SM.
_SHARED_BYTES_PER_SM = 228 * 1024
_RESERVED_SHARED_PER_BLOCK = 1024
_REGISTERS_PER_SM = 65536
_THREADS_PER_SM = 2048
_ROWS = 16
_BFLOAT16_BYTES = 2
# What a new config must gain on the best shipped one, and on how many problems, to be listed at the end.
_GAIN = 0.02
_PROBLEMS_TO_LIST = 2


def _sweep(only: list[str], unaligned: bool = False) -> list[tuple[bool, DecodeConfig]]:
    """(shipped, config) of every config swept whose tag contains one of ``only`` (all when empty); UNALIGNED_CONFIGS
    too where ``unaligned``."""
    new = [config for config in NEW_CONFIGS + (UNALIGNED_CONFIGS if unaligned else ()) if config not in _SHIPPED]
    return [(shipped, config) for shipped, configs in ((True, _SHIPPED), (False, new)) for config in configs
            if not only or any(part in config.tag for part in only)]


def _weight_bytes_in_flight(config: DecodeConfig) -> int:
    return (config.num_stages - 1) * config.block_n * config.block_k * _BFLOAT16_BYTES


def _checked(call, a: torch.Tensor, b: torch.Tensor, reference: torch.Tensor, tolerance: dict) -> tuple[float, str]:
    """(relative norm error of call(a, b) against the reference, "" or why it is wrong)."""
    try:
        norm, extreme = decode_benchmark._relative_errors(call(a, b), reference)
    except Exception as error:  # a config that fails to compile or launch is a result, not the end of the sweep
        return float("inf"), f"{type(error).__name__}: {str(error).splitlines()[0][:120] if str(error) else ''}"
    if norm <= tolerance["norm"] and extreme <= tolerance["extreme"]:
        return norm, ""
    return norm, f"error norm {norm:.1e}, extreme {extreme:.1e}"


def _compile_one(config: DecodeConfig, unaligned: bool = False) -> str:
    """One table line of what ptxas made of ``config`` for sm_90 (bfloat16, 16 rows per program); ``unaligned``:
    specialized as an odd problem is (no size or pitch divisible by 16; the base pointers still are)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    layout = _FAMILY.binary_layouts(config)[0]
    spec = _FAMILY.binary_spec(config, torch.bfloat16, layout, rows=_ROWS)
    names = list(spec.signature)
    attrs = ({index: values for index, values in spec.attrs.items() if spec.signature[names[index[0]]].startswith("*")}
             if unaligned else spec.attrs)
    compiled = triton.compile(ASTSource(_FAMILY.kernel, spec.signature, spec.constexprs, attrs),
                              target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": config.num_warps, "num_stages": config.num_stages,
                                       "enable_fp_fusion": True})
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    with tempfile.TemporaryDirectory() as directory:
        cubin = Path(directory, "kernel.cubin")
        cubin.write_bytes(compiled.asm["cubin"])
        usage = subprocess.run([cuobjdump, "--dump-resource-usage", cubin], capture_output=True, text=True,
                               check=True).stdout
    fields = dict(part.split(":", 1) for part in usage.split("Resource usage:")[1].split() if ":" in part)
    registers, stack, shared = int(fields["REG"]), int(fields["STACK"]), compiled.metadata.shared
    per_sm = min(_REGISTERS_PER_SM // (registers * config.num_threads), _THREADS_PER_SM // config.num_threads,
                 _SHARED_BYTES_PER_SM // (shared + _RESERVED_SHARED_PER_BLOCK))
    in_flight = _weight_bytes_in_flight(config)
    ptx = compiled.asm["ptx"]
    async_copies = len(re.findall(r"cp\.async\.c[ag]\.", ptx))
    load_bits = [_load_bits(match) for match in re.findall(r"ld\.global[\w.]*", ptx)]
    return (f"{config.tag:<32} {registers:>5} {stack:>5} {shared / 1024:>7.1f} {per_sm:>6} {in_flight / 1024:>8.0f} "
            f"{per_sm * in_flight / 1024:>7.0f} {async_copies:>8} {max(load_bits, default=0):>9}")


def _load_bits(instruction: str) -> int:
    """The bits one thread reads with a PTX global load, e.g. 128 for ld.global.v4.b32, 16 for ld.global.b16."""
    parts = instruction.split(".")
    lanes = next((int(part[1:]) for part in parts if re.fullmatch(r"v\d", part)), 1)
    width = next((int(part[1:]) for part in parts if re.fullmatch(r"[bufs]\d+", part)), 0)
    return lanes * width


def _compile_only(configs: list[tuple[bool, DecodeConfig]], jobs: int, unaligned: bool) -> None:
    """Compiles every swept config for sm_90 in ``jobs`` processes and prints a line each."""
    print(f"  {'config (sm_90, bfloat16, 16 rows)':<32} {'regs':>5} {'stack':>5} {'KB smem':>7} {'per SM':>6} "
          f"{'KB/prog':>8} {'KB/SM':>7} {'cp.async':>8} {'load bits':>9}"
          f"{'  (sizes and pitches unaligned)' if unaligned else ''}")
    with _workers(jobs) as pool:
        lines = []
        for shipped, config in configs:
            reason = _FAMILY.unsupported_reason(config, MatmulProblem(
                _ROWS, 4096, 4096, _BFLOAT16_BYTES, 90, b_column_major=config.weight_layout == "n_by_k"))
            lines.append((shipped, config, reason, None if reason else pool.submit(_compile_one, config, unaligned)))
        for shipped, config, reason, line in lines:
            print(f"{' ' if shipped else '*'} {f'{config.tag:<32} skipped: {reason}' if reason else line.result()}",
                  flush=True)


def _workers(jobs: int) -> concurrent.futures.ProcessPoolExecutor:
    # spawn: a forked child of a process that has touched CUDA cannot use it.
    return concurrent.futures.ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("spawn"))


def _warm_up(config: DecodeConfig, m: int, unaligned: bool) -> str:
    """Launches ``config`` at M rows on a small problem whose sizes and strides Triton specializes as it does the
    problems' (multiples of 16, or none of them where ``unaligned``), so that the main process finds the kernel in
    Triton's cache; "" or the error."""
    k, n = (4097, 271) if unaligned else (4096, 256)
    try:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn((n, k) if config.weight_layout == "n_by_k" else (k, n), device="cuda", dtype=torch.bfloat16)
        _FAMILY.launch(config, a, w.t() if config.weight_layout == "n_by_k" else w)
        torch.cuda.synchronize()
    except Exception as error:  # reported by the main process's own launch, which fails the same way
        return f"{type(error).__name__}: {str(error).splitlines()[0][:120] if str(error) else ''}"
    return ""


def _compile_all(pairs: list[tuple[DecodeConfig, int, bool]], jobs: int) -> None:
    started = time.time()
    try:
        with _workers(jobs) as pool:
            errors = [(config, m, error) for (config, m, _), error in zip(pairs, pool.map(_warm_up, *zip(*pairs)))
                      if error]
    except concurrent.futures.BrokenExecutor as error:
        print(f"compiling in worker processes stopped ({error}); the rest compiles at the first launch",
              file=sys.stderr)
        return
    print(f"compiled {len(pairs)} kernels in {time.time() - started:.0f} s with {jobs} processes",
          file=sys.stderr)
    for config, m, error in errors:
        print(f"  {config.tag} M={m}: {error}", file=sys.stderr)


def _interpret(configs: list[tuple[bool, DecodeConfig]], ms: list[int]) -> bool:
    """Checks every config in Triton's interpreter on small float32 problems (bfloat16 tl.dot is wrong there);
    True when all are right."""
    tolerance = decode_benchmark._TOLERANCE["float32"]
    generator = torch.Generator().manual_seed(0)
    all_right = True
    print(f"  {'config':<32} {'M':>3} {'K':>5} {'N':>4} {'error':>8}")
    for shipped, config in configs:
        k, n = 2 * config.split_k * config.block_k + 48, 2 * config.block_n + 16
        for m in ms:
            a = torch.randn(m, k, generator=generator)
            w = torch.randn((n, k) if config.weight_layout == "n_by_k" else (k, n), generator=generator)
            b = w.t() if config.weight_layout == "n_by_k" else w
            error, wrong = _checked(functools.partial(_FAMILY.launch, config), a, b, a.double() @ b.double(),
                                    tolerance)
            all_right &= not wrong
            print(f"{' ' if shipped else '*'} {config.tag:<32} {m:>3} {k:>5} {n:>4} {error:>8.1e} {wrong}", flush=True)
    return all_right


def _time_problem(layer: str, layout: str, ms: list[int], configs: list[tuple[bool, DecodeConfig]], rounds: int,
                  bandwidth: float, arch: int, l2_bytes: int) -> list[dict]:
    """Checks and times cuBLAS and every config that takes the problem; one row per M."""
    k, n = _layer_sizes(layer)
    generator = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"{layer} {layout}".encode()))
    weights = decode_benchmark._weights(k, n, layout, torch.bfloat16, l2_bytes, generator)
    activations = torch.randn(max(ms), k, device=weights[0].device, generator=generator).to(torch.bfloat16)
    floor_us = k * n * _BFLOAT16_BYTES / bandwidth * 1e6
    tolerance = decode_benchmark._TOLERANCE["bfloat16"]
    rows = []
    for m in ms:
        started = time.time()
        a = activations[:m]
        reference = a.float() @ weights[0].float()
        problem = MatmulProblem(m, n, k, _BFLOAT16_BYTES, arch, False, layout == "n_by_k")
        candidates = {"cuBLAS": (None, decode_benchmark._cublas(layout))}
        candidates.update((config.tag, (shipped, functools.partial(_FAMILY.launch, config)))
                          for shipped, config in configs
                          if config.weight_layout == layout and not _FAMILY.unsupported_reason(config, problem))
        errors, wrong = {}, {}
        for name, (_, call) in candidates.items():
            errors[name], reason = _checked(call, a, weights[0], reference, tolerance)
            if reason:
                wrong[name] = reason
        timed = [name for name in candidates if name not in wrong]
        times: dict[str, list[float]] = {name: [] for name in timed}
        for round_index in range(rounds):
            for name in timed if round_index % 2 == 0 else timed[::-1]:
                call = candidates[name][1]
                times[name].append(decode_benchmark._graph_time(functools.partial(call, a), weights)["time_us"])
        rows.append({"layer": layer, "m": m, "layout": layout, "floor_us": floor_us,
                     "shipped": {name: shipped for name, (shipped, _) in candidates.items()},
                     "time_us": {name: statistics.median(values) for name, values in times.items()},
                     "errors": errors, "wrong": wrong})
        print(f"{layer} M={m} {layout}: {len(candidates)} candidates ({len(wrong)} wrong), {len(weights)} weight "
              f"copies, {time.time() - started:.1f} s", file=sys.stderr)
    del weights
    torch.cuda.empty_cache()
    return rows


def _layer_sizes(layer: str) -> tuple[int, int]:
    """(K, N) of a layer of benchmarks/decode.py, or of a shape given as KxN."""
    if layer in decode_benchmark.LAYERS:
        return decode_benchmark.LAYERS[layer]
    k, n = (int(size) for size in layer.split("x"))
    return k, n


def _short(name: str) -> str:
    """A tag without its style and layout (the row names the layout)."""
    return name.split("_", 2)[2] if name.startswith("dot_") else name


def _best(row: dict, shipped: bool) -> tuple[str, float] | None:
    names = [name for name in row["time_us"] if row["shipped"][name] is shipped]
    return min(((name, row["time_us"][name]) for name in names), key=lambda item: item[1], default=None)


def _fraction(row: dict, name: str) -> float:
    return row["floor_us"] / row["time_us"][name]


def _entry(row: dict, best: tuple[str, float] | None, width: int) -> str:
    if best is None:
        return f"{'-':<{width}} {'-':>4}"
    return f"{_short(best[0]):<{width}} {_fraction(row, best[0]):4.2f}"


def _print_header() -> None:
    print(f"{'layer':<19} {'M':>2} {'layout':<6} {'floor':>6} {'cuBLAS':>6}  {'best shipped':<22} {'':>4}  "
          f"{'best new':<22} {'':>4}  {'top 3 (* new)':<84} {'max err':>7}  wrong")


def _print_rows(rows: list[dict]) -> None:
    for row in rows:
        cublas = f"{_fraction(row, 'cuBLAS'):6.2f}" if "cuBLAS" in row["time_us"] else f"{'-':>6}"
        ranked = sorted(row["time_us"], key=row["time_us"].get)[:3]
        top = ", ".join(f"{'*' if row['shipped'][name] is False else ''}{_short(name)} {_fraction(row, name):.2f}"
                        for name in ranked)
        error = max((row["errors"][name] for name in row["time_us"]), default=float("nan"))
        wrong = "; ".join(f"{_short(name)}: {reason}" for name, reason in row["wrong"].items())
        print(f"{row['layer']:<19} {row['m']:>2} {row['layout']:<6} {row['floor_us']:6.1f} {cublas}  "
              f"{_entry(row, _best(row, True), 22)}  {_entry(row, _best(row, False), 22)}  {top:<84} "
              f"{error:7.1e}  {wrong}")


def _print_winners(rows: list[dict]) -> None:
    """The new configs faster than every shipped one by _GAIN or more on at least _PROBLEMS_TO_LIST problems."""
    wins: dict[str, list[str]] = {}
    for row in rows:
        best_shipped = _best(row, True)
        if best_shipped is None:
            continue
        for name, time_us in row["time_us"].items():
            gain = best_shipped[1] / time_us - 1
            if row["shipped"][name] is False and gain >= _GAIN:
                cublas = f", cuBLAS {_fraction(row, 'cuBLAS'):.2f}" if "cuBLAS" in row["time_us"] else ""
                wins.setdefault(name, []).append(f"{row['layer']} M={row['m']} {row['layout']} +{100 * gain:.1f}% "
                                                 f"({_fraction(row, name):.2f}{cublas})")
    listed = sorted(((name, problems) for name, problems in wins.items() if len(problems) >= _PROBLEMS_TO_LIST),
                    key=lambda item: -len(item[1]))
    print(f"\nnew configs faster than every shipped config by >= {100 * _GAIN:.0f}% on >= {_PROBLEMS_TO_LIST} "
          f"problems (gain on the best shipped; fraction of the floor):" + ("" if listed else " none"))
    for name, problems in listed:
        print(f"  {name} ({len(problems)}): {'; '.join(problems)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", nargs="*", default=list(DEFAULT_LAYERS), choices=list(decode_benchmark.LAYERS),
                        metavar="LAYER", help=f"of {', '.join(decode_benchmark.LAYERS)} (none: --shapes only)")
    parser.add_argument("--shapes", nargs="+", default=[], metavar="KxN",
                        help="weights of these sizes too, and the small [K, N] tiles of UNALIGNED_CONFIGS")
    parser.add_argument("--m", nargs="+", type=int, default=[8, 16], help="rows of a, 2 to 64")
    parser.add_argument("--layouts", nargs="+", default=list(decode_benchmark.LAYOUTS),
                        choices=list(decode_benchmark.LAYOUTS))
    parser.add_argument("--only", nargs="*", default=[], help="sweep only the configs whose tag contains one of these")
    parser.add_argument("--rounds", type=int, default=3, help="timings per candidate, in alternating order")
    parser.add_argument("--jobs", type=int, default=min(16, os.cpu_count() or 1),
                        help="processes compiling the configs")
    parser.add_argument("--compile-only", action="store_true")
    parser.add_argument("--unaligned", action="store_true",
                        help="with --compile-only: specialize as an odd problem (sizes and pitches unaligned)")
    parser.add_argument("--interpret", action="store_true")
    args = parser.parse_args()
    if not all(2 <= m <= 64 for m in args.m):
        parser.error("--m: the dot configs serve 2 to 64 rows")
    for shape in args.shapes:
        sizes = shape.split("x")
        if len(sizes) != 2 or not all(size.isdigit() and int(size) > 0 for size in sizes):
            parser.error(f"--shapes: expected KxN with positive K and N, e.g. 4097x14335; got {shape!r}")
    if not args.layers and not args.shapes:
        parser.error("nothing to sweep: give --layers or --shapes")
    configs = [(shipped, config) for shipped, config in _sweep(args.only, bool(args.shapes))
               if config.weight_layout in args.layouts]
    if args.compile_only:
        _compile_only(configs, args.jobs, args.unaligned)
        return 0
    if args.interpret:
        if os.environ.get("TRITON_INTERPRET") != "1":
            parser.error("--interpret runs the kernels in Triton's interpreter: set TRITON_INTERPRET=1")
        return 0 if _interpret(configs, args.m) else 1
    if not torch.cuda.is_available():
        print("decode_config_sweep: timing needs a CUDA GPU and torch sees none (--compile-only and --interpret "
              "run without one)", file=sys.stderr)
        return 2
    from kabi.backends.triton._families import device_facts

    arch, _ = device_facts(torch.device("cuda"))
    properties = torch.cuda.get_device_properties(0)
    l2_bytes = getattr(properties, "L2_cache_size", 0) or 64 * 1024 * 1024
    problems = [MatmulProblem(m, n, k, _BFLOAT16_BYTES, arch, False, layout == "n_by_k")
                for k, n in (_layer_sizes(layer) for layer in args.layers + args.shapes) for layout in args.layouts
                for m in args.m]
    pairs = sorted({(config, m, bool(problem.k % 16 or problem.n % 16)) for _, config in configs for m in args.m
                    for problem in problems if problem.m == m and not _FAMILY.unsupported_reason(config, problem)},
                   key=lambda pair: (pair[0].tag, pair[1], pair[2]))
    print(f"{len(configs)} configs ({sum(not shipped for shipped, _ in configs)} new), {len(pairs)} (config, M, "
          f"alignment) kernels to compile", file=sys.stderr)
    _compile_all(pairs, args.jobs)
    bandwidth = decode_benchmark.copy_bandwidth()["tb_per_s"] * 1e12
    print(f"copy bandwidth {bandwidth / 1e12:.2f} TB/s ({properties.name}, sm_{arch}); fractions of the floor "
          f"(weight bytes / that bandwidth), CUDA-graph replay, bfloat16, median of {args.rounds} rounds")
    _print_header()
    rows = []
    for layer in args.layers + args.shapes:
        for layout in args.layouts:
            rows += _time_problem(layer, layout, args.m, configs, args.rounds, bandwidth, arch, l2_bytes)
            _print_rows(rows[-len(args.m):])
    _print_winners(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
