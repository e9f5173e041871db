"""scaled_mm on a CUDA GPU (FP8 tensor cores: sm_89 and later) against the op's float64 reference, judged as the
correctness gate judges a candidate: every kernel of the op forced in turn (torch._scaled_mm through cuBLASLt, and
each config of the Triton FP8 kernel), float8_e4m3fn operands, per-tensor and row-wise scales, bfloat16 and float32
outputs, with and without a bias, and calls that allow fast accumulation; then each kernel captured in a CUDA graph
and replayed on new values."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 9),
                       reason="needs a CUDA GPU with FP8 tensor cores (sm_89 or later)"),
]

import kabi  # noqa: E402
from _scaled_mm_checks import make_inputs, verdict  # noqa: E402

# (M, N, K): a prefill block of a Llama-3 8B projection, and sizes off the tiles (N and K multiples of 16, which
# cuBLASLt and the Triton device binaries need; the Triton Python kernels also take the others). The Python kernels
# serve only what their binaries decline, so the persistent TMA kernel (sm_90) needs an N its binaries refuse and TMA
# takes: a multiple of 8 but not of 16 (out's rows still 16-byte multiples).
_SHAPES = [(512, 4096, 4096), (300, 1040, 272), (200, 1032, 272), (77, 200, 136)]
# (scales, out_dtype, bias dtype, use_fast_accum): the fast-accumulation kernels serve only calls that allow it.
_CASES = [("tensor", "bfloat16", None, False), ("row", "bfloat16", "bfloat16", False), ("row", "float32", None, False),
          ("tensor", "float16", "float16", False), ("row", "bfloat16", "bfloat16", True)]


def _kernels() -> list[str]:
    a, b, scale_a, scale_b, _ = make_inputs(64, 64, 64, device="cuda")
    return [candidate.name for candidate in kabi.explain(kabi.ops.scaled_mm, a, b, scale_a, scale_b).candidates]


def test_every_kernel_matches_the_reference() -> None:
    kernels = _kernels()
    assert "torch.scaled_mm.cuda" in kernels and any(name.startswith("triton.scaled_mm.") for name in kernels)
    served = dict.fromkeys(kernels, 0)
    failures = []
    for shape_index, (m, n, k) in enumerate(_SHAPES):
        for case_index, (scales, out_dtype, bias_dtype, use_fast_accum) in enumerate(_CASES):
            inputs = make_inputs(m, n, k, scales=(scales, scales), bias_dtype=bias_dtype,
                                 seed=shape_index * 10 + case_index, device="cuda")
            attributes = {"out_dtype": out_dtype, "use_fast_accum": use_fast_accum}
            eligible = {candidate.name for candidate in
                        kabi.explain(kabi.ops.scaled_mm, *inputs, **attributes).candidates if candidate.eligible}
            for name in kernels:
                if name not in eligible:
                    continue
                with kabi.use(scaled_mm=name):
                    out = kabi.ops.scaled_mm(*inputs, **attributes)
                note = verdict(out, *inputs, out_dtype)
                if note is not None:
                    failures.append(f"{name} {m}x{n}x{k} {scales} {out_dtype} bias={bias_dtype} "
                                    f"use_fast_accum={use_fast_accum}: {note}")
                served[name] += 1
    assert not failures, "\n".join(failures)
    assert all(served.values()), f"kernels that served no case: {[name for name, n in served.items() if not n]}"


@pytest.mark.parametrize("scales", ["tensor", "row"])
def test_every_kernel_inside_cuda_graph_capture(scales) -> None:
    a, b, scale_a, scale_b, bias = make_inputs(512, 1024, 1024, scales=(scales, scales), bias_dtype="bfloat16",
                                               seed=7, device="cuda")
    eligible = [candidate.name for candidate in
                kabi.explain(kabi.ops.scaled_mm, a, b, scale_a, scale_b, bias).candidates if candidate.eligible]
    assert len(eligible) >= 2, eligible
    for name in eligible:
        with kabi.use(scaled_mm=name):
            kabi.ops.scaled_mm(a, b, scale_a, scale_b, bias)  # gated and compiled before capture
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = kabi.ops.scaled_mm(a, b, scale_a, scale_b, bias)
        fresh = make_inputs(512, 1024, 1024, scales=(scales, scales), bias_dtype="bfloat16", seed=8, device="cuda")
        for tensor, value in zip((a, b, scale_a, scale_b, bias), fresh):
            tensor.copy_(value)
        graph.replay()
        torch.cuda.synchronize()
        assert verdict(out, a, b, scale_a, scale_b, bias, "bfloat16") is None, name
