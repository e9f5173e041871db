"""The Triton kernels on a CUDA GPU: every candidate through kabi against the reference (bfloat16 included), each
through the path that serves it by default (its device binary where one covers the layouts, else the Python kernel),
and binaries compiled here, loaded into the core and launched by it with no Triton launcher."""

from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

import kabi  # noqa: E402
from kabi.backends.triton import compile_to_binary, kernel_name, load_binaries, register_triton_kernels  # noqa: E402
from kabi.backends.triton._families import FAMILIES, MatmulProblem, device_facts  # noqa: E402
from kabi.backends.triton._names import binary_name  # noqa: E402

_TOLERANCES = tomllib.loads((Path(__file__).parents[3] / "registry" / "ops" / "matmul.toml").read_text())["tolerance"]
# (M, N, K, a transposed, b transposed): edges off the tiles, K not a multiple of 16 (where TMA allows), M = 1,
# decode and prefill sizes.
_CASES = [
    (1, 4096, 4096, False, False),
    (7, 1000, 2056, False, True),
    (33, 3000, 1000, True, False),
    (64, 2048, 8200, False, False),
    (300, 520, 264, False, False),
    (1000, 1000, 1000, True, True),
    (2048, 2048, 2048, False, True),
]
_DTYPES = ["float16", "bfloat16", "float32"]


def _inputs(m, n, k, a_transposed, b_transposed, dtype):
    torch_dtype = getattr(torch, dtype)
    generator = torch.Generator(device="cuda").manual_seed(m * 7919 + n * 31 + k)
    a_shape = (k, m) if a_transposed else (m, k)
    b_shape = (n, k) if b_transposed else (k, n)
    a = torch.randn(a_shape, device="cuda", generator=generator).to(torch_dtype)
    b = torch.randn(b_shape, device="cuda", generator=generator).to(torch_dtype)
    return (a.t() if a_transposed else a), (b.t() if b_transposed else b)


def _assert_close(out, a, b, dtype, where):
    reference = a.double() @ b.double()
    difference = out.double() - reference
    norm = (difference.norm() / reference.norm()).item()
    extreme = (difference.abs().max() / reference.abs().max()).item()
    tolerance = _TOLERANCES[dtype]
    assert out.dtype == a.dtype and out.shape == reference.shape, where
    assert norm <= tolerance["norm"] and extreme <= tolerance["extreme"], f"{where}: norm {norm:.2e}, " \
        f"extreme {extreme:.2e}"


def _candidates(m, n, k, a_transposed, b_transposed, dtype):
    arch, _ = device_facts(torch.device("cuda"))
    element_size = torch.empty((), dtype=getattr(torch, dtype)).element_size()
    problem = MatmulProblem(m, n, k, element_size, arch, a_transposed, b_transposed)
    for family in FAMILIES.values():
        if family.exact_archs and arch not in family.exact_archs or arch < family.arch_min:
            continue
        if getattr(torch, dtype) not in family.dtypes:
            continue
        for config in family.configs:
            if not family.unsupported_reason(config, problem):
                yield family, config


@pytest.fixture(scope="module", autouse=True)
def triton_kernels():
    register_triton_kernels()


def _serving_kernel(family, config, dtype, m, n, k, a_transposed, b_transposed):
    """The kernel that serves a (family, config) on these layouts and sizes: its device binary where one is
    registered for them and the sizes meet what it declares (the default launch path), else the Python kernel."""
    layout = {(False, False): "row_major", (True, True): "column_major", (False, True): "row_column"}.get(
        (a_transposed, b_transposed))
    arch, _ = device_facts(torch.device("cuda"))
    problem = MatmulProblem(m, n, k, torch.empty((), dtype=getattr(torch, dtype)).element_size(), arch,
                            a_transposed, b_transposed)
    if layout is not None and not family.binary_unsupported_reason(config, problem):
        name = binary_name(family.name, config.tag, layout, dtype, arch, family.rows_for(config, m))
        if any(kernel.name == name for kernel in kabi.kernels("matmul")):
            return name
    return kernel_name(family.name, config.tag)


@pytest.mark.parametrize("dtype", _DTYPES)
@pytest.mark.parametrize("case", _CASES, ids=lambda case: "{}x{}x{}{}{}".format(
    *case[:3], "-aT" if case[3] else "", "-bT" if case[4] else ""))
def test_every_candidate_matches_the_reference(case, dtype):
    a, b = _inputs(*case, dtype)
    ran = 0
    for family, config in _candidates(*case, dtype):
        name = _serving_kernel(family, config, dtype, *case)
        with kabi.use(matmul=name):
            out = kabi.ops.matmul(a, b)
        _assert_close(out, a, b, dtype, name)
        ran += 1
    assert ran > 0, "no Triton candidate for the case"


def test_backend_choice_runs_triton():
    a, b = _inputs(512, 512, 512, False, False, "bfloat16")
    with kabi.use(matmul="triton"):
        out = kabi.ops.matmul(a, b)
        record = kabi.explain(kabi.ops.matmul, a, b)
    _assert_close(out, a, b, "bfloat16", "kabi.use(matmul='triton')")
    assert "triton" in str(record)


@pytest.fixture(scope="module")
def binary_kernels(tmp_path_factory):
    """Device binaries for this GPU: one per family and layout, compiled, then loaded into the core."""
    arch, multiprocessors = device_facts(torch.device("cuda"))
    directory = tmp_path_factory.mktemp("binaries")
    specs = [("tiled", FAMILIES["tiled"].configs[1], "row_major"),
             ("tiled", FAMILIES["tiled"].configs[4], "strided"),
             ("small_m", FAMILIES["small_m"].configs[0], "row_major")]
    if arch == 90:
        specs += [("persistent_tma", FAMILIES["persistent_tma"].configs[1], "row_major"),
                  ("persistent_tma", FAMILIES["persistent_tma"].configs[1], "column_major")]
    names = []
    for family_name, config, layout in specs:
        for dtype in ("float16", "bfloat16"):
            options = {"multiprocessors": multiprocessors} if family_name == "persistent_tma" else {}
            path = compile_to_binary(family_name, config, dtype, arch, directory, layout=layout, **options)
            names.append((path.name.removesuffix(".kabi-manifest"), family_name, layout, dtype))
    # The row- and column-major ones are the binaries the default registration made already: those are kept.
    load_binaries(directory)
    return names


def test_binaries_register_as_native_kernels(binary_kernels):
    for name, _, _, dtype in binary_kernels:
        info = kabi.kernel_info("matmul", name)
        assert info.kind == "device_binary" and info.backend == "triton"
        assert info.dtypes == (dtype,)


# A binary carries its Python twin's supports predicate: 777 rows give the column-major TMA binary a pitch of 1554
# bytes, which TMA cannot take; such a problem is declined
# (and served by another kernel), never computed wrong.
@pytest.mark.parametrize("shape", [(1, 4096, 4096), (13, 1000, 2048), (776, 1024, 520), (777, 1024, 520)])
def test_binaries_launched_by_the_core_match_the_reference(binary_kernels, shape):
    m, n, k = shape
    failures, ran = [], 0
    for name, family_name, layout, dtype in binary_kernels:
        if (family_name == "small_m") != (m <= 64):
            continue
        transposed = layout == "column_major"
        a, b = _inputs(m, n, k, transposed, transposed, dtype)
        (candidate,) = [c for c in kabi.explain(kabi.ops.matmul, a, b).candidates if c.kernel.name == name]
        if candidate.reason.startswith("declined:"):
            continue
        try:
            with kabi.use(matmul=name):
                out = kabi.ops.matmul(a, b)
            _assert_close(out, a, b, dtype, name)
            ran += 1
        except Exception as error:  # gather every binary's failure, not just the first
            failures.append(f"{name}: {type(error).__name__}: {error}")
    assert not failures, "\n".join(failures)
    assert ran > 0, "every binary declined the problem"
