"""grouped_mm's Triton grouped GEMM as device binaries on a CUDA GPU: the first CUDA dispatch registers one binary per
(config, dtype, weight layout) for this GPU; every one of them, forced through kabi.ops.grouped_mm, matches the
float64 reference (the gate's check) on fresh random inputs in both forms, with empty groups, every row in one group,
one group, rows past the last offset, T a multiple of nothing, written into a NaN-poisoned output whose surroundings
stay untouched; one replays in a CUDA graph while the offsets change between replays; a problem off the image's
assumptions is declined with the reason and served by the Python twin; tuning measures the binaries; and a C
program launches one with no Python (tests/cpp/grouped_binary_caller.c)."""

from __future__ import annotations

import subprocess

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import kabi  # noqa: E402
from _c_caller import compile_c_caller  # noqa: E402
from _grouped_checks import assert_matches  # noqa: E402
from _guarded_outputs import assert_guards_intact, guarded_output  # noqa: E402
import _cmake  # noqa: E402
from kabi.backends.triton import _native  # noqa: E402
from kabi.backends.triton._grouped import GROUPED_CONFIGS, GROUPED_FAMILY  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not any(device.device_type == "cuda" for device in kabi.devices()),
                       reason="needs a CUDA GPU that libkabi sees"),
]

# K and N multiples of 16 (the binaries declare it) but of no tile. Each case has rows enough for the tallest tile
# (its supports predicate wants BLOCK_M at most the rows' next power of two), so every binary takes every case.
K, N = 336, 208
# (group rows, or None for the 3-D form; rows past the last offset, or rows per group in the 3-D form)
_CASES = {
    "empty-groups": ((37, 0, 81, 0, 0, 5, 129, 0), 11),
    "all-rows-in-one-group": ((0, 0, 263, 0), 0),
    "one-group": ((77,), 6),
    "decode-routing": ((3, 0, 9, 1, 0, 12, 7, 0, 2, 5, 0, 11, 4, 0, 6, 8), 0),
    "3d": (None, 4),
    "3d-one-group": (None, 1),
}
_ROWS_PER_GROUP = 71


def _arch() -> int:
    return kabi.device_info("cuda", 0).arch


def _grouped_binaries() -> list[kabi.KernelInfo]:
    x = torch.empty(8, 16, device="cuda")
    kabi.explain(kabi.ops.grouped_mm, x, torch.empty(2, 16, 16, device="cuda"),
                 torch.tensor([3, 8], dtype=torch.int32, device="cuda"))
    return [kernel for kernel in kabi.kernels("grouped_mm")
            if kernel.backend == "triton" and kernel.kind == "device_binary"]


def _inputs(case: str, dtype: torch.dtype, linear_weight: bool):
    """Fresh random x, w (the view [E, K, N] of an nn.Linear [E, N, K] weight, or a row-major [E, K, N]) and offs
    (None in the 3-D form) on the GPU."""
    group_rows, extra = _CASES[case]
    groups = len(group_rows) if group_rows is not None else extra
    w = (torch.randn(groups, N, K, device="cuda").to(dtype).mT if linear_weight
         else torch.randn(groups, K, N, device="cuda").to(dtype))
    if group_rows is None:
        return torch.randn(groups, _ROWS_PER_GROUP, K, device="cuda").to(dtype), w, None
    offs = torch.tensor(group_rows, device="cuda").cumsum(0).to(torch.int32)
    return torch.randn(sum(group_rows) + extra, K, device="cuda").to(dtype), w, offs


def _check(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor | None) -> None:
    assert_matches(out.cpu(), x.cpu(), w.cpu(), None if offs is None else offs.cpu())


def test_the_first_cuda_dispatch_registers_the_grouped_binaries() -> None:
    names = {kernel.name for kernel in _grouped_binaries()}
    expected = {variant.name(_arch()) for variant in _native.binary_variants(_arch(), ["grouped"])}
    # One per config whose buffers fit this GPU's shared memory (every one on sm_90), dtype and weight layout.
    fitting = [config for config in GROUPED_CONFIGS if GROUPED_FAMILY.binary_rows(config, torch.bfloat16, _arch())]
    assert len(expected) == len(fitting) * 2 * 2 and expected <= names


def test_every_grouped_binary_matches_the_reference_in_both_forms() -> None:
    kernels = _grouped_binaries()
    assert kernels
    failures, runs = [], 0
    for kernel in kernels:
        (dtype_name,) = kernel.dtypes
        dtype = getattr(torch, dtype_name)
        for case in _CASES:
            x, w, offs = _inputs(case, dtype, linear_weight=".row_column." in kernel.name)
            shape = (x.shape[0], N) if offs is not None else (x.shape[0], x.shape[1], N)
            out, buffer = guarded_output(shape, dtype)
            out.fill_(float("nan"))
            where = f"{kernel.name} {case}"
            try:
                with kabi.use(grouped_mm=kernel.name):
                    assert kabi.explain(kabi.ops.grouped_mm, x, w, offs).pick == kernel.name
                    assert kabi.ops.grouped_mm(x, w, offs, out=out) is out
                torch.cuda.synchronize()
                _check(out, x, w, offs)
                assert_guards_intact(buffer, kernel.name)
                runs += 1
            except (AssertionError, kabi.KabiError) as error:
                failures.append(f"{where}: {type(error).__name__}: {error}")
    assert not failures, "\n".join(failures)
    assert runs == len(kernels) * len(_CASES)


def test_a_grouped_binary_replays_in_a_graph_with_new_offsets() -> None:
    name = f"triton.grouped_mm.{GROUPED_CONFIGS[1].tag}.row_column.bfloat16.sm{_arch()}"
    x, w, offs = _inputs("decode-routing", torch.bfloat16, linear_weight=True)
    with kabi.use(grouped_mm=name):
        kabi.ops.grouped_mm(x, w, offs)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = kabi.ops.grouped_mm(x, w, offs)
    generator = torch.Generator().manual_seed(3)
    routings = [torch.bincount(torch.randint(0, w.shape[0], (x.shape[0],), generator=generator),
                               minlength=w.shape[0]),
                torch.zeros(w.shape[0], dtype=torch.int64).index_fill_(0, torch.tensor([5]), x.shape[0]),
                torch.zeros(w.shape[0], dtype=torch.int64)]
    for counts in routings:
        offs.copy_(counts.cumsum(0).to(torch.int32))
        x.copy_(torch.randn(x.shape, generator=generator).to(torch.bfloat16))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check(out, x, w, offs)


def test_a_problem_off_the_images_assumptions_goes_to_the_python_twin() -> None:
    config = GROUPED_CONFIGS[1]
    name = f"triton.grouped_mm.{config.tag}.row_column.bfloat16.sm{_arch()}"
    x = torch.randn(300, 344, device="cuda").to(torch.bfloat16)[:, :340]
    w = torch.randn(4, N, 340, device="cuda").to(torch.bfloat16).mT
    offs = torch.tensor([50, 50, 200, 290], dtype=torch.int32, device="cuda")
    with pytest.raises(kabi.NoEligibleKernelError, match="not a multiple of 16 as the image assumes"):
        with kabi.use(grouped_mm=name):
            kabi.ops.grouped_mm(x, w, offs)
    twin = f"triton.grouped_mm.{config.tag}"
    explanation = kabi.explain(kabi.ops.grouped_mm, x, w, offs)
    (candidate,) = [candidate for candidate in explanation.candidates if candidate.kernel.name == twin]
    assert candidate.eligible, str(explanation)
    with kabi.use(grouped_mm=twin):
        _check(kabi.ops.grouped_mm(x, w, offs), x, w, offs)
    # Where the binary serves, its twin says so rather than compete with it.
    x_aligned, w_aligned, offs_aligned = _inputs("empty-groups", torch.bfloat16, linear_weight=True)
    explanation = kabi.explain(kabi.ops.grouped_mm, x_aligned, w_aligned, offs_aligned)
    (candidate,) = [candidate for candidate in explanation.candidates if candidate.kernel.name == twin]
    assert f"runs as its device binary {name}" in candidate.reason, str(explanation)


def test_tuning_measures_the_grouped_binaries() -> None:
    x, w, offs = _inputs("empty-groups", torch.bfloat16, linear_weight=True)
    report = kabi.tune(kabi.ops.grouped_mm, x, w, offs)
    timed = [measurement.kernel for measurement in report.measurements
             if measurement.kernel.startswith("triton.grouped_mm.") and measurement.kernel.endswith(f".sm{_arch()}")
             and measurement.time_us < float("inf")]
    assert timed, str(report)


def test_a_c_caller_launches_a_grouped_binary(tmp_path) -> None:
    program = compile_c_caller(tmp_path, _cmake.REPOSITORY / "tests" / "cpp" / "grouped_binary_caller.c")
    gpu = kabi.device_info("cuda", 0)
    for layout in ("row_column", "row_major"):
        # The binaries registration compiles (or finds) for this GPU, as a C application would ship them.
        variants = _native.binary_variants(gpu.arch, ["grouped"], ["bfloat16"], [GROUPED_CONFIGS[0].tag])
        directory = _native.ensure_binaries(variants, gpu.arch, gpu.compute_units)
        (variant,) = [variant for variant in variants if variant.layout == layout]
        result = subprocess.run([str(program), str(directory), variant.name(gpu.arch)], capture_output=True,
                                text=True, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "PASSED" in result.stdout and "3-D form" in result.stdout, result.stdout
