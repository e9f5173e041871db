"""How close does each config of the persistent Triton grouped GEMM get to the roof on MoE prefill (the goal: 0.75)?

For the four prefill problems of the moe-deepseek-v3 and moe-qwen3-30b-a3b suites (T = 32768 tokens, bfloat16,
weights in nn.Linear layout [E, N, K] passed as their transposed view), each in the suites' two routings (every
row's expert drawn uniformly, "balanced", or with probability 1 / rank over a random order of the experts, "zipf": a
few hot experts with thousands of rows, many with a few dozen), this times with kabi.bench (L2 flushed, one event
pair per call): F.grouped_mm, kabi's prefill configs as shipped, and configs of the same kernel that are not. The
shipped ones include last row tiles absorbing up to 16 or 32 extra rows (a config's ``tail_m``, ``_t16`` and
``_t32`` in its tag: a group of 130 rows costs one tile and one pass over its weights, not two tiles) and short last
row tiles (``short_m``, ``_short64``: a last row tile with at most 64 rows left runs as a 64-row tile, full tiles as
without it). Other tiles and stage counts, and two work-list variants (the items column tile first, two programs per
SM), were timed in earlier runs (benchmarks/results/debug-grouped-prefill-probe-nvidia-h200.txt) and are gone from
the list. Each implementation is first checked against a float32 reference (norm error) and its memory beyond the
output is recorded (a copy of the weights would show there). Per problem and routing it prints the rows per expert,
whether the TMA path reads both operands, and per implementation: us per call, the fraction of the roof (max(bytes /
bandwidth, FLOPs / the bfloat16 matrix rate measured here with an 8192^3 torch.matmul), bytes counting only experts
with tokens), F.grouped_mm's time over its time (above 1: faster), the rows its tiles compute over the rows routed,
and its work items per program (the waves of the persistent loop).

    python scripts/debug/grouped_prefill_probe.py [--problems deepseek-v3-gate_up ...] [--routings balanced zipf]
        [--only SUBSTRING ...] [--rounds 2]
    python scripts/debug/grouped_prefill_probe.py --compile-only

--compile-only needs no GPU: it compiles every config for sm_90 as the family's binaries are (TMA, nn.Linear
layout) and prints its registers, stack (spills), shared memory, the programs that fit on one SM, and its TMA loads
(UTMALDG), wgmma (HGMMA) and mma.sync (HMMA) instructions.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import zlib
from pathlib import Path

import torch
import torch.nn.functional as F

import kabi
from kabi.backends.triton._configs import MatmulConfig, ceil_div
from kabi.backends.triton._grouped import GROUPED_CONFIGS, GROUPED_FAMILY, _tma_ready, launch_grouped_mm

# (name, experts, tokens, N, K) of the suites' prefill problems.
PROBLEMS = (
    ("deepseek-v3-gate_up", 256, 32768, 4096, 7168),
    ("deepseek-v3-down", 256, 32768, 7168, 2048),
    ("qwen3-30b-a3b-gate_up", 128, 32768, 1536, 2048),
    ("qwen3-30b-a3b-down", 128, 32768, 2048, 768),
)
_HBM_BYTES_PER_S = 4.28e12
# sm_90's registers and shared memory per SM, for the programs-per-SM check of --compile-only.
_REGISTERS_PER_SM = 65536
_SHARED_BYTES_PER_SM = 228 * 1024


def _rows_and_items(config: MatmulConfig, counts: list[int], n: int) -> tuple[int, int]:
    """Rows the tiles compute (padding included) and work items, for groups of ``counts`` rows."""
    block_m, tail_m, short_m, rows, items = config.block_m, config.tail_m, config.short_m, 0, 0
    for count in counts:
        tiles = ceil_div(count, block_m)
        left = count - (tiles - 1) * block_m
        absorbed = tail_m and tiles > 1 and left <= tail_m
        tiles -= bool(absorbed)
        rows += tiles * block_m + (tail_m if absorbed else 0)
        if short_m and tiles and left <= short_m:
            rows -= block_m - short_m
        items += tiles * ceil_div(n, config.block_n)
    return rows, items


def _variants() -> list[tuple[str, MatmulConfig]]:
    """("shipped", config) for each prefill config of GROUPED_CONFIGS, then ("new", config) for the others timed:
    32-row short last tiles (their short tile runs mma.sync: wgmma wants 64 rows per warpgroup) and a 64-row one on
    the 128x128 tile, whose 32-row tail came close to the best on DeepSeek-V3."""
    shipped = [config for config in GROUPED_CONFIGS if config.block_m >= 64]
    new = [
        MatmulConfig(128, 256, 64, num_warps=8, num_stages=3, short_m=32),
        MatmulConfig(128, 256, 64, num_warps=8, num_stages=4, short_m=32),
        MatmulConfig(128, 128, 64, num_warps=4, num_stages=4, short_m=64),
    ]
    return [("shipped", config) for config in shipped] + [("new", config) for config in new if config not in shipped]


def _compile_only(variants: list[tuple[str, MatmulConfig]]) -> None:
    """Compiles every config's kernel for sm_90 as the family does (TMA, nn.Linear layout, bfloat16) and prints
    what ptxas gave it, and how many of its programs fit on one SM (registers and shared memory)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    print(f"{'config':<34} {'regs':>5} {'stack':>5} {'shared':>7} {'per SM':>6}  instructions")
    for _, config in variants:
        spec = GROUPED_FAMILY.binary_spec(config, torch.bfloat16, "row_column", multiprocessors=132, use_tma=True)
        compiled = triton.compile(ASTSource(GROUPED_FAMILY.kernel, spec.signature, spec.constexprs, spec.attrs),
                                  target=GPUTarget("cuda", 90, 32),
                                  options={"num_warps": config.num_warps, "num_stages": config.num_stages,
                                           "enable_fp_fusion": True})
        with tempfile.TemporaryDirectory() as directory:
            cubin = Path(directory, "kernel.cubin")
            cubin.write_bytes(compiled.asm["cubin"])
            usage = subprocess.run([cuobjdump, "--dump-resource-usage", cubin], capture_output=True, text=True,
                                   check=True).stdout
            sass = subprocess.run([cuobjdump, "-sass", cubin], capture_output=True, text=True, check=True).stdout
        fields = dict(part.split(":", 1) for part in usage.split("Resource usage:")[1].split() if ":" in part)
        registers, stack, shared = int(fields["REG"]), int(fields["STACK"]), compiled.metadata.shared
        per_sm = min(_REGISTERS_PER_SM // (registers * config.num_threads), _SHARED_BYTES_PER_SM // max(shared, 1))
        instructions = " ".join(f"{name}:{sass.count(name)}" for name in ("UTMALDG", "HGMMA", "HMMA"))
        print(f"{config.tag:<34} {registers:>5} {stack:>5} {shared:>7} {per_sm:>6}  {instructions}")


def _operands(experts: int, tokens: int, n: int, k: int, generator: torch.Generator):
    """x and the transposed view of an nn.Linear weight, on the GPU."""
    x = torch.randn(tokens, k, device="cuda", dtype=torch.bfloat16, generator=generator)
    w = (torch.randn(experts, n, k, device="cuda", dtype=torch.bfloat16, generator=generator) * k ** -0.5).mT
    return x, w


def _routing(experts: int, tokens: int, routing: str, seed: int) -> tuple[torch.Tensor, list[int]]:
    """The offsets (on the GPU) and rows per expert of a routing drawn by the suites' rule
    (kabi._benchmarking._grouped.routed_offsets), from this probe's own seed: every row's expert uniformly
    ("balanced") or with probability proportional to 1 / rank over a random order of the experts ("zipf")."""
    generator = torch.Generator().manual_seed(seed)
    weights = torch.ones(experts, dtype=torch.float64)
    if routing == "zipf":
        weights = 1.0 / torch.arange(1, experts + 1, dtype=torch.float64)[torch.randperm(experts, generator=generator)]
    chosen = torch.multinomial(weights, tokens, replacement=True, generator=generator)
    counts = torch.bincount(chosen, minlength=experts)
    return torch.cumsum(counts, 0).to(torch.int32).cuda(), counts.tolist()


def _reference(x, w, counts) -> torch.Tensor:
    out = torch.empty(x.shape[0], w.shape[-1], device=x.device, dtype=torch.float32)
    start = 0
    for group, count in enumerate(counts):
        out[start:start + count] = x[start:start + count].float() @ w[group].float()
        start += count
    return out


def _checked(fn, reference: torch.Tensor) -> tuple[float, float]:
    """(norm error against the reference, MB allocated during the call beyond its output)."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn()
    torch.cuda.synchronize()
    extra = (torch.cuda.max_memory_allocated() - before - out.numel() * out.element_size()) / 1e6
    error = (torch.linalg.vector_norm(out.float() - reference) / torch.linalg.vector_norm(reference)).item()
    return error, extra


def _matrix_rate() -> float:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    return 2 * 8192 ** 3 / (kabi.bench(lambda: a @ b, repeat=11).median_us * 1e-6)


def _time_problem(name: str, routing: str, x: torch.Tensor, w: torch.Tensor, variants, args, matrix_rate: float,
                  multiprocessors: int) -> dict[str, float]:
    """Checks and times every implementation on one problem in one routing; prints its heading and its rows of the
    table, and returns each timed implementation's fraction of the roof."""
    (tokens, k), (experts, _, n) = x.shape, w.shape
    # Seeded by the experts, rows and routing only: a layer's gate_up and down products see the same routing.
    offs, counts = _routing(experts, tokens, routing, seed=zlib.crc32(f"{experts} {tokens} {routing}".encode()))
    used = sum(1 for count in counts if count)
    byte_count = 2 * (used * n * k + tokens * k + tokens * n)
    memory_us, compute_us = byte_count / _HBM_BYTES_PER_S * 1e6, 2 * tokens * n * k / matrix_rate * 1e6
    roof_us = max(memory_us, compute_us)
    print(f"{name}, {routing} routing: E={experts} T={tokens} N={n} K={k}; tokens per expert {tokens / experts:.0f} "
          f"(min {min(counts)}, max {max(counts)}), {used} experts with tokens; roof {roof_us:.0f} us (memory "
          f"{memory_us:.0f}: {byte_count / 1e9:.2f} GB; compute {compute_us:.0f}); TMA for x and w: "
          f"{_tma_ready(x, w, True)}")
    reference = _reference(x, w, counts)
    subjects = {"F.grouped_mm": (lambda: F.grouped_mm(x, w, offs=offs), None)}
    for origin, config in variants:
        subjects[f"{origin} {config.tag}"] = (lambda config=config: launch_grouped_mm(config, x, w, offs), config)
    checks = {}
    for label, (fn, _) in subjects.items():
        try:
            checks[label] = _checked(fn, reference)
        except Exception as error:  # a variant that fails to compile or launch is reported, not fatal
            checks[label] = (float("inf"), f"{type(error).__name__}: {str(error).splitlines()[0][:80]}")
    timed = [label for label, (error, _) in checks.items() if error <= args.tolerance]
    medians: dict[str, list[float]] = {label: [] for label in timed}
    for round_index in range(args.rounds):
        for label in timed if round_index % 2 == 0 else timed[::-1]:
            medians[label].append(kabi.bench(subjects[label][0], repeat=11, min_time_s=0.05).median_us)
    peer_us = statistics.median(medians["F.grouped_mm"]) if "F.grouped_mm" in medians else float("nan")
    roof_fractions = {}
    for label, (error, extra) in checks.items():
        config = subjects[label][1]
        rows_x = waves = ""
        if config is not None:
            rows, items = _rows_and_items(config, counts, n)
            rows_x = f"{rows / tokens:.3f}"
            waves = f"{items / multiprocessors:.1f}"
        if label not in medians:
            print(f"  {label:<42} FAILED: error {error:.2e} {extra}")
            continue
        us = statistics.median(medians[label])
        roof_fractions[label] = roof_us / us
        print(f"  {label:<42} {us:8.1f} {roof_us / us:6.3f} {peer_us / us:7.2f} {rows_x:>6} {waves:>6} "
              f"{error:8.1e} {extra:8.1f}")
    return roof_fractions


def _print_summary(fractions: dict[str, dict[str, float]]) -> None:
    """The fraction of the roof of every implementation (rows) on every problem and routing timed (columns), and its
    worst over them."""
    columns = list(fractions)
    labels = list(dict.fromkeys(label for column in fractions.values() for label in column))
    print("fraction of the roof: " + "; ".join(f"{index}: {column}" for index, column in enumerate(columns)))
    print(f"  {'implementation':<42} " + " ".join(f"{index:>6}" for index in range(len(columns))) + "  worst")
    for label in labels:
        values = [fractions[column].get(label, float("nan")) for column in columns]
        print(f"  {label:<42} " + " ".join(f"{value:6.3f}" for value in values) + f" {min(values):6.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="*", default=[name for name, *_ in PROBLEMS],
                        choices=[name for name, *_ in PROBLEMS])
    parser.add_argument("--routings", nargs="*", default=["balanced", "zipf"], choices=["balanced", "zipf"])
    parser.add_argument("--only", nargs="*", default=[],
                        help="time only the configs whose tag contains one of these")
    parser.add_argument("--rounds", type=int, default=2, help="timings per implementation, in alternating order")
    parser.add_argument("--tolerance", type=float, default=1e-2, help="largest norm error against float32")
    parser.add_argument("--compile-only", action="store_true")
    args = parser.parse_args()
    variants = [(origin, config) for origin, config in _variants()
                if not args.only or any(part in config.tag for part in args.only)]
    if args.compile_only:
        _compile_only(variants)
        return
    generator = torch.Generator(device="cuda").manual_seed(0)
    matrix_rate = _matrix_rate()
    multiprocessors = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"bfloat16 matrix rate (8192^3 torch.matmul): {matrix_rate / 1e12:.0f} TFLOP/s; bandwidth "
          f"{_HBM_BYTES_PER_S / 1e12:.2f} TB/s; {torch.cuda.get_device_name()}, {multiprocessors} SMs")
    print(f"  {'implementation':<42} {'us':>8} {'roof':>6} {'vs F.gm':>7} {'rows x':>6} {'waves':>6} "
          f"{'error':>8} {'extra MB':>8}")
    fractions = {}
    for name, experts, tokens, n, k in PROBLEMS:
        if name in args.problems:
            x, w = _operands(experts, tokens, n, k, generator)
            for routing in args.routings:
                fractions[f"{name} {routing}"] = _time_problem(name, routing, x, w, variants, args, matrix_rate,
                                                               multiprocessors)
            del x, w
            torch.cuda.empty_cache()
    _print_summary(fractions)


if __name__ == "__main__":
    main()
