"""scaled_mm's Triton FP8 kernels as device binaries, on a CUDA GPU with FP8 tensor cores (sm_89, sm_90): the first
CUDA dispatch registers every binary of the native set for this GPU; each one, forced, against the op's float64
reference (the correctness gate's check) on fresh random inputs, with per-tensor, row-wise and mixed scales (a
row-wise one strided too), a bias and none, in its output dtype, on sizes the binaries take that are multiples of no
tile, into NaN-poisoned outputs; each captured in a CUDA graph and replayed on new values, with a per-tensor and a
row-wise scale; selection picking a binary where one covers the problem (its Python twin declining it) and, where
the image's assumptions do not hold (K or a pitch off 16, e5m2 operands), declining the binaries with the reason
while a Python kernel serves (the persistent one through its pointer kernel where TMA cannot read a pitch). A strided
bias, which no Triton kernel takes, is refused by the core in test_triton_scaled_mm_compile.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import kabi  # noqa: E402
from _scaled_mm_checks import SCALE_KINDS, make_inputs, verdict, with_strided_row_scales  # noqa: E402
from kabi.backends.triton import _native  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not any(device.device_type == "cuda" and device.arch >= 89 for device in kabi.devices()),
                       reason="needs a CUDA GPU with FP8 tensor cores (sm_89 or later) that libkabi sees"),
]

_FAMILIES = ["scaled_mm", "scaled_mm_tma"]
# (M, N, K): N and K multiples of 16 (what the binaries declare) but of no tile, M of nothing; one row; a tile-sized
# problem with a K loop of many blocks.
_SHAPES = [(300, 1040, 2064), (1, 272, 528), (256, 512, 4096)]


def _arch() -> int:
    return kabi.device_info("cuda", 0).arch


def _binaries() -> list[kabi.KernelInfo]:
    a, b, scale_a, scale_b, _ = make_inputs(64, 64, 64, device="cuda")
    kabi.explain(kabi.ops.scaled_mm, a, b, scale_a, scale_b)
    return [kernel for kernel in kabi.kernels("scaled_mm")
            if kernel.backend == "triton" and kernel.kind == "device_binary"]


def _run_forced(name: str, inputs: tuple, out_dtype: str) -> torch.Tensor:
    m, n = inputs[0].shape[0], inputs[1].shape[1]
    out = torch.full((m, n), float("nan"), dtype=getattr(torch, out_dtype), device="cuda")
    with kabi.use(scaled_mm=name):
        assert kabi.explain(kabi.ops.scaled_mm, *inputs, out_dtype=out_dtype).pick == name
        kabi.ops.scaled_mm(*inputs, out_dtype=out_dtype, out=out)
    torch.cuda.synchronize()
    return out


def _block_m(kernel: kabi.KernelInfo) -> int:
    tag = kernel.name.removeprefix("triton.scaled_mm.").removeprefix("tma.")
    return int(tag.split("_")[0].removeprefix("bm"))


def test_the_first_cuda_dispatch_registers_every_scaled_mm_binary() -> None:
    expected = {variant.name(_arch()) for variant in _native.binary_variants(_arch(), _FAMILIES)}
    assert expected and expected == {kernel.name for kernel in _binaries()}


def test_every_binary_matches_the_reference_with_every_kind_of_scale_and_bias() -> None:
    failures, runs = [], 0
    for kernel in _binaries():
        (out_dtype,) = kernel.dtypes
        for shape_index, (m, n, k) in enumerate(_SHAPES):
            # A tile taller than M's next power of two declines it (its shape rule), as its twin does.
            if _block_m(kernel) > max(64, 1 << (m - 1).bit_length()):
                continue
            for case, scales in enumerate(SCALE_KINDS):
                for bias_dtype in (out_dtype, None):
                    inputs = make_inputs(m, n, k, scales=scales, bias_dtype=bias_dtype, device="cuda",
                                         seed=1000 * shape_index + 10 * case + (bias_dtype is None))
                    for strided in (False, True):
                        given = with_strided_row_scales(inputs) if strided else inputs
                        where = f"{kernel.name} {m}x{n}x{k} scales={scales} strided={strided} bias={bias_dtype}"
                        try:
                            note = verdict(_run_forced(kernel.name, given, out_dtype), *given, out_dtype)
                            runs += 1
                            if note is not None:
                                failures.append(f"{where}: {note}")
                        except (AssertionError, kabi.KabiError) as error:
                            failures.append(f"{where}: {type(error).__name__}: {error}")
    assert not failures, "\n".join(failures[:30])
    assert runs >= len(_binaries()) * len(SCALE_KINDS) * 2 * 2


@pytest.mark.parametrize("scales", [("tensor", "tensor"), ("row", "row")], ids=["per_tensor", "row_wise"])
def test_every_binary_replays_in_a_cuda_graph_on_new_values(scales) -> None:
    failures = []
    for kernel in _binaries():
        (out_dtype,) = kernel.dtypes
        inputs = make_inputs(512, 1040, 2064, scales=scales, bias_dtype=out_dtype, seed=7, device="cuda")
        where = f"{kernel.name} graph scales={scales}"
        try:
            with kabi.use(scaled_mm=kernel.name):
                kabi.ops.scaled_mm(*inputs, out_dtype=out_dtype)
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    out = kabi.ops.scaled_mm(*inputs, out_dtype=out_dtype)
            for seed in (8, 9):
                fresh = make_inputs(512, 1040, 2064, scales=scales, bias_dtype=out_dtype, seed=seed, device="cuda")
                for tensor, values in zip(inputs, fresh):
                    tensor.copy_(values)
                out.fill_(float("nan"))
                graph.replay()
                torch.cuda.synchronize()
                note = verdict(out, *inputs, out_dtype)
                if note is not None:
                    failures.append(f"{where} seed {seed}: {note}")
        except (AssertionError, kabi.KabiError) as error:
            failures.append(f"{where}: {type(error).__name__}: {error}")
    assert not failures, "\n".join(failures)


def test_selection_picks_a_binary_and_declines_the_binaries_with_the_reason() -> None:
    inputs = make_inputs(512, 1024, 768, scales=("row", "tensor"), bias_dtype="bfloat16", seed=3, device="cuda")
    with kabi.use(scaled_mm="triton"):
        explanation = kabi.explain(kabi.ops.scaled_mm, *inputs)
        out = kabi.ops.scaled_mm(*inputs)
    (pick,) = [candidate for candidate in explanation.candidates if candidate.kernel.name == explanation.pick]
    assert pick.kernel.kind == "device_binary" and pick.kernel.name.endswith(f".bfloat16.sm{_arch()}"), str(explanation)
    # Each Python kernel whose binary serves the problem says so rather than compete with it.
    assert any("runs as its device binary" in candidate.reason for candidate in explanation.candidates)
    assert verdict(out, *inputs, "bfloat16") is None
    a, b, scale_a, scale_b, bias = inputs
    e5m2 = make_inputs(512, 1024, 768, a_dtype=torch.float8_e5m2, seed=4, device="cuda")
    declined = {
        # Sizes the Python kernels take and the binaries do not (K off 16).
        "K off 16": (make_inputs(300, 1024, 1000, seed=5, device="cuda"), "not a multiple of 16 as the image assumes"),
        "e5m2 a": (e5m2, "float8_e5m2"),
    }
    for what, (given, reason) in declined.items():
        with kabi.use(scaled_mm="triton"):
            explanation = kabi.explain(kabi.ops.scaled_mm, *given)
            out = kabi.ops.scaled_mm(*given)
        # The bfloat16 binaries: the others decline every case here for their output dtype.
        binaries = [candidate for candidate in explanation.candidates if candidate.kernel.kind == "device_binary"
                    and candidate.kernel.backend == "triton" and candidate.kernel.dtypes == ("bfloat16",)]
        assert binaries and not any(candidate.eligible for candidate in binaries), what
        assert all(reason in candidate.reason for candidate in binaries), (what, [c.reason for c in binaries])
        assert explanation.pick.startswith("triton.scaled_mm.") and not explanation.pick.endswith(f"sm{_arch()}"), what
        assert verdict(out, *given, "bfloat16") is None, what


def test_a_pitch_the_binaries_decline_is_refused_under_force_with_their_reason() -> None:
    # A Python kernel yields to its binary by the problem's sizes (the problem carries no strides), so a view whose
    # pitch is off 16 bytes is declined by every Triton kernel: forced to Triton it is an error naming the binaries'
    # reason, never a wrong answer.
    a, b, scale_a, scale_b, bias = make_inputs(512, 1024, 768, scales=("row", "tensor"), bias_dtype="bfloat16",
                                               seed=6, device="cuda")
    a_view = torch.empty(512, 776, dtype=a.dtype, device="cuda")[:, :768].copy_(a)
    with kabi.use(scaled_mm="triton"), pytest.raises(kabi.NoEligibleKernelError,
                                                     match="not a multiple of 16 as the image assumes"):
        kabi.ops.scaled_mm(a_view, b, scale_a, scale_b, bias)
