"""The CUDA plugin's FP8 kernels for scaled_mm (the CUTLASS sm_90a GEMMs and cuBLASLt's FP8 slots) on a GPU, each
forced in turn with kabi.use (so each is also gated): against the op's float64 reference with its tolerances on
fresh random inputs with odd M, per-tensor, row-wise and mixed scales, every output dtype, with and without a bias;
outputs inside poisoned guard regions (nothing written outside them); K or N off 16 bytes, a row-major b and
format pairs a kernel lacks declined, not computed wrong; and inside a CUDA-graph capture, replayed on new values
(scales included: they are read on the device)."""

from __future__ import annotations

import pytest
import torch

import kabi

from _guarded_outputs import POISON, assert_guards_intact, guarded_output
from _scaled_mm_checks import (OUT_DTYPES, SCALE_KINDS, cuda_plugin_candidates, cuda_plugin_kernels, make_inputs,
                               run_forced, verdict)

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9),
                       reason="needs a CUDA GPU with FP8 tensor cores (sm_89 or later)"),
]

IS_SM90 = torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)
# (M, N, K): odd M (one row, and sizes off every tile), N and K multiples of 16, which every FP8 kernel takes.
SHAPES = [(1, 256, 128), (77, 1040, 272), (333, 512, 1024)]


# The accurate CUTLASS kernels, which serve every call; the fast-accumulation ones serve only calls with
# use_fast_accum and are checked by test_cuda_plugin_fp8_fast_accum_gpu.py.
CUTLASS = [name for name in cuda_plugin_kernels() if name.startswith("cuda.cutlass.sm90.fp8.")] \
    if torch.cuda.is_available() else []


@pytest.fixture(scope="module", autouse=True)
def plugin_kernels() -> None:
    names = cuda_plugin_kernels()
    assert "cuda.cublaslt.fp8.algo0" in names, f"cuBLASLt's FP8 slots are not registered: {names}"
    if IS_SM90:
        assert len(CUTLASS) == 2 and all(name.startswith("cuda.cutlass.sm90.fp8.") for name in CUTLASS), names


def _assert_declined(name: str, inputs: tuple, out_dtype: str, why: str) -> None:
    """The kernel is ineligible for the call, forcing it raises, and it wrote nothing."""
    candidate = cuda_plugin_candidates(inputs, out_dtype).get(name)
    assert candidate is not None and not candidate.eligible, f"{name} is offered {why}"
    m, n = inputs[0].shape[0], inputs[1].shape[1]
    out, buffer = guarded_output((m, n), getattr(torch, out_dtype))
    with pytest.raises(kabi.KabiError), kabi.use(scaled_mm=name):
        kabi.ops.scaled_mm(*inputs, out_dtype=out_dtype, out=out)
    torch.cuda.synchronize()
    assert bool((buffer == POISON).all()), f"{name} declined {why} but wrote"


@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
@pytest.mark.parametrize("scales", SCALE_KINDS, ids="-".join)
@pytest.mark.parametrize("with_bias", [False, True], ids=["no_bias", "bias"])
def test_every_fp8_kernel_matches_the_reference(out_dtype: str, scales: tuple, with_bias: bool) -> None:
    served = set()
    for seed, (m, n, k) in enumerate(SHAPES):
        inputs = make_inputs(m, n, k, scales=scales, bias_dtype=out_dtype if with_bias else None, seed=seed,
                             device="cuda")
        candidates = cuda_plugin_candidates(inputs, out_dtype)
        for name in CUTLASS:
            assert candidates[name].eligible, f"{name} declines {m}x{n}x{k}: {candidates[name].reason}"
        for name, candidate in candidates.items():
            if not candidate.eligible:
                continue
            out, buffer = run_forced(name, inputs, out_dtype)
            note = verdict(out, *inputs, out_dtype)
            assert note is None, f"{name} {m}x{n}x{k} scales={scales} out={out_dtype} bias={with_bias}: {note}"
            assert_guards_intact(buffer, name)
            served.add(name)
    # cuBLASLt's own pick takes per-tensor scales, except a bias with a float32 output (it has none).
    if scales == ("tensor", "tensor") and not (with_bias and out_dtype == "float32"):
        assert "cuda.cublaslt.fp8.algo0" in served
    assert set(CUTLASS) <= served


@pytest.mark.parametrize("m, n, k, why", [(64, 128, 40, "K of 40 (a's rows are not 16-byte multiples)"),
                                          (64, 100, 64, "N of 100 (out's rows are not 16-byte multiples)")])
def test_misaligned_k_or_n_is_declined_not_computed_wrong(m: int, n: int, k: int, why: str) -> None:
    inputs = make_inputs(m, n, k, seed=3, device="cuda")
    for name in cuda_plugin_kernels():
        _assert_declined(name, inputs, "bfloat16", why)


def test_n_off_16_elements_is_computed_right_or_declined() -> None:
    # N = 136: a bfloat16 out's rows are 272 bytes (TMA's 16-byte pitch holds), but N is not a multiple of 16, which
    # cuBLASLt's FP8 GEMM needs.
    inputs = make_inputs(96, 136, 128, scales=("row", "row"), bias_dtype="bfloat16", seed=4, device="cuda")
    candidates = cuda_plugin_candidates(inputs, "bfloat16")
    for name in cuda_plugin_kernels():
        if name.startswith("cuda.cublaslt"):
            _assert_declined(name, inputs, "bfloat16", "N of 136")
    for name in CUTLASS:
        assert candidates[name].eligible, f"{name}: {candidates[name].reason}"
        out, buffer = run_forced(name, inputs, "bfloat16")
        assert verdict(out, *inputs, "bfloat16") is None, name
        assert_guards_intact(buffer, name)


def test_row_major_b_is_declined() -> None:
    a, b, scale_a, scale_b, bias = make_inputs(64, 128, 64, seed=5, device="cuda")
    row_major = (a, b.contiguous(), scale_a, scale_b, bias)
    for name in cuda_plugin_kernels():
        _assert_declined(name, row_major, "bfloat16", "a row-major b")


@pytest.mark.parametrize("formats", [(torch.float8_e4m3fn, torch.float8_e5m2), (torch.float8_e5m2, torch.float8_e4m3fn),
                                     (torch.float8_e5m2, torch.float8_e5m2)], ids=str)
def test_e5m2_operands_where_cublaslt_has_them(formats: tuple) -> None:
    inputs = make_inputs(80, 256, 512, a_dtype=formats[0], b_dtype=formats[1], seed=6, device="cuda")
    candidates = cuda_plugin_candidates(inputs, "bfloat16")
    for name in CUTLASS:
        assert not candidates[name].eligible, f"{name} is offered {formats}; it reads float8_e4m3fn only"
    if formats == (torch.float8_e5m2, torch.float8_e5m2):
        _assert_declined("cuda.cublaslt.fp8.algo0", inputs, "bfloat16", "two float8_e5m2 operands")
        return
    assert candidates["cuda.cublaslt.fp8.algo0"].eligible, candidates["cuda.cublaslt.fp8.algo0"].reason
    out, buffer = run_forced("cuda.cublaslt.fp8.algo0", inputs, "bfloat16")
    assert verdict(out, *inputs, "bfloat16") is None
    assert_guards_intact(buffer, "cuda.cublaslt.fp8.algo0")


@pytest.mark.parametrize("scales", [("tensor", "tensor"), ("row", "row")], ids="-".join)
def test_every_fp8_kernel_inside_cuda_graph_capture(scales: tuple) -> None:
    inputs = make_inputs(384, 1024, 512, scales=scales, bias_dtype="bfloat16", seed=7, device="cuda")
    eligible = [name for name, candidate in cuda_plugin_candidates(inputs, "bfloat16").items() if candidate.eligible]
    assert set(CUTLASS) <= set(eligible), eligible
    for name in eligible:
        with kabi.use(scaled_mm=name):
            kabi.ops.scaled_mm(*inputs)  # gated, and its plan and workspace made, before the capture
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = kabi.ops.scaled_mm(*inputs)
        fresh = make_inputs(384, 1024, 512, scales=scales, bias_dtype="bfloat16", seed=8, device="cuda")
        for tensor, value in zip(inputs, fresh):
            tensor.copy_(value)
        graph.replay()
        torch.cuda.synchronize()
        assert verdict(out, *inputs, "bfloat16") is None, f"{name} replayed in a graph"
