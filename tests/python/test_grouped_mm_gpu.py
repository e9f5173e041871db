"""grouped_mm on a CUDA GPU against the op's float64 reference, judged as the correctness gate judges a candidate:
the persistent Triton kernel (every config that fits; TMA on sm_90), torch's F.grouped_mm and the per-group loop, in
bfloat16 and float16, both weight layouts, MoE-like routings (empty groups, one hot expert) and the 3-D form; then
kabi.ops.grouped_mm captured into a CUDA graph and replayed with new routings written into the same offsets, and the
per-group loop captured (it runs torch's grouped GEMM there, since a capture cannot read offsets on the host)."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

import kabi  # noqa: E402
from _grouped_checks import assert_matches  # noqa: E402
from kabi.backends import torch_native  # noqa: E402
from kabi.backends.triton._families import device_facts  # noqa: E402
from kabi.backends.triton._grouped import GROUPED_CONFIGS, grouped_unsupported_reason, launch_grouped_mm  # noqa: E402

_DTYPES = [torch.bfloat16, torch.float16]
# (experts, group rows or None for the 3-D form, rows per group in the 3-D form, N, K)
_CASES = {
    "decode-balanced": (16, [5, 0, 9, 3, 0, 0, 12, 1, 4, 4, 0, 7, 2, 0, 6, 11], 0, 768, 512),
    "prefill-one-hot-expert": (8, [0, 0, 1500, 3, 0, 0, 0, 97], 0, 1024, 768),
    "odd-sizes": (5, [33, 0, 71, 2, 40], 0, 264, 200),
    "3d": (4, None, 96, 512, 256),
}


def _inputs(case, dtype, transposed):
    experts, group_rows, rows_per_group, n, k = _CASES[case]
    generator = torch.Generator(device="cuda").manual_seed(len(case) * 7919 + n)

    def normal(*shape):
        return torch.randn(*shape, device="cuda", generator=generator).to(dtype)

    w = normal(experts, n, k).mT if transposed else normal(experts, k, n)
    if group_rows is None:
        return normal(experts, rows_per_group, k), w, None
    offs = torch.tensor(group_rows, device="cuda").cumsum(0).to(torch.int32)
    return normal(sum(group_rows), k), w, offs


@pytest.mark.parametrize("transposed", [True, False], ids=["linear-weight", "row-major-weight"])
@pytest.mark.parametrize("dtype", _DTYPES, ids=lambda dtype: str(dtype).removeprefix("torch."))
@pytest.mark.parametrize("case", list(_CASES))
def test_every_kernel_matches_the_reference(case, dtype, transposed):
    x, w, offs = _inputs(case, dtype, transposed)
    arch, _ = device_facts(x.device)
    failures, runs = [], 0
    for config in GROUPED_CONFIGS:
        if grouped_unsupported_reason(config, x.shape[-2], w.shape[-1], w.shape[-2], x.element_size(), arch):
            continue
        try:
            assert_matches(launch_grouped_mm(config, x, w, offs), x, w, offs)
            runs += 1
        except AssertionError as error:
            failures.append(f"triton {config.tag}: {error}")
    for name, function in (("F.grouped_mm", torch_native.grouped_mm), ("loop", torch_native.grouped_mm_loop)):
        try:
            assert_matches(function(x, w, offs), x, w, offs)
        except AssertionError as error:
            failures.append(f"{name}: {error}")
    assert not failures, "\n".join(failures)
    assert runs > 0


@pytest.mark.parametrize("dtype", _DTYPES, ids=lambda dtype: str(dtype).removeprefix("torch."))
def test_a_captured_call_serves_new_routings_on_replay(dtype):
    x, w, offs = _inputs("decode-balanced", dtype, transposed=True)
    # Tuned outside the capture for both modes: the capture runs the graph-mode winner.
    kabi.tune(kabi.ops.grouped_mm, x, w, offs, mode="both")
    assert_matches(kabi.ops.grouped_mm(x, w, offs), x, w, offs)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        kabi.ops.grouped_mm(x, w, offs)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = kabi.ops.grouped_mm(x, w, offs)
    generator = torch.Generator().manual_seed(7)
    for _ in range(3):
        counts = torch.bincount(torch.randint(0, w.shape[0], (x.shape[0],), generator=generator),
                                minlength=w.shape[0])
        offs.copy_(counts.cumsum(0).to(torch.int32))
        x.copy_(torch.randn(x.shape, generator=generator).to(dtype))
        graph.replay()
        torch.cuda.synchronize()
        assert_matches(out, x, w, offs)


def test_every_triton_config_through_kabi_ops():
    x, w, offs = _inputs("prefill-one-hot-expert", torch.bfloat16, transposed=True)
    explanation = kabi.explain(kabi.ops.grouped_mm, x, w, offs)
    triton_kernels = [candidate.kernel.name for candidate in explanation.candidates
                      if candidate.eligible and candidate.kernel.backend == "triton"]
    assert triton_kernels, explanation
    for name in triton_kernels:
        with kabi.use(grouped_mm=name):
            assert_matches(kabi.ops.grouped_mm(x, w, offs), x, w, offs)


def test_the_loop_kernel_captured_runs_without_reading_offsets():
    x, w, offs = _inputs("decode-balanced", torch.bfloat16, transposed=True)
    torch_native.grouped_mm_loop(x, w, offs)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = torch_native.grouped_mm_loop(x, w, offs)
    offs.fill_(x.shape[0])  # every row to the first expert
    graph.replay()
    torch.cuda.synchronize()
    assert_matches(out, x, w, offs)
