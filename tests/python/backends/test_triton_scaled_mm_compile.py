"""scaled_mm's Triton FP8 kernels compiled to device binaries on a machine without a GPU: every binary of the native
set for sm_90 (the pointer kernel and the persistent TMA kernel, on FP8 wgmma: SASS ``QGMMA``) and sm_89 (the pointer
kernel on Ada's FP8 mma: ``QMMA``), one per (config, output dtype, arch), each serving both kinds of scale and a bias
or none. The manifest's parameters against the cubin's own table, every assumption the image bakes in declared
(dtypes per type variable, per-input layouts, 16-byte alignment, K, N and the pitches multiples of 16, archs, the
features the PTX uses, shared memory within the arch's); the binaries loaded by the core's reader, which refuses to
launch what the image would compute wrong, saying why, and reads a per-tensor scale's missing dimension as stride 0;
the native variant set, and the Python kernels leaving to their binaries the problems those serve. The arithmetic
runs on a GPU in test_triton_scaled_mm_native_gpu.py."""

from __future__ import annotations

import re
import shutil
from types import SimpleNamespace

import pytest

triton = pytest.importorskip("triton")

import torch  # noqa: E402
from _cubins import (CUOBJDUMP, assert_the_core_read_the_manifest, claimed_on_cuda, cubin_param_sizes,  # noqa: E402
                     loaded_by_the_core, sass)

import kabi  # noqa: E402
from kabi import ConstraintViolatedError, _core  # noqa: E402
from kabi._base.tensors import DEVICE_TYPES  # noqa: E402
from kabi.backends.triton import compile_to_binary, load_binaries, read_manifest  # noqa: E402
from kabi.backends.triton import _families, _native, _registration  # noqa: E402
from kabi.backends.triton._configs import shared_memory_limit  # noqa: E402
from kabi.backends.triton._registration import _ScaledMMSupports  # noqa: E402
from kabi.backends.triton._scaled_mm import (SCALED_MM_CONFIGS, SCALED_MM_FAMILY, SCALED_MM_TMA_CONFIGS,  # noqa: E402
                                             SCALED_MM_TMA_FAMILY)

_FAMILIES = ("scaled_mm", "scaled_mm_tma")
_OUT_DTYPES = ("bfloat16", "float16", "float32")
# The float32 accumulator elements per thread above which a tile spills registers to local memory: 128 x 256 on 8
# warps and 128 x 128 on 4 hold 128 each, and spilled before these binaries existed (the JIT builds of the source
# before them: 1974 spill instructions for the pointer kernel's 128 x 256, 55-61 and 6-8 for the persistent ones).
_ACCUMULATOR_PER_THREAD_WITHOUT_SPILLS = 64


def _variants(arch: int) -> list:
    return [variant for variant in _native.binary_variants(arch) if variant.family in _FAMILIES]


@pytest.fixture(scope="module")
def binaries(tmp_path_factory) -> dict:
    """Every scaled_mm binary of the native set for sm_90 and sm_89, compiled here: {(arch, variant): manifest}."""
    root = tmp_path_factory.mktemp("scaled-mm-binaries")
    compiled = {}
    for arch in (90, 89):
        directory = _native.compile_binaries(_variants(arch), arch, 132, root, workers=2)
        for variant in _variants(arch):
            compiled[(arch, variant)] = directory / f"{variant.name(arch)}.kabi-manifest"
    return compiled


@pytest.fixture(scope="module")
def loaded(binaries, tmp_path_factory) -> dict:
    """The binaries loaded by the core's reader from a directory of their own: {key: kernel name}."""
    yield from loaded_by_the_core(binaries, tmp_path_factory.mktemp("scaled-mm-loaded"), "scaled_mm")


def _image(manifest_path):
    return manifest_path.parent / read_manifest(manifest_path).image


def test_every_binary_of_the_native_set_compiles(binaries):
    assert all(path.is_file() for path in binaries.values())
    # sm_90: 4 pointer configs x 3 output dtypes, and 4 persistent ones x 3 less the 128 x 256 tile in float32, whose
    # operand stages and output tile overflow shared memory; sm_89: the 2 pointer configs that fit its 99 KiB, x 3.
    assert len(_variants(90)) == 12 + 11 and len(_variants(89)) == 6
    assert (_variants(90)[0].layout, {variant.layout for variant in _variants(89)}) == ("row_column", {"row_column"})


def test_manifest_describes_the_compiled_entry(binaries):
    for (arch, variant), path in binaries.items():
        config, tma = variant.config, variant.family == "scaled_mm_tma"
        manifest = read_manifest(path)
        assert manifest.op == "scaled_mm" and manifest.block == (32 * config.num_warps, 1, 1)
        assert manifest.entry == ("scaled_mm_persistent_tma_kernel" if tma else "scaled_mm_kernel")
        assert manifest.name == (f"triton.scaled_mm.{'tma.' if tma else ''}{config.tag}.row_column."
                                 f"{variant.dtype}.sm{arch}")
        # a, b, scale_a, scale_b, bias (NULL when the call has none), out; M, N, K; the pitches of a, of b (the
        # [N, K] weight's rows) and of out; the scales' strides along out's rows and columns (0 for a per-tensor
        # scale); the persistent kernel's program count; Triton's global scratch (its TMA descriptors) and profile
        # scratch.
        texts = [param.text() for param in manifest.params]
        assert texts[:14] == [
            "tensor index=0", "tensor index=1", "tensor index=2", "tensor index=3", "tensor index=4",
            "tensor index=5", "dim name=M size=4", "dim name=N size=4 divisible_by=16",
            "dim name=K size=4 divisible_by=16", "stride index=0 dim=-2 size=4 divisible_by=16",
            "stride index=1 dim=-1 size=4 divisible_by=16", "stride index=5 dim=-2 size=4 divisible_by=16",
            "stride index=2 dim=-2 size=4", "stride index=3 dim=-1 size=4"]
        tail = ["constant value=132 size=4", "scratch value=384"] if tma else ["scratch value=0"]
        assert texts[14:] == tail + ["scratch value=0"], manifest.name
        if CUOBJDUMP.exists():
            assert cubin_param_sizes(_image(path)) == [param.size_bytes for param in manifest.params]
        tiles = f"cdiv(M, {config.block_m}) * cdiv(N, {config.block_n})"
        assert manifest.grid == ((f"min(132, {tiles})" if tma else tiles), "1", "1")


def test_the_manifest_declares_what_the_image_assumes(binaries):
    for (arch, variant), path in binaries.items():
        manifest = read_manifest(path)
        family = SCALED_MM_TMA_FAMILY if variant.family == "scaled_mm_tma" else SCALED_MM_FAMILY
        # The output's dtype (O, which a given bias shares) is the binary's; a and b are e4m3.
        assert manifest.dtypes == (variant.dtype,)
        assert manifest.type_constraints == "F8A: float8_e4m3fn; F8B: float8_e4m3fn"
        # a row-major, b the transposed view of an [N, K] weight; a scale of any layout (read through its stride);
        # a given bias dense (an absent one is not filtered, and the image reads it as NULL).
        assert manifest.input_layouts == (("contiguous", "row_strided"), ("col_strided",),
                                          ("contiguous", "row_strided", "col_strided", "general"),
                                          ("contiguous", "row_strided", "col_strided", "general"), ("contiguous",))
        assert (manifest.batch_mode, manifest.alignment, manifest.format_line) == ("none", 16, "kabi-manifest 2")
        assert manifest.priority == family.priority + 1
        assert manifest.shared_memory_bytes <= shared_memory_limit(arch), manifest.name
        if arch == 90:
            assert (manifest.archs, manifest.arch_min, manifest.arch_max) == ((90,), 0, 0)
            assert manifest.features == (("tma", "wgmma") if family is SCALED_MM_TMA_FAMILY else ("wgmma",))
        else:
            assert (manifest.archs, manifest.arch_min, manifest.arch_max) == ((), 89, 89)
            assert manifest.features == ()


@pytest.mark.skipif(not CUOBJDUMP.exists(), reason="cuobjdump is not shipped with this Triton wheel")
def test_the_product_runs_on_fp8_tensor_cores(binaries):
    for (arch, variant), path in binaries.items():
        code = sass(_image(path))
        if arch == 90:
            # FP8 wgmma, e4m3 x e4m3 into float32, and nothing else multiplies.
            product = [line for line in code.splitlines() if "GMMA" in line]
            assert product and all("QGMMA" in line and ".F32.E4M3.E4M3" in line for line in product), variant
        else:
            assert "QMMA" in code and ".E4M3.E4M3" in code and "GMMA" not in code, variant
        tma_loads = "UTMALDG" in code
        assert tma_loads == (variant.family == "scaled_mm_tma"), variant
        config = variant.config
        if config.block_m * config.block_n // config.num_threads <= _ACCUMULATOR_PER_THREAD_WITHOUT_SPILLS:
            assert not re.search(r"\b(STL|LDL)\b", code), variant


def test_the_core_loads_each_binary_as_its_manifest_says(binaries, loaded):
    for key, name in loaded.items():
        manifest = read_manifest(binaries[key])
        assert manifest.batch_mode == "none"
        assert_the_core_read_the_manifest("scaled_mm", name, manifest)



def _fp8(*shape, dtype=torch.float8_e4m3fn):
    return torch.zeros(*shape, dtype=dtype)


def _launch(name, a, b, scale_a, scale_b, bias, out, out_dtype="bfloat16", shift=0):
    _core.launch("scaled_mm", name, [claimed_on_cuda(a, shift), claimed_on_cuda(b), claimed_on_cuda(scale_a),
                                       claimed_on_cuda(scale_b), claimed_on_cuda(bias)],
                 [claimed_on_cuda(out)], stream=0, attributes=(out_dtype, False))


def _problem(m=40, n=64, k=96):
    """a [M, K], b the transposed view of an [N, K] weight, row-wise scales, a bfloat16 bias and out."""
    return (_fp8(m, k), _fp8(n, k).t(), torch.ones(m, 1), torch.ones(1, n), torch.zeros(n, dtype=torch.bfloat16),
            torch.zeros(m, n, dtype=torch.bfloat16))


def test_the_core_refuses_what_the_image_would_compute_wrong_and_says_why(loaded):
    name = loaded[(90, _native.BinaryVariant("scaled_mm_tma", SCALED_MM_TMA_CONFIGS[1], "bfloat16", "row_column"))]
    a, b, scale_a, scale_b, bias, out = _problem()
    refused = {
        "K off 16": ((_fp8(40, 88), _fp8(64, 88).t(), scale_a, scale_b, bias, out), "param 8 (dim K) is 88"),
        "N off 16": ((a, _fp8(72, 96).t(), scale_a, torch.ones(1, 72), torch.zeros(72, dtype=torch.bfloat16),
                      torch.zeros(40, 72, dtype=torch.bfloat16)), "param 7 (dim N) is 72"),
        # a's rows 104 bytes apart (a view into wider rows): the 16-byte loads and TMA need a multiple of 16.
        "a pitch": ((_fp8(40, 104)[:, :96], b, scale_a, scale_b, bias, out),
                    "param 9 (stride of a, dim -2) is 104, not a multiple of 16"),
        "b pitch": ((a, _fp8(64, 104)[:, :96].t(), scale_a, scale_b, bias, out),
                    "param 10 (stride of b, dim -1) is 104, not a multiple of 16"),
        "a column-major": ((_fp8(96, 40).t(), b, scale_a, scale_b, bias, out), "a is col_strided"),
        "b row-major": ((a, _fp8(96, 64), scale_a, scale_b, bias, out), "b is contiguous"),
        "strided bias": ((a, b, scale_a, scale_b, torch.zeros(128, dtype=torch.bfloat16)[::2], out),
                         "bias is general; the kernel takes {contiguous} for bias"),
        "e5m2 operands": ((_fp8(40, 96, dtype=torch.float8_e5m2), b, scale_a, scale_b, bias, out), "float8_e5m2"),
    }
    for what, (tensors, reason) in refused.items():
        with pytest.raises(ConstraintViolatedError, match=re.escape(reason)):
            _launch(name, *tensors)
    with pytest.raises(ConstraintViolatedError, match="float16"):
        _launch(name, a, b, scale_a, scale_b, None, torch.zeros(40, 64, dtype=torch.float16), out_dtype="float16")
    with pytest.raises(ConstraintViolatedError, match="is not aligned to 16 bytes"):
        _launch(name, a, b, scale_a, scale_b, bias, out, shift=2)
    # Problems it takes go on to the driver, and stop there for want of one: per-tensor, row-wise and mixed scales
    # (a row-wise one strided too), a bias or none, M off every tile.
    if any(device.device_type == "cuda" for device in kabi.devices()):
        return
    per_tensor = torch.ones(())
    taken = [(a, b, per_tensor, per_tensor, None, out), (a, b, scale_a, per_tensor, bias, out),
             (a, b, per_tensor, scale_b, None, out), (a, b, torch.ones(40, 3)[:, :1], torch.ones(3, 64)[:1], bias, out),
             (_fp8(7, 96), b, torch.ones(7, 1), scale_b, bias, torch.zeros(7, 64, dtype=torch.bfloat16))]
    for tensors in taken:
        with pytest.raises(kabi.UnavailableError):
            _launch(name, *tensors)


def test_the_core_reads_a_per_tensor_scales_missing_dimension_as_stride_zero(binaries, tmp_path):
    """The scales' stride params read, for a [] scale, a dimension it lacks: the core gives 0 (ABI 2.6), which the
    kernel reads as "every row reads the one float". Seen on this machine through a divisibility the launch checks
    before the driver: declared on scale_a's stride, a row-wise scale's 1 is refused, a per-tensor scale's 0 is not."""
    key = (90, _native.BinaryVariant("scaled_mm", SCALED_MM_CONFIGS[3], "bfloat16", "row_column"))
    for suffix in (".cubin", ".kabi-manifest"):
        shutil.copy(binaries[key].with_name(read_manifest(binaries[key]).name + suffix), tmp_path)
    (manifest_path,) = tmp_path.glob("*.kabi-manifest")
    text = manifest_path.read_text()
    manifest_path.write_text(text.replace("param = stride index=2 dim=-2 size=4\n",
                                          "param = stride index=2 dim=-2 size=4 divisible_by=16\n")
                             .replace("name = triton.", "name = probe.triton."))
    assert load_binaries(tmp_path) == 1
    name = "probe." + read_manifest(binaries[key]).name
    try:
        a, b, scale_a, scale_b, bias, out = _problem()
        with pytest.raises(ConstraintViolatedError, match=re.escape("param 12 (stride of scale_a, dim -2) is 1,")):
            _launch(name, a, b, scale_a, scale_b, bias, out)
        if not any(device.device_type == "cuda" for device in kabi.devices()):
            with pytest.raises(kabi.UnavailableError):
                _launch(name, a, b, torch.ones(()), scale_b, bias, out)
    finally:
        kabi.unregister_kernel("scaled_mm", name)


def test_compile_to_binary_refuses_what_the_families_do_not_compile(tmp_path):
    with pytest.raises(TypeError, match="dtype must be one of float16, bfloat16, float32"):
        compile_to_binary("scaled_mm", SCALED_MM_CONFIGS[3], "float8_e4m3fn", 90, tmp_path, layout="row_column")
    with pytest.raises(ValueError, match="layout"):
        compile_to_binary("scaled_mm", SCALED_MM_CONFIGS[3], "bfloat16", 90, tmp_path)
    with pytest.raises(ValueError, match="arch: the scaled_mm_tma family needs sm_90"):
        compile_to_binary("scaled_mm_tma", SCALED_MM_TMA_CONFIGS[1], "bfloat16", 89, tmp_path, layout="row_column")
    with pytest.raises(ValueError, match="arch: the scaled_mm family needs sm_89 or later"):
        compile_to_binary("scaled_mm", SCALED_MM_CONFIGS[3], "bfloat16", 80, tmp_path, layout="row_column")
    # A tile that overflows the arch's shared memory in the output dtype gets no binary.
    with pytest.raises(ValueError, match=r"rows in \(\); got 0"):
        compile_to_binary("scaled_mm_tma", SCALED_MM_TMA_CONFIGS[0], "float32", 90, tmp_path, layout="row_column")


def test_registration_registers_the_binaries_for_an_arch_with_their_twins_rules():
    config = SCALED_MM_CONFIGS[3]
    name = f"triton.scaled_mm.{config.tag}.row_column.float32.sm89"
    # The module's loaded binaries may hold it already (registering the same binary again keeps it).
    loaded_before = any(kernel.name == name for kernel in kabi.kernels("scaled_mm"))
    registered = _native.register_native_binaries(89, 128, _registration._binary_supports, families=["scaled_mm"],
                                                  dtypes=["float32"], tags=[config.tag], workers=1)
    try:
        assert registered == {("scaled_mm", config.tag, "float32", "row_column", 0): name}
        info = kabi.kernel_info("scaled_mm", name)
        assert (info.kind, info.op, info.dtypes, info.arch_range) == ("device_binary", "scaled_mm", ("float32",),
                                                                        (89, 89))
        for family in _FAMILIES:
            assert isinstance(_registration._binary_supports(family, config, 0), _ScaledMMSupports)
    finally:
        if not loaded_before:
            kabi.unregister_kernel("scaled_mm", name)


def _scaled_mm_problem(layouts=("contiguous", "col_strided", "contiguous", "contiguous", "absent"),
                       dtype="bfloat16", operands=("float8_e4m3fn", "float8_e4m3fn"), m=512, n=1024, k=768):
    return SimpleNamespace(dims={"M": m, "N": n, "K": k}, dtype=dtype, type_bindings=(dtype, *operands),
                           layouts=layouts, device_type=DEVICE_TYPES["cuda"], device_index=0)


@pytest.mark.parametrize("tma", [False, True], ids=["pointer", "tma"])
def test_the_python_kernel_leaves_the_problems_its_binary_serves(monkeypatch, tma):
    monkeypatch.setattr(_families, "device_facts", lambda device: (90, 132))
    config = (SCALED_MM_TMA_CONFIGS if tma else SCALED_MM_CONFIGS)[1]
    name = f"triton.scaled_mm.{'tma.' if tma else ''}{config.tag}.row_column.bfloat16.sm90"
    twin = _ScaledMMSupports(config, tma, {(90, "bfloat16", "row_column", 0): name})
    # Scales of any layout and kind, a bias dense or absent.
    for scales in (("contiguous", "contiguous"), ("row_strided", "col_strided"), ("general", "contiguous")):
        for bias in ("contiguous", "absent"):
            problem = _scaled_mm_problem(("contiguous", "col_strided", *scales, bias))
            assert twin(problem) == f"runs as its device binary {name}"
            # The binary's own predicate: its twin's shape rules only.
            assert _ScaledMMSupports(config, tma)(problem) is True
    # What no binary covers stays with the Python kernel: e5m2 operands, K or N off 16 (TMA's kernel takes N = 1000
    # in bfloat16: 2000-byte rows), a strided bias, float16 (no binary registered here), another arch.
    assert twin(_scaled_mm_problem(operands=("float8_e5m2", "float8_e4m3fn"))) is True
    assert twin(_scaled_mm_problem(operands=("float8_e4m3fn", "float8_e5m2"))) is True
    assert twin(_scaled_mm_problem(n=1000)) is True
    assert twin(_scaled_mm_problem(("contiguous", "col_strided", "contiguous", "contiguous", "general"))) is True
    assert twin(_scaled_mm_problem(dtype="float16")) is True
    if not tma:
        assert twin(_scaled_mm_problem(k=776)) is True
    # The shape rules come first, for the binary's predicate and its twin's alike.
    assert "BLOCK_M" in twin(_scaled_mm_problem(m=8))
    assert "K-major" in twin(_scaled_mm_problem(("contiguous", "contiguous", "contiguous", "contiguous", "absent")))
    # On another arch the binaries of sm_90 serve nothing (a tile that fits sm_89 here).
    monkeypatch.setattr(_families, "device_facts", lambda device: (89, 128))
    small = SCALED_MM_CONFIGS[3]
    assert _ScaledMMSupports(small, False, {(90, "bfloat16", "row_column", 0): name})(_scaled_mm_problem()) is True
