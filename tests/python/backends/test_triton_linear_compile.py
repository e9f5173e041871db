"""The fused linear kernel compiled to device binaries on a machine without a GPU: one image per (config, dtype,
arch) serving every activation and both a bias and none. The manifest's parameters against the cubin's own table
(the bias a tensor param, the activation the op's attribute, K, N and the pitches declared multiples of 16), every
assumption the image bakes in declared (per-input layouts, x's leading dimensions flattening, 16-byte alignment,
archs, the features the PTX uses); tensor cores fed by 16-byte copies, no spills, every activation's code in the
image; the binaries loaded by the core's reader (kernel info equal to the manifest, the attribute param bound to the
op's schema), which refuses to launch the problems the image would compute wrong, saying why, and takes x of any rank,
a bias or none and every activation; the binary variants the native registration compiles and registers, and the
Python kernel leaving to its binary the problems that binary serves. The image's arithmetic runs in
test_triton_linear_interpreter.py (launched as the core launches it) and on a GPU in test_triton_native_gpu.py."""

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
from kabi.backends.triton import compile_all, compile_to_binary, load_binaries, read_manifest  # noqa: E402
from kabi.backends.triton import _compile, _families, _native, _registration  # noqa: E402
from kabi.backends.triton._linear import LINEAR_CONFIGS, LINEAR_FAMILY  # noqa: E402
from kabi.backends.triton._registration import _LinearSupports  # noqa: E402
from kabi.ops._references import ACTIVATIONS  # noqa: E402

_PREFILL = LINEAR_CONFIGS[0]
_MID = LINEAR_CONFIGS[1]
_DECODE = next(config for config in LINEAR_CONFIGS if config.block_m == 16)
# (config, dtype, arch): a wgmma tile on sm_90a, the 16-row decode tile there (below wgmma's 64 rows: mma.sync), and
# sm_80.
_BINARIES = [(_PREFILL, "bfloat16", 90), (_DECODE, "float16", 90), (_MID, "float16", 80)]
_IDS = [f"{config.tag}-{dtype}-sm{arch}" for config, dtype, arch in _BINARIES]


@pytest.fixture(scope="module")
def binaries(tmp_path_factory) -> dict:
    directory = tmp_path_factory.mktemp("linear-binaries")
    return {spec: compile_to_binary("linear", spec[0], spec[1], spec[2], directory) for spec in _BINARIES}


@pytest.fixture(scope="module")
def loaded(binaries, tmp_path_factory) -> dict:
    """The binaries loaded by the core's reader from a directory of their own: {key: kernel name}."""
    yield from loaded_by_the_core(binaries, tmp_path_factory.mktemp("linear-loaded"), "linear")


def _image(binaries, spec):
    return binaries[spec].parent / read_manifest(binaries[spec]).image


@pytest.mark.parametrize("spec", _BINARIES, ids=_IDS)
def test_manifest_describes_the_compiled_entry(binaries, spec):
    config, dtype, arch = spec
    manifest = read_manifest(binaries[spec])
    assert manifest.op == "linear" and manifest.entry == "linear_kernel"
    assert manifest.name == f"triton.linear.{config.tag}.row_major.{dtype}.sm{arch}"
    assert manifest.dtypes == (dtype,) and manifest.block == (32 * config.num_warps, 1, 1)
    # x, w, bias (NULL when the call has none), out; the rows (x's leading dimensions flattened), N, K; x's and
    # out's row strides, which are K and N for dense tensors of any rank; w's pitch; the activation's enum index.
    assert [param.text() for param in manifest.params] == [
        "tensor index=0", "tensor index=1", "tensor index=2", "tensor index=3", "dim name=batch size=4",
        "dim name=N size=4 divisible_by=16", "dim name=K size=4 divisible_by=16", "dim name=K size=4 divisible_by=16",
        "stride index=1 dim=-2 size=4 divisible_by=16", "dim name=N size=4 divisible_by=16",
        "attribute index=0 size=4", "scratch value=0", "scratch value=0"]
    if CUOBJDUMP.exists():
        assert cubin_param_sizes(_image(binaries, spec)) == [param.size_bytes for param in manifest.params]
    assert manifest.grid == (f"cdiv(batch, {config.block_m}) * cdiv(N, {config.block_n})", "1", "1")


@pytest.mark.parametrize("spec", _BINARIES, ids=_IDS)
def test_the_manifest_declares_what_the_image_assumes(binaries, spec):
    config, _, arch = spec
    manifest = read_manifest(binaries[spec])
    # x dense (its row stride is K whatever its rank), w row-major (the nn.Linear weight, rows a pitch apart), bias
    # dense; an absent bias is not filtered, and the image reads it as NULL.
    assert manifest.input_layouts == (("contiguous",), ("contiguous", "row_strided"), ("contiguous",))
    assert manifest.batch_mode == "uniform" and manifest.alignment == 16
    assert manifest.format_line == "kabi-manifest 2" and manifest.priority == LINEAR_FAMILY.priority + 1
    if arch == 90:
        assert (manifest.archs, manifest.arch_min, manifest.arch_max) == ((90,), 0, 0)
        assert manifest.features == (("wgmma",) if config.block_m >= 64 else ())
    else:
        assert (manifest.archs, manifest.arch_min, manifest.arch_max) == ((), 80, 89)
        assert manifest.features == ()


@pytest.mark.skipif(not CUOBJDUMP.exists(), reason="cuobjdump is not shipped with this Triton wheel")
def test_tensor_cores_fed_by_16_byte_copies_no_spills_and_every_activation_in_the_image(binaries):
    codes = {spec: sass(_image(binaries, spec)) for spec in _BINARIES}
    assert "HGMMA" in codes[_BINARIES[0]]
    for spec in _BINARIES[1:]:
        assert "HMMA" in codes[spec] and "HGMMA" not in codes[spec], spec
    # What the declared divisibility buys: 16-byte cp.async copies of x and w.
    assert "LDGSTS.E.BYPASS.LTC128B.128" in codes[_BINARIES[2]]
    for spec, code in codes.items():
        assert re.search(r"LDGSTS\S*\.128", code), spec
        # No register spills to local memory.
        assert not re.search(r"\b(STL|LDL)\b", code), spec
        # The activation is chosen at run time, so silu's and gelu_tanh's exp is in every image.
        assert "MUFU.EX2" in code, spec


def test_the_core_loads_each_binary_as_its_manifest_says(binaries, loaded):
    for spec, name in loaded.items():
        manifest = read_manifest(binaries[spec])
        assert manifest.batch_mode == "uniform"
        assert_the_core_read_the_manifest("linear", name, manifest)


def test_the_core_reader_binds_the_activation_param_to_the_ops_attribute(binaries, tmp_path):
    spec = _BINARIES[2]
    for suffix in (".cubin", ".kabi-manifest"):
        shutil.copy(binaries[spec].with_name(read_manifest(binaries[spec]).name + suffix), tmp_path)
    (manifest_path,) = tmp_path.glob("*.kabi-manifest")
    # linear has one attribute (activation): a param reading a second one is refused when the manifest is read.
    manifest_path.write_text(manifest_path.read_text().replace("attribute index=0", "attribute index=1"))
    with pytest.raises(kabi.KabiError, match=r"param index: 1 is outside \[0, 0\]"):
        load_binaries(tmp_path)



def _zeros(*shape):
    return torch.zeros(*shape, dtype=torch.bfloat16)


def _launch(name, x, w, bias, out, activation="gelu", shift=0):
    _core.launch("linear", name, [claimed_on_cuda(x, shift), claimed_on_cuda(w), claimed_on_cuda(bias)],
                 [claimed_on_cuda(out)], stream=0,
                 attributes=(activation,))


def test_the_core_refuses_what_the_image_would_compute_wrong_and_says_why(loaded):
    name = loaded[_BINARIES[0]]
    x, w, bias, out = _zeros(40, 96), _zeros(64, 96), _zeros(64), _zeros(40, 64)
    refused = {
        "K off 16": ((_zeros(40, 88), _zeros(64, 88), bias, out), 0, "param 6 (dim K) is 88, not a multiple of 16"),
        "N off 16": ((x, _zeros(72, 96), _zeros(72), _zeros(40, 72)), 0, "param 5 (dim N) is 72, not a multiple of 16"),
        # w's rows 104 elements apart (a view into wider rows): the 16-byte loads need a multiple of 16.
        "w pitch": ((x, _zeros(64, 104)[:, :96], bias, out), 0,
                    "param 8 (stride of w, dim -2) is 104, not a multiple of 16"),
        "row-strided x": ((_zeros(40, 112)[:, :96], w, bias, out), 0,
                          "x is row_strided; the kernel takes {contiguous} for x"),
        # Leading dimensions that nest but not as a dense array's: their rows are not K apart.
        "transposed batch of x": ((_zeros(2, 3, 96).transpose(0, 1), w, bias, _zeros(3, 2, 64)), 0,
                                  "x is row_strided; the kernel takes {contiguous} for x"),
        "w a transposed [K, N]": ((x, _zeros(96, 64).t(), bias, out), 0,
                                  "w is col_strided; the kernel takes {contiguous, row_strided} for w"),
        "strided bias": ((x, w, _zeros(128)[::2], out), 0, "bias is general; the kernel takes {contiguous} for bias"),
        "misaligned x": ((x, w, bias, out), 2, "is not aligned to 16 bytes"),
    }
    for what, (tensors, shift, reason) in refused.items():
        with pytest.raises(ConstraintViolatedError, match=re.escape(reason)):
            _launch(name, *tensors, shift=shift)
    # Problems it takes go on to the driver, and stop there for want of one: x of rank 1 to 4 (a size-1 dimension
    # among its leading ones too), a bias or none, every activation.
    if any(device.device_type == "cuda" for device in kabi.devices()):
        return
    taken = [(_zeros(96), w, None, _zeros(64)), (x, w, None, out), (x, _zeros(64, 112)[:, :96], bias, out),
             (_zeros(2, 3, 96), w, bias, _zeros(2, 3, 64)), (_zeros(2, 1, 5, 96), w, None, _zeros(2, 1, 5, 64))]
    for tensors in taken:
        for activation in ACTIVATIONS:
            with pytest.raises(kabi.UnavailableError):
                _launch(name, *tensors, activation=activation)


def test_the_native_set_holds_every_config_once_per_dtype():
    for arch in (80, 90):
        linear = [(variant.config, variant.dtype, variant.layout, variant.rows)
                  for variant in _native.binary_variants(arch) if variant.family == "linear"]
        # No variant per activation or per bias: the image reads both at run time.
        assert sorted(linear, key=str) == sorted(((config, dtype, "row_major", 0) for config in LINEAR_CONFIGS
                                                  for dtype in ("float16", "bfloat16")), key=str)
    name = _native.BinaryVariant("linear", _DECODE, "bfloat16", "row_major").name(90)
    assert name == f"triton.linear.{_DECODE.tag}.row_major.bfloat16.sm90"


def test_compile_all_takes_the_linear_family(tmp_path, monkeypatch):
    compiled = []
    # What compile_all asks for, without compiling it.
    monkeypatch.setattr(_compile, "compile_to_binary", lambda family, config, dtype, arch, out_dir, **options:
                        compiled.append((family.name, config, dtype, arch, options["layout"])))
    compile_all(80, tmp_path, dtypes=["float16", "float32"], layouts=["row_major", "row_column"], families=["linear"])
    assert compiled == [("linear", config, torch.float16, 80, "row_major") for config in LINEAR_CONFIGS]
    monkeypatch.undo()
    with pytest.raises(TypeError, match="dtype: the linear family compiles for float16, bfloat16"):
        compile_to_binary("linear", _PREFILL, "float32", 90, tmp_path)
    with pytest.raises(ValueError, match="layout"):
        compile_to_binary("linear", _PREFILL, "float16", 90, tmp_path, layout="row_column")


def test_registration_registers_the_binaries_for_an_arch_with_their_twins_rules():
    registered = _native.register_native_binaries(80, 108, _registration._binary_supports, families=["linear"],
                                                  dtypes=["float16"], tags=[_DECODE.tag], workers=1)
    name = f"triton.linear.{_DECODE.tag}.row_major.float16.sm80"
    try:
        assert registered == {("linear", _DECODE.tag, "float16", "row_major", 0): name}
        info = kabi.kernel_info("linear", name)
        assert (info.kind, info.op, info.dtypes, info.arch_range) == ("device_binary", "linear", ("float16",),
                                                                        (80, 89))
        assert isinstance(_registration._binary_supports("linear", _DECODE, 0), _LinearSupports)
    finally:
        kabi.unregister_kernel("linear", name)


def _linear_problem(layouts, dtype="bfloat16", rows=512, n=1024, k=768):
    return SimpleNamespace(dims={"N": n, "K": k}, batch_size=rows, dtype=dtype, layouts=layouts, device_type=2,
                           device_index=0)


def test_the_python_kernel_leaves_the_problems_its_binary_serves(monkeypatch):
    monkeypatch.setattr(_families, "device_facts", lambda device: (90, 132))
    name = f"triton.linear.{_MID.tag}.row_major.bfloat16.sm90"
    twin = _LinearSupports(_MID, {(90, "bfloat16", "row_major", 0): name})
    for layouts in (("contiguous", "contiguous", "contiguous"), ("contiguous", "contiguous", "absent"),
                    ("contiguous", "row_strided", "absent")):
        assert twin(_linear_problem(layouts)) == f"runs as its device binary {name}"
    dense = ("contiguous", "contiguous", "contiguous")
    # What no binary covers stays with the Python kernel: K or N off 16, x not dense, w a transposed view, a strided
    # bias, float16 (no binary registered here), another arch.
    assert twin(_linear_problem(dense, k=776)) is True
    assert twin(_linear_problem(dense, n=1000)) is True
    assert twin(_linear_problem(("row_strided", "contiguous", "contiguous"))) is True
    assert twin(_linear_problem(("contiguous", "col_strided", "absent"))) is True
    assert twin(_linear_problem(("contiguous", "contiguous", "general"))) is True
    assert twin(_linear_problem(dense, dtype="float16")) is True
    # The shape rules come first, for the binary's predicate and its twin's alike.
    assert "BLOCK_M" in twin(_linear_problem(dense, rows=8))
    assert "BLOCK_M" in _LinearSupports(_MID)(_linear_problem(dense, rows=8))
    monkeypatch.setattr(_families, "device_facts", lambda device: (80, 108))
    assert twin(_linear_problem(dense)) is True
