"""kabi.cuda.register_source on a GPU: a plain tiled CUDA C++ matmul compiled with NVRTC for the device's arch runs
through the core's device-binary launch, matches a float64 reference on odd and strided shapes, passes the
correctness gate, takes part in tuning, can be forced with kabi.use and replays in a CUDA graph (a C++ program
launching it: test_cpp_app_cuda.py)."""

from __future__ import annotations

import pytest
import torch

import kabi

from _cuda_sources import tiled_matmul_declaration

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not any(device.device_type == "cuda" for device in kabi.devices()),
                       reason="needs a CUDA GPU that libkabi sees"),
]
pytest.importorskip("cuda.bindings.nvrtc", reason="kabi.cuda needs cuda-bindings and nvidia-cuda-nvrtc")

# float32 products over K <= 300 in float32; float16/bfloat16 outputs rounded once.
TOLERANCES = {torch.float32: (1e-4, 1e-4), torch.float16: (2e-2, 2e-3), torch.bfloat16: (6e-2, 1e-2)}
DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


@pytest.fixture
def tiled(request) -> kabi.cuda.SourceKernel:
    dtype = DTYPE_NAMES[request.param]
    (kernel,) = kabi.cuda.register_source("matmul", **tiled_matmul_declaration(dtype), name=f"test.gpu.tiled.{dtype}")
    yield kernel
    kabi.unregister_kernel("matmul", kernel.name)


def _reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.double() @ b.double()).to(a.dtype)


@pytest.mark.parametrize("tiled", list(DTYPE_NAMES), indirect=True)
@pytest.mark.parametrize("m, n, k", [(1, 45, 33), (77, 45, 300), (128, 256, 64)])
def test_the_registered_kernel_matches_the_reference(tiled, m: int, n: int, k: int) -> None:
    dtype = next(dtype for dtype, name in DTYPE_NAMES.items() if tiled.name.endswith(f"{name}.sm{tiled.arch}"))
    a = torch.randn(m, k + 7, dtype=dtype, device="cuda")[:, :k]  # row-strided: its rows are k + 7 apart
    b = torch.randn(k, n, dtype=dtype, device="cuda")
    with kabi.use(matmul=tiled.name):
        explanation = kabi.explain(kabi.ops.matmul, a, b)
        c = kabi.ops.matmul(a, b)
    assert explanation.pick == tiled.name
    (candidate,) = [c for c in explanation.candidates if c.kernel.name == tiled.name]
    assert candidate.kernel.kind == "device_binary"
    rtol, atol = TOLERANCES[dtype]
    torch.testing.assert_close(c, _reference(a, b), rtol=rtol, atol=atol)


@pytest.mark.parametrize("tiled", [torch.float16], indirect=True)
def test_the_kernel_passes_the_gate_and_is_tuned_with_the_others(tiled) -> None:
    a = torch.randn(96, 80, dtype=torch.float16, device="cuda")
    b = torch.randn(80, 112, dtype=torch.float16, device="cuda")
    report = kabi.verify(kabi.ops.matmul, a, b)
    (verdict,) = [verdict for verdict in report.verdicts if verdict.kernel == tiled.name]
    assert verdict.passed, str(report)
    tuning = kabi.tune(kabi.ops.matmul, a, b)
    measurement = tuning.measurement(tiled.name)
    assert measurement is not None and 0 < measurement.time_us < float("inf"), tuning


@pytest.mark.parametrize("tiled", [torch.bfloat16], indirect=True)
def test_the_kernel_replays_in_a_cuda_graph(tiled) -> None:
    a = torch.randn(200, 136, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(136, 72, dtype=torch.bfloat16, device="cuda")
    with kabi.use(matmul=tiled.name):
        kabi.ops.matmul(a, b)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            c = kabi.ops.matmul(a, b)
    a.copy_(torch.randn_like(a))
    b.copy_(torch.randn_like(b))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(c, _reference(a, b), rtol=6e-2, atol=1e-2)
