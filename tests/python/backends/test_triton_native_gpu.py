"""Triton candidates on the native launch path, on a CUDA GPU: the first CUDA dispatch registers the Triton configs
as device binaries for this GPU, a Triton pick is launched by the core (its kind is a device binary; the Python
kernel declines the problem), the result matches the reference in eager calls and in a replayed CUDA graph, tuning
measures the binaries, a binary's Python predicate is asked once per problem, and every split-K binary (serial
split-K: its slices added in the same launch) matches the reference call after call and in replayed CUDA graphs (a
C++ program launching the cached binaries: test_cpp_app_cuda.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

import kabi  # noqa: E402
from kabi.backends.triton import TILED_CONFIGS, _native  # noqa: E402
from kabi.backends.triton._families import FAMILIES  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not any(device.device_type == "cuda" for device in kabi.devices()),
                       reason="needs a CUDA GPU that libkabi sees"),
]


def _gpu() -> kabi.DeviceInfo:
    return kabi.device_info("cuda", 0)


def _triton_binaries() -> list[kabi.KernelInfo]:
    kabi.explain(kabi.ops.matmul, torch.empty(8, 8, device="cuda"), torch.empty(8, 8, device="cuda"))
    return [kernel for kernel in kabi.kernels("matmul") if kernel.backend == "triton" and kernel.kind == "device_binary"]


def _assert_close(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    reference = a.double() @ b.double()
    error = ((out.double() - reference).norm() / reference.norm()).item()
    assert out.dtype == a.dtype and error < 1e-2, error


def test_the_first_cuda_dispatch_registers_the_triton_binaries() -> None:
    binaries = _triton_binaries()
    expected = {variant.name(_gpu().arch) for variant in _native.binary_variants(_gpu().arch, FAMILIES)}
    assert expected and expected <= {kernel.name for kernel in binaries}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape, transposed", [((512, 384, 256), False), ((777, 520, 1024), True),
                                               ((48, 1000, 2048), False)])
def test_a_triton_pick_is_launched_by_the_core(dtype, shape, transposed) -> None:
    m, n, k = shape
    a = torch.randn((k, m) if transposed else (m, k), dtype=dtype, device="cuda")
    b = torch.randn((n, k) if transposed else (k, n), dtype=dtype, device="cuda")
    a, b = (a.t(), b.t()) if transposed else (a, b)
    with kabi.use(matmul="triton"):
        explanation = kabi.explain(kabi.ops.matmul, a, b)
        out = kabi.ops.matmul(a, b)
    (pick,) = [candidate for candidate in explanation.candidates if candidate.kernel.name == explanation.pick]
    if m > 64:  # decode shapes may go to the decode family, which has no binary
        assert pick.kernel.kind == "device_binary", str(explanation)
    assert any(candidate.eligible and candidate.kernel.kind == "device_binary" for candidate in explanation.candidates)
    # Each Python kernel whose binary serves the problem says so rather than compete with it.
    assert any("runs as its device binary" in candidate.reason for candidate in explanation.candidates)
    _assert_close(out, a, b)


def test_a_binary_pick_replays_in_a_cuda_graph() -> None:
    a = torch.randn(1024, 512, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(512, 768, dtype=torch.bfloat16, device="cuda")
    with kabi.use(matmul="triton"):
        assert kabi.explain(kabi.ops.matmul, a, b).pick.endswith(f".bfloat16.sm{_gpu().arch}")
        kabi.ops.matmul(a, b)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = kabi.ops.matmul(a, b)
    a.copy_(torch.randn_like(a))
    b.copy_(torch.randn_like(b))
    graph.replay()
    torch.cuda.synchronize()
    _assert_close(out, a, b)


def test_tuning_measures_the_binaries() -> None:
    a = torch.randn(2048, 1024, dtype=torch.float16, device="cuda")
    b = torch.randn(1024, 2048, dtype=torch.float16, device="cuda")
    report = kabi.tune(kabi.ops.matmul, a, b)
    timed = [measurement for measurement in report.measurements
             if measurement.kernel.endswith(f".float16.sm{_gpu().arch}") and measurement.time_us < float("inf")]
    assert timed, report


def test_a_binary_predicate_is_asked_once_per_problem(tmp_path) -> None:
    from kabi.backends.triton import compile_to_binary
    from kabi.ops._kernel_registration import register_binary

    gpu = _gpu()
    # The strided layout is not one the default registration compiles: this binary is registered here only.
    manifest = compile_to_binary("tiled", TILED_CONFIGS[0], "float16", gpu.arch, tmp_path, layout="strided")
    asked = []

    def supports(problem) -> bool:
        asked.append(problem.dims)
        return True

    name = register_binary(manifest, "matmul", supports)
    try:
        a = torch.randn(300, 200, dtype=torch.float16, device="cuda")
        b = torch.randn(200, 100, dtype=torch.float16, device="cuda")
        with kabi.use(matmul=name):
            for _ in range(5):
                out = kabi.ops.matmul(a, b)
        _assert_close(out, a, b)
        # Selection and every launch check the predicate; the launches find its remembered verdict.
        assert asked == [{"M": 300, "K": 200, "N": 100}]
    finally:
        kabi.unregister_kernel("matmul", name)


def _problem_for(kernel: kabi.KernelInfo) -> tuple[int, int, int]:
    """(M, N, K) that a binary serves: M within its row count (decode, small_m), K and N multiples of 16 but of no
    tile size, so the edges are masked."""
    rows = next((int(part[1:]) for part in kernel.name.split(".") if part[0] == "m" and part[1:].isdigit()), 0)
    if ".small_m." in kernel.name:
        return int(kernel.name.split(".small_m.bm")[1].split("_")[0]), 1040, 2064
    return {0: 300, 1: 1, 16: 5, 32: 20, 64: 64}[rows], 1040, 2064


@pytest.mark.parametrize("layout", ["row_column", "row_major"])
def test_every_binary_of_the_linear_layout_and_of_decode_matches_the_reference(layout) -> None:
    arch = _gpu().arch
    kernels = [kernel for kernel in _triton_binaries() if f".{layout}." in kernel.name
               and (layout == "row_column" or ".decode." in kernel.name)]
    assert kernels, f"no {layout} binaries registered for sm_{arch}"
    failures = []
    for kernel in kernels:
        (dtype_name,) = kernel.dtypes
        dtype = getattr(torch, dtype_name)
        m, n, k = _problem_for(kernel)
        a = torch.randn(m, k, dtype=dtype, device="cuda")
        # row_column: b is an nn.Linear weight [N, K] seen as w.T (read in place); row_major: a [K, N] matrix.
        b = torch.randn(n, k, dtype=dtype, device="cuda").t() if layout == "row_column" else \
            torch.randn(k, n, dtype=dtype, device="cuda")
        try:
            with kabi.use(matmul=kernel.name):
                out = kabi.ops.matmul(a, b)
        except kabi.KabiError as error:
            failures.append(f"{kernel.name} {m}x{n}x{k}: {error}")
            continue
        reference = a.double() @ b.double()
        error = ((out.double() - reference).norm() / reference.norm()).item()
        if not error < 1e-2:
            failures.append(f"{kernel.name} {m}x{n}x{k}: relative error {error:.3g}")
    assert not failures, failures


def test_a_decode_binary_replays_in_a_graph_and_declines_what_its_image_does_not_assume() -> None:
    arch = _gpu().arch
    name = f"triton.matmul.decode.gemv_nk_bn8_bk512_w4_s3.m1.row_column.bfloat16.sm{arch}"
    weight = torch.randn(4096, 4096, dtype=torch.bfloat16, device="cuda")
    x = torch.randn(1, 4096, dtype=torch.bfloat16, device="cuda")
    with kabi.use(matmul=name):
        kabi.ops.matmul(x, weight.t())
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = kabi.ops.matmul(x, weight.t())
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    _assert_close(out, x, weight.t())
    # K = 4104 is no multiple of 16: the binary's image assumes one, so kabi says why it will not run it, and the
    # Python kernel of the same config (the binary's twin) serves the problem instead.
    odd = torch.randn(4096, 4104, dtype=torch.bfloat16, device="cuda")
    x_odd = torch.randn(1, 4104, dtype=torch.bfloat16, device="cuda")
    with pytest.raises(kabi.NoEligibleKernelError, match="not a multiple of 16"):
        with kabi.use(matmul=name):
            kabi.ops.matmul(x_odd, odd.t())
    with kabi.use(matmul="triton.matmul.decode.gemv_nk_bn8_bk512_w4_s3"):
        _assert_close(kabi.ops.matmul(x_odd, odd.t()), x_odd, odd.t())


def _operands_of(kernel: kabi.KernelInfo, m: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh random a and b in the kernel's dtype and in the layout variant its name gives."""
    (dtype_name,) = kernel.dtypes
    dtype = getattr(torch, dtype_name)
    if ".row_column." in kernel.name:
        return torch.randn(m, k, dtype=dtype, device="cuda"), torch.randn(n, k, dtype=dtype, device="cuda").t()
    if ".column_major." in kernel.name:
        return torch.randn(k, m, dtype=dtype, device="cuda").t(), torch.randn(n, k, dtype=dtype, device="cuda").t()
    return torch.randn(m, k, dtype=dtype, device="cuda"), torch.randn(k, n, dtype=dtype, device="cuda")


def test_every_split_k_binary_matches_the_reference_again_and_again_and_in_a_graph() -> None:
    # The tile counters must be zero when a launch starts: the core zeroes them once, and each launch leaves them
    # so; a launch that left one behind would make the next one finish that tile early (a wrong sum) or never.
    kernels = [kernel for kernel in _triton_binaries()
               if "_sk" in kernel.name.split(".")[3] and kernel.dtypes == ("bfloat16",)]
    assert len(kernels) == len([variant for variant in _native.binary_variants(_gpu().arch, dtypes=["bfloat16"])
                                if variant.config.split_k > 1])
    failures = []
    for kernel in kernels:
        m, n, k = _problem_for(kernel)
        a, b = _operands_of(kernel, m, n, k)
        where = f"{kernel.name} {m}x{n}x{k}"
        try:
            with kabi.use(matmul=kernel.name):
                first = kabi.ops.matmul(a, b)
                second = kabi.ops.matmul(a, b)
                torch.cuda.synchronize()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    replayed = kabi.ops.matmul(a, b)
            for out in (first, second):
                _assert_close(out, a, b)
            # The slices are added in split order whichever finishes last: the same bits every launch.
            if not torch.equal(first, second):
                failures.append(f"{where}: two launches gave different bits")
            for _ in range(2):
                a.copy_(torch.randn_like(a))
                graph.replay()
                torch.cuda.synchronize()
                _assert_close(replayed, a, b)
            with kabi.use(matmul=kernel.name):
                _assert_close(kabi.ops.matmul(a, b), a, b)
        except (AssertionError, kabi.KabiError) as error:
            failures.append(f"{where}: {type(error).__name__}: {error}")
    assert not failures, "\n".join(failures)
