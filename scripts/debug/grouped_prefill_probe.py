"""Why does the persistent Triton grouped GEMM reach only 0.56-0.69 of the roof on MoE prefill, and which change
of tile, pipeline or work list gets it to 0.75?

For the four prefill problems of the moe-deepseek-v3 and moe-qwen3-30b-a3b suites (T = 32768 tokens, balanced
random routing, bfloat16, weights in nn.Linear layout [E, N, K] passed as their transposed view) this times with
kabi.bench (L2 flushed, one event pair per call): F.grouped_mm, kabi's prefill configs as shipped, and variants of
the same kernel: other tiles and stage counts, the work list column tile first (``cm``: the row tiles reading one
weight slice adjacent), a last row tile absorbing up to 16 or 32 extra rows (``t16``, ``t32``: a group of 130 rows
costs one tile and one pass over its weights, not two tiles), and two persistent programs per SM (``x2``). Each is
first checked against a float32 reference (norm error) and its memory beyond the output is recorded (a copy of the
weights would show there). Per problem it prints the routing, whether the TMA path reads both operands, and per
implementation: us per call, the fraction of the roof (max(bytes / bandwidth, FLOPs / the bfloat16 matrix rate
measured here with an 8192^3 torch.matmul), bytes counting only experts with tokens), F.grouped_mm's time over
its time (above 1: faster), the rows its tiles compute over the rows routed, and its work items per program (the
waves of the persistent loop).

    python scripts/debug/grouped_prefill_probe.py [--problems deepseek-v3-gate_up ...] [--only SUBSTRING ...]
        [--rounds 2]
    python scripts/debug/grouped_prefill_probe.py --compile-only

--compile-only needs no GPU: it compiles every variant for sm_90 as the family's binaries are (TMA, nn.Linear
layout) and prints its registers, stack (spills), shared memory, the programs that fit on one SM, and its TMA loads
(UTMALDG) and wgmma (HGMMA) instructions.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Variant:
    """One way to launch the kernel: a config and the launcher's work-list knobs."""

    config: MatmulConfig
    tail_m: int = 0
    column_major_items: bool = False
    programs_per_multiprocessor: int = 1

    @property
    def name(self) -> str:
        tag = self.config.tag.removesuffix("_g8")
        if self.tail_m:
            tag += f"_t{self.tail_m}"
        if self.column_major_items:
            tag += "_cm"
        if self.programs_per_multiprocessor > 1:
            tag += f"_x{self.programs_per_multiprocessor}"
        return tag

    def launch(self, x, w, offs):
        return launch_grouped_mm(self.config, x, w, offs, tail_m=self.tail_m,
                                 column_major_items=self.column_major_items,
                                 programs_per_multiprocessor=self.programs_per_multiprocessor)

    def rows_and_items(self, counts: list[int], n: int) -> tuple[int, int]:
        """Rows the tiles compute (padding included) and work items, for groups of ``counts`` rows."""
        block_m, rows, items = self.config.block_m, 0, 0
        for count in counts:
            tiles = ceil_div(count, block_m)
            absorbed = self.tail_m and tiles > 1 and count - (tiles - 1) * block_m <= self.tail_m
            tiles -= bool(absorbed)
            rows += tiles * block_m + (self.tail_m if absorbed else 0)
            items += tiles * ceil_div(n, self.config.block_n)
        return rows, items


def _variants() -> list[tuple[str, Variant]]:
    shipped = [("shipped", Variant(config)) for config in GROUPED_CONFIGS if config.block_m >= 64]
    wide = MatmulConfig(128, 256, 64, num_warps=8, num_stages=3)
    new = [
        Variant(MatmulConfig(128, 256, 64, num_warps=8, num_stages=4)),
        Variant(MatmulConfig(64, 256, 64, num_warps=4, num_stages=4)),
        Variant(MatmulConfig(64, 256, 64, num_warps=8, num_stages=4)),
        Variant(MatmulConfig(256, 128, 64, num_warps=8, num_stages=3)),
        Variant(wide, column_major_items=True),
        Variant(wide, tail_m=16),
        Variant(wide, tail_m=32),
        Variant(wide, tail_m=32, column_major_items=True),
        Variant(MatmulConfig(128, 256, 64, num_warps=8, num_stages=4), tail_m=16),
        Variant(MatmulConfig(64, 256, 64, num_warps=8, num_stages=4), tail_m=16),
        Variant(MatmulConfig(128, 128, 64, num_warps=4, num_stages=4), tail_m=32),
        Variant(MatmulConfig(128, 128, 64, num_warps=8, num_stages=4), tail_m=32),
        # Two programs per SM where both fit (--compile-only says): one's epilogue overlaps the other's main loop.
        Variant(MatmulConfig(128, 128, 64, num_warps=4, num_stages=3), programs_per_multiprocessor=2),
        Variant(MatmulConfig(64, 128, 64, num_warps=4, num_stages=4), programs_per_multiprocessor=2),
    ]
    return shipped + [("new", variant) for variant in new]


def _compile_only(variants: list[tuple[str, Variant]]) -> None:
    """Compiles every variant's kernel for sm_90 as the family does (TMA, nn.Linear layout, bfloat16) and prints
    what ptxas gave it, and how many of its programs fit on one SM (registers and shared memory)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    print(f"{'variant':<34} {'regs':>5} {'stack':>5} {'shared':>7} {'per SM':>6}  instructions")
    for _, variant in variants:
        config = variant.config
        spec = GROUPED_FAMILY.binary_spec(config, torch.bfloat16, "row_column", multiprocessors=132, use_tma=True)
        constexprs = {**spec.constexprs, "TAIL_M": variant.tail_m, "COLUMN_MAJOR_ITEMS": variant.column_major_items}
        compiled = triton.compile(ASTSource(GROUPED_FAMILY.kernel, spec.signature, constexprs, spec.attrs),
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
        print(f"{variant.name:<34} {registers:>5} {stack:>5} {shared:>7} {per_sm:>6}  {instructions}")


def _problem(experts: int, tokens: int, n: int, k: int, generator: torch.Generator):
    """x, the transposed view of an nn.Linear weight, offsets of balanced random routing, and the row counts."""
    device = torch.device("cuda")
    x = torch.randn(tokens, k, device=device, dtype=torch.bfloat16, generator=generator)
    w = (torch.randn(experts, n, k, device=device, dtype=torch.bfloat16, generator=generator) * k ** -0.5).mT
    counts = torch.bincount(torch.randint(0, experts, (tokens,), device=device, generator=generator),
                            minlength=experts)
    offs = torch.cumsum(counts, 0).to(torch.int32)
    return x, w, offs, counts.tolist()


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


def _time_problem(name: str, experts: int, tokens: int, n: int, k: int, variants, args, matrix_rate: float,
                  multiprocessors: int, generator: torch.Generator) -> None:
    """Checks and times every implementation on one problem; prints its heading and its rows of the table."""
    x, w, offs, counts = _problem(experts, tokens, n, k, generator)
    used = sum(1 for count in counts if count)
    byte_count = 2 * (used * n * k + tokens * k + tokens * n)
    memory_us, compute_us = byte_count / _HBM_BYTES_PER_S * 1e6, 2 * tokens * n * k / matrix_rate * 1e6
    roof_us = max(memory_us, compute_us)
    print(f"{name}: E={experts} T={tokens} N={n} K={k}; tokens per expert {tokens / experts:.0f} (min {min(counts)}, "
          f"max {max(counts)}), {used} experts with tokens; roof {roof_us:.0f} us (memory {memory_us:.0f}: "
          f"{byte_count / 1e9:.2f} GB; compute {compute_us:.0f}); TMA for x and w: {_tma_ready(x, w, True)}")
    reference = _reference(x, w, counts)
    subjects = {"F.grouped_mm": (lambda: F.grouped_mm(x, w, offs=offs), None)}
    for origin, variant in variants:
        subjects[f"{origin} {variant.name}"] = (lambda variant=variant: variant.launch(x, w, offs), variant)
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
    for label, (error, extra) in checks.items():
        variant = subjects[label][1]
        rows_x = waves = ""
        if variant is not None:
            rows, items = variant.rows_and_items(counts, n)
            rows_x = f"{rows / tokens:.3f}"
            waves = f"{items / (variant.programs_per_multiprocessor * multiprocessors):.1f}"
        if label not in medians:
            print(f"  {label:<42} FAILED: error {error:.2e} {extra}")
            continue
        us = statistics.median(medians[label])
        print(f"  {label:<42} {us:8.1f} {roof_us / us:6.3f} {peer_us / us:7.2f} {rows_x:>6} {waves:>6} "
              f"{error:8.1e} {extra:8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", nargs="*", default=[name for name, *_ in PROBLEMS],
                        choices=[name for name, *_ in PROBLEMS])
    parser.add_argument("--only", nargs="*", default=[],
                        help="time only the kernel variants whose name contains one of these")
    parser.add_argument("--rounds", type=int, default=2, help="timings per implementation, in alternating order")
    parser.add_argument("--tolerance", type=float, default=1e-2, help="largest norm error against float32")
    parser.add_argument("--compile-only", action="store_true")
    args = parser.parse_args()
    variants = [(origin, variant) for origin, variant in _variants()
                if not args.only or any(part in variant.name for part in args.only)]
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
    for name, experts, tokens, n, k in PROBLEMS:
        if name in args.problems:
            _time_problem(name, experts, tokens, n, k, variants, args, matrix_rate, multiprocessors, generator)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
