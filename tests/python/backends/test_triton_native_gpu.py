"""Triton candidates on the native launch path, on a CUDA GPU: the first CUDA dispatch registers the Triton configs
as device binaries for this GPU, a Triton pick is launched by the core (its kind is a device binary; the Python
kernel declines the problem), the result matches the reference in eager calls and in a replayed CUDA graph, tuning
measures the binaries, a binary's Python predicate is asked once per problem, and every split-K binary (serial
split-K: its slices added in the same launch) matches the reference call after call and in replayed CUDA graphs (a
C++ program launching the cached binaries: test_cpp_app_cuda.py). linear's binaries: each one, with a bias and
without, under every activation, x of rank 1 to 3, eagerly and replayed in a CUDA graph, against the op's reference;
selection picking a binary where one covers the problem (its Python twin declining it) and declining it, with the
reason, where its image's assumptions do not hold."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from _linear_cases import tolerances  # noqa: E402

import kabi  # noqa: E402
from kabi._base.declarations import Tolerance  # noqa: E402
from kabi._selection.correctness import check_output, reference_output  # noqa: E402
from kabi.backends.triton import TILED_CONFIGS, _native  # noqa: E402
from kabi.backends.triton._families import FAMILIES  # noqa: E402
from kabi.ops import _references  # noqa: E402
from kabi.ops._references import ACTIVATIONS  # noqa: E402

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


_LINEAR_TOLERANCES = {name: Tolerance(**values) for name, values in tolerances().items()}
# N and K multiples of 16 (what the binaries declare) but of no tile, so every edge is masked.
_LINEAR_N, _LINEAR_K = 1040, 2064


def _linear_binaries() -> list[kabi.KernelInfo]:
    x = torch.empty(8, 64, dtype=torch.bfloat16, device="cuda")
    kabi.explain(kabi.ops.linear, x, torch.empty(64, 64, dtype=torch.bfloat16, device="cuda"))
    return [kernel for kernel in kabi.kernels("linear")
            if kernel.backend == "triton" and kernel.kind == "device_binary"]


def _linear_verdict(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, bias, activation: str) -> str | None:
    reference = reference_output(_references.linear, [x, w, bias, activation])
    return check_output(out, reference, _LINEAR_TOLERANCES[str(x.dtype).removeprefix("torch.")],
                        expected_dtype=x.dtype)


def _linear_x_shapes(kernel: kabi.KernelInfo) -> list[tuple]:
    """x's shapes a binary serves: rank 1 (one row) for a 16-row tile, taller tiles declining fewer rows than they
    hold; ranks 2 and 3 with rows a multiple of no tile."""
    block_m = int(kernel.name.split(".")[2].split("_")[0].removeprefix("bm"))
    return ([(_LINEAR_K,)] if block_m == 16 else []) + [(300, _LINEAR_K), (3, 100, _LINEAR_K)]


def test_every_linear_binary_matches_the_reference_with_and_without_bias_eagerly_and_in_a_graph() -> None:
    arch = _gpu().arch
    kernels = _linear_binaries()
    assert {kernel.name for kernel in kernels} == {variant.name(arch)
                                                    for variant in _native.binary_variants(arch, ["linear"])}
    failures = []
    for kernel in kernels:
        (dtype_name,) = kernel.dtypes
        dtype = getattr(torch, dtype_name)
        w = torch.randn(_LINEAR_N, _LINEAR_K, device="cuda").to(dtype)
        bias = torch.randn(_LINEAR_N, device="cuda").to(dtype)
        for x_shape in _linear_x_shapes(kernel):
            x = torch.randn(x_shape, device="cuda").to(dtype)
            for activation in ACTIVATIONS:
                for given_bias in (bias, None):
                    where = f"{kernel.name} x{list(x_shape)} {activation} bias={given_bias is not None}"
                    try:
                        with kabi.use(linear=kernel.name):
                            assert kabi.explain(kabi.ops.linear, x, w, given_bias,
                                                activation=activation).pick == kernel.name
                            out = kabi.ops.linear(x, w, given_bias, activation=activation)
                        verdict = _linear_verdict(out, x, w, given_bias, activation)
                        if verdict is not None:
                            failures.append(f"{where}: {verdict}")
                    except (AssertionError, kabi.KabiError) as error:
                        failures.append(f"{where}: {type(error).__name__}: {error}")
        # Captured once per kind of bias, then replayed on new inputs.
        x = torch.randn(300, _LINEAR_K, device="cuda").to(dtype)
        for given_bias, activation in ((bias, "gelu_tanh"), (None, "silu")):
            where = f"{kernel.name} graph {activation} bias={given_bias is not None}"
            try:
                with kabi.use(linear=kernel.name):
                    kabi.ops.linear(x, w, given_bias, activation=activation)
                    torch.cuda.synchronize()
                    graph = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(graph):
                        out = kabi.ops.linear(x, w, given_bias, activation=activation)
                for _ in range(2):
                    x.copy_(torch.randn_like(x, dtype=torch.float32).to(dtype))
                    out.fill_(float("nan"))
                    graph.replay()
                    torch.cuda.synchronize()
                    verdict = _linear_verdict(out, x, w, given_bias, activation)
                    if verdict is not None:
                        failures.append(f"{where}: {verdict}")
            except (AssertionError, kabi.KabiError) as error:
                failures.append(f"{where}: {type(error).__name__}: {error}")
    assert not failures, "\n".join(failures)


def test_selection_picks_a_linear_binary_and_declines_it_with_the_reason() -> None:
    arch = _gpu().arch
    w = torch.randn(1024, 768, device="cuda").to(torch.bfloat16)
    bias = torch.randn(1024, device="cuda").to(torch.bfloat16)
    x = torch.randn(2, 256, 768, device="cuda").to(torch.bfloat16)
    with kabi.use(linear="triton"):
        explanation = kabi.explain(kabi.ops.linear, x, w, bias, activation="gelu")
        out = kabi.ops.linear(x, w, bias, activation="gelu")
    (pick,) = [candidate for candidate in explanation.candidates if candidate.kernel.name == explanation.pick]
    assert pick.kernel.kind == "device_binary" and pick.kernel.name.endswith(f".bfloat16.sm{arch}"), str(explanation)
    # Each Python kernel whose binary serves the problem says so rather than compete with it.
    assert any("runs as its device binary" in candidate.reason for candidate in explanation.candidates)
    assert _linear_verdict(out, x, w, bias, "gelu") is None
    # Off the image's assumptions the binaries decline, saying why, and a Python kernel serves.
    declined = {
        "K off 16": ((torch.randn(300, 1000, device="cuda").to(torch.bfloat16),
                      torch.randn(1024, 1000, device="cuda").to(torch.bfloat16), bias),
                     "not a multiple of 16 as the image assumes"),
        "x not dense": ((x.transpose(0, 1), w, bias), "x is row_strided; the kernel takes {contiguous} for x"),
        "w a transposed [K, N]": ((x, torch.randn(768, 1024, device="cuda").to(torch.bfloat16).t(), None),
                                  "w is col_strided"),
        "float32": ((x.float(), w.float(), bias.float()), "float32"),
    }
    for what, ((x_other, w_other, bias_other), reason) in declined.items():
        with kabi.use(linear="triton"):
            explanation = kabi.explain(kabi.ops.linear, x_other, w_other, bias_other, activation="silu")
            out = kabi.ops.linear(x_other, w_other, bias_other, activation="silu")
        # The bfloat16 binaries: the float16 ones decline every case here for its dtype.
        binaries = [candidate for candidate in explanation.candidates if candidate.kernel.kind == "device_binary"
                    and candidate.kernel.backend == "triton" and candidate.kernel.dtypes == ("bfloat16",)]
        assert binaries and not any(candidate.eligible for candidate in binaries), what
        assert all(reason in candidate.reason for candidate in binaries), (what, [c.reason for c in binaries])
        assert explanation.pick.startswith("triton.linear.") and explanation.pick.count(".") == 2, what
        assert _linear_verdict(out, x_other, w_other, bias_other, "silu") is None, what
