"""Compiling the Triton kernels to cubins on a machine without a GPU, and the manifests written beside them."""

import re
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")

from _cubins import CUOBJDUMP as _CUOBJDUMP  # noqa: E402
from _cubins import cubin_param_sizes as _cubin_param_sizes  # noqa: E402
from _cubins import sass as _sass  # noqa: E402

from kabi.backends.triton import (
    DECODE_CONFIGS,
    HOPPER_CONFIGS,
    SMALL_M_CONFIGS,
    TILED_CONFIGS,
    Manifest,
    ManifestError,
    ManifestParam,
    compile_all,
    compile_to_binary,
    read_manifest,
)
from kabi.backends.triton._families import FAMILIES  # noqa: E402
from kabi.backends.triton._manifest import ptx_entry_params  # noqa: E402
from kabi.backends.triton._manifest import fnv1a64  # noqa: E402

_GEMV_NK, _GEMV_KN, _DOT_NK, _DOT_KN = (
    next(config for config in DECODE_CONFIGS if config.tag == tag)
    for tag in ("gemv_nk_bn8_bk512_w4_s3", "gemv_kn_bn16_bk256_w4_s3", "dot_nk_bn16_bk256_w4_s5",
                "dot_kn_bn64_bk128_w4_s3"))
# (family, config, dtype, arch, layout, rows): each family on each arch it supports, each layout variant once.
_BINARIES = [
    ("tiled", TILED_CONFIGS[1], "float16", 80, "row_major", 0),
    ("tiled", TILED_CONFIGS[4], "bfloat16", 90, "column_major", 0),
    ("tiled", TILED_CONFIGS[5], "float32", 80, "strided", 0),
    ("tiled", TILED_CONFIGS[1], "bfloat16", 90, "row_column", 0),
    ("small_m", SMALL_M_CONFIGS[0], "bfloat16", 80, "row_major", 0),
    ("small_m", SMALL_M_CONFIGS[0], "float16", 90, "strided", 0),
    ("small_m", SMALL_M_CONFIGS[0], "bfloat16", 80, "row_column", 0),
    ("persistent_tma", HOPPER_CONFIGS[0], "bfloat16", 90, "row_major", 0),
    ("persistent_tma", HOPPER_CONFIGS[3], "float16", 90, "column_major", 0),
    ("persistent_tma", HOPPER_CONFIGS[1], "bfloat16", 90, "row_column", 0),
    ("decode", _GEMV_NK, "bfloat16", 90, "row_column", 1),
    ("decode", _GEMV_KN, "float16", 80, "row_major", 1),
    ("decode", _DOT_NK, "bfloat16", 90, "row_column", 32),
    ("decode", _DOT_KN, "bfloat16", 80, "row_major", 16),
]
_SPEC_IDS = [f"{spec[0]}-{spec[2]}-sm{spec[3]}-{spec[4]}" + (f"-m{spec[5]}" if spec[5] else "") for spec in _BINARIES]


@pytest.fixture(scope="module")
def binaries(tmp_path_factory) -> dict:
    directory = tmp_path_factory.mktemp("binaries")
    return {spec: compile_to_binary(spec[0], spec[1], spec[2], spec[3], directory, layout=spec[4], rows=spec[5])
            for spec in _BINARIES}


@pytest.mark.parametrize("spec", _BINARIES, ids=_SPEC_IDS)
def test_manifest_describes_the_compiled_entry(binaries, spec):
    family, config, dtype, arch, layout, rows = spec
    manifest_path = binaries[spec]
    manifest = read_manifest(manifest_path)
    cubin = manifest_path.parent / manifest.image
    assert manifest.entry.startswith("matmul_")
    assert manifest.dtypes == (dtype,) and manifest.arch == arch
    assert manifest.block == (32 * config.num_warps, 1, 1)
    assert manifest.shared_memory_bytes > 0
    assert manifest.image_fnv1a64 == fnv1a64(cubin.read_bytes())
    kinds = [param.kind for param in manifest.params]
    assert kinds[:6] == ["tensor"] * 3 + ["dim"] * 3
    # Triton 3.x appends the global and profile scratch pointers to every entry.
    assert kinds[-2:] == ["scratch", "scratch"]
    if family == "persistent_tma":
        assert manifest.params[-2].get("value") > 0, "device-side TMA descriptors need global scratch"
        assert manifest.archs == (90,) and "tma" in manifest.features
    if _CUOBJDUMP.exists():
        assert _cubin_param_sizes(cubin) == [param.size_bytes for param in manifest.params]
    if rows:
        assert manifest.grid[2] == f"cdiv(M, {rows})" and f".m{rows}." in manifest.name


# A row-major a with a column-major b (x @ w.T) and the decode family: a's classes, b's classes, and the params
# declared multiples of 16 (K, N and the pitches, as Triton's JIT specializes on them).
_ROW_MAJOR_CLASSES = ("contiguous", "row_strided")


@pytest.mark.parametrize("spec", [spec for spec in _BINARIES if spec[4] == "row_column" or spec[0] == "decode"],
                         ids=[name for spec, name in zip(_BINARIES, _SPEC_IDS)
                              if spec[4] == "row_column" or spec[0] == "decode"])
def test_per_input_layouts_and_divisibility_are_declared(binaries, spec):
    family, config, dtype, arch, layout, rows = spec
    manifest = read_manifest(binaries[spec])
    b_classes = ("col_strided",) if layout == "row_column" else _ROW_MAJOR_CLASSES
    if layout == "row_column":
        assert manifest.input_layouts == (_ROW_MAJOR_CLASSES, b_classes)
        assert manifest.format_line == "kabi-manifest 2"
    else:
        # Both inputs row-major: one list serves both, and the manifest says so with ``layouts`` alone.
        assert manifest.input_layouts == () and manifest.layouts == _ROW_MAJOR_CLASSES
    divisible = {(param.kind, param.get("name") or (param.get("index"), param.get("dim"))): param.divisible_by
                 for param in manifest.params if param.divisible_by}
    if family == "persistent_tma":
        # TMA's pitches are checked by the kernel itself (CHECK_PITCHES), which falls back to pointer loads.
        assert divisible == {}
        return
    b_pitch_dim = -1 if layout == "row_column" else -2
    assert divisible == {("dim", "N"): 16, ("dim", "K"): 16, ("stride", (0, -2)): 16, ("stride", (1, b_pitch_dim)): 16}


def test_a_row_major_binary_declares_no_divisibility(binaries):
    # Its kernel tests the pitches at run time (CHECK_ROW_PITCHES), so it serves every size.
    manifest = read_manifest(binaries[_BINARIES[0]])
    assert manifest.format_line == "kabi-manifest 1" and not any(param.divisible_by for param in manifest.params)


def test_params_match_the_ptx_entry(tmp_path):
    # The same check against the PTX text, independent of cuobjdump.
    import torch
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    family = FAMILIES["tiled"]
    config = TILED_CONFIGS[3]
    spec = family.binary_spec(config, torch.float16, "row_major")
    compiled = triton.compile(ASTSource(family.kernel, spec.signature, spec.constexprs, spec.attrs),
                              target=GPUTarget("cuda", 80, 32),
                              options={"num_warps": config.num_warps, "num_stages": config.num_stages,
                                       "enable_fp_fusion": True})
    manifest = read_manifest(compile_to_binary("tiled", config, "float16", 80, tmp_path))
    ptx_types = ptx_entry_params(compiled.asm["ptx"])
    assert len(ptx_types) == len(manifest.params)
    for param, ptx_type in zip(manifest.params, ptx_types):
        assert ptx_type.endswith(str(8 * param.size_bytes)), (param.text(), ptx_type)
    # Row-major operands fold their unit strides into the code: 3 strides remain (a, b, c leading).
    assert [param.get("dim") for param in manifest.params if param.kind == "stride"] == [-2, -2, -2]


@pytest.mark.skipif(not _CUOBJDUMP.exists(), reason="cuobjdump is not shipped with this Triton wheel")
@pytest.mark.parametrize("spec", [spec for spec in _BINARIES if spec[0] == "decode" or spec[4] == "row_column"],
                         ids=[name for spec, name in zip(_BINARIES, _SPEC_IDS)
                              if spec[0] == "decode" or spec[4] == "row_column"])
def test_declared_binaries_stream_the_weight_in_16_byte_loads(binaries, spec):
    # What the declared divisibility buys: cp.async copies of 16 bytes (LDGSTS.E.BYPASS[.LTC128B].128), as the JIT
    # emits for the same sizes; without it the loads of a binary are 2 bytes wide (LDG.E.U16). TMA reads the Hopper
    # kernel's operands.
    sass = _sass(binaries[spec].parent / read_manifest(binaries[spec]).image)
    wide = r"UTMALDG" if spec[0] == "persistent_tma" else r"LDGSTS\.E\.BYPASS(\.LTC128B)?\.128"
    assert re.search(wide, sass)
    if spec[0] != "persistent_tma":
        assert "LDG.E.U16" not in sass


@pytest.mark.skipif(not _CUOBJDUMP.exists(), reason="cuobjdump is not shipped with this Triton wheel")
def test_hopper_binaries_use_wgmma_and_tma(binaries):
    manifest_path = binaries[_BINARIES[7]]
    sass = _sass(manifest_path.parent / read_manifest(manifest_path).image)
    assert "HGMMA" in sass
    assert "UTMALDG" in sass
    ampere = binaries[_BINARIES[0]]
    ampere_sass = _sass(ampere.parent / read_manifest(ampere).image)
    assert "HMMA" in ampere_sass and "HGMMA" not in ampere_sass


def test_compile_refuses_what_it_cannot_build(tmp_path):
    with pytest.raises(ValueError, match="kernel_family"):
        compile_to_binary("nonexistent", TILED_CONFIGS[0], "float16", 90, tmp_path)
    with pytest.raises(ValueError, match="arch: the persistent_tma family needs sm_90"):
        compile_to_binary("persistent_tma", HOPPER_CONFIGS[0], "float16", 80, tmp_path)
    with pytest.raises(TypeError, match="dtype"):
        compile_to_binary("persistent_tma", HOPPER_CONFIGS[0], "float32", 90, tmp_path)
    with pytest.raises(ValueError, match="layout"):
        compile_to_binary("persistent_tma", HOPPER_CONFIGS[0], "float16", 90, tmp_path, layout="strided")
    with pytest.raises(TypeError, match="config"):
        compile_to_binary("tiled", {"block_m": 64}, "float16", 90, tmp_path)
    with pytest.raises(TypeError, match="config must be a DecodeConfig"):
        compile_to_binary("decode", TILED_CONFIGS[0], "float16", 90, tmp_path)
    with pytest.raises(ValueError, match="layout: the decode family compiles gemv_nk_bn8_bk512_w4_s3 for row_column"):
        compile_to_binary("decode", _GEMV_NK, "float16", 90, tmp_path, layout="row_major", rows=1)
    with pytest.raises(ValueError, match="rows"):
        compile_to_binary("decode", _DOT_NK, "float16", 90, tmp_path, layout="row_column", rows=8)
    with pytest.raises(ValueError, match="rows"):
        compile_to_binary("tiled", TILED_CONFIGS[0], "float16", 90, tmp_path, rows=16)
    assert not list(tmp_path.iterdir()), "a refused compile must write nothing"


def _manifest() -> Manifest:
    return Manifest(
        op="matmul", name="triton.matmul.test", backend="triton", device="cuda", priority=11,
        dtypes=("float16",), layouts=("contiguous", "row_strided"), alignment=16, batch_mode="none",
        image="triton.matmul.test.cubin", image_format="cubin", image_fnv1a64=fnv1a64(b"not really a cubin"),
        arch=90, entry="matmul_tiled_kernel", grid=("cdiv(M, 64) * cdiv(N, 64)", "1", "1"), block=(128, 1, 1),
        shared_memory_bytes=49152, cluster_size=1,
        params=(ManifestParam.tensor(0), ManifestParam.tensor(1), ManifestParam.tensor(2), ManifestParam.dim("M"),
                ManifestParam.stride(0, -2), ManifestParam.constant(132), ManifestParam.scratch(384)),
        archs=(90,), features=("tma", "wgmma"), fingerprint="triton-test:abc")


def _write(directory: Path, manifest: Manifest) -> Path:
    (directory / manifest.image).write_bytes(b"not really a cubin")
    path = directory / f"{manifest.name}.kabi-manifest"
    path.write_text(manifest.text())
    return path


def test_manifest_round_trips(tmp_path):
    manifest = _manifest()
    assert read_manifest(_write(tmp_path, manifest)) == manifest


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda text: text.replace("kabi-manifest 1", "kabi-manifest 4"), "first line"),
        (lambda text: text.replace("abi_major = 2", "abi_major = 1"),
         "abi_major: written for ABI 1, this kabi implements 2: rebuild"),
        (lambda text: text.replace("image_fnv1a64 = ", "image_fnv1a64 = 0"), "image_fnv1a64"),
        (lambda text: text.replace("entry = matmul_tiled_kernel\n", ""), "missing entry"),
        (lambda text: text.replace("op = matmul", "op = matmul\nop = matmul"), "repeats"),
        (lambda text: text.replace("param = tensor index=0", "param = texture index=0"), "unknown kind"),
        (lambda text: text.replace("param = dim name=M size=4", "param = dim name=M size=four"), "integer"),
        (lambda text: text.replace("grid = cdiv(M, 64) * cdiv(N, 64); 1; 1", "grid = 1; 1"), "grid"),
        (lambda text: text.replace("dtypes = float16", "dtypes = float17"), "dtypes"),
        (lambda text: text + "colour = blue\n", "unknown key"),
    ],
    ids=["format", "abi-major", "hash-text", "missing-key", "repeated-key", "param-kind", "param-value", "grid",
         "dtype", "unknown-key"],
)
def test_corrupt_manifest_is_refused(tmp_path, edit, message):
    path = _write(tmp_path, _manifest())
    path.write_text(edit(path.read_text()))
    with pytest.raises(ManifestError, match=message) as refusal:
        read_manifest(path)
    assert str(path) in str(refusal.value)


def test_manifest_with_a_changed_image_is_refused(tmp_path):
    manifest = _manifest()
    path = _write(tmp_path, manifest)
    (tmp_path / manifest.image).write_bytes(b"a different cubin")
    with pytest.raises(ManifestError, match="image_fnv1a64: .* does not match the image"):
        read_manifest(path)
    (tmp_path / manifest.image).unlink()
    with pytest.raises(ManifestError, match="does not exist"):
        read_manifest(path)


def test_fnv1a64_known_values():
    # Reference values of the 64-bit FNV-1a hash (offset basis for the empty input).
    assert fnv1a64(b"") == "cbf29ce484222325"
    assert fnv1a64(b"a") == "af63dc4c8601ec8c"
    assert fnv1a64(b"foobar") == "85944171f73967e8"


def test_core_registers_compiled_binaries_as_written(binaries, tmp_path):
    import kabi
    from kabi.backends.triton import load_binaries

    spec = _BINARIES[7]
    manifest = read_manifest(binaries[spec])
    directory = tmp_path / "one"
    directory.mkdir()
    for suffix in (".cubin", ".kabi-manifest"):
        source = binaries[spec].parent / f"{manifest.name}{suffix}"
        (directory / source.name).write_bytes(source.read_bytes())
    assert load_binaries(directory) == 1
    info = kabi.kernel_info("matmul", manifest.name)
    assert info.kind == "device_binary" and info.backend == "triton" and info.device == "cuda"
    assert info.archs == manifest.archs and info.features == manifest.features
    assert info.dtypes == manifest.dtypes and info.layouts == manifest.layouts
    assert (info.alignment, info.priority, info.batch_mode) == (manifest.alignment, manifest.priority, "none")
    assert info.fingerprint == manifest.fingerprint


def test_core_refuses_a_corrupt_binary_at_its_first_launch(binaries, tmp_path):
    import torch

    import kabi
    from _made_up_launch import launch_matmul_at_made_up_addresses
    from kabi.backends.triton import load_binaries

    manifest = read_manifest(binaries[_BINARIES[0]])
    for suffix in (".cubin", ".kabi-manifest"):
        source = binaries[_BINARIES[0]].parent / f"{manifest.name}{suffix}"
        (tmp_path / source.name).write_bytes(source.read_bytes())
    cubin = tmp_path / manifest.image
    image = bytearray(cubin.read_bytes())
    image[len(image) // 2] ^= 0xFF
    cubin.write_bytes(bytes(image))
    assert load_binaries(tmp_path) == 1  # registering reads the manifest, not the image
    try:
        with pytest.raises(kabi.InvalidArgumentError, match=f"image_fnv1a64: image {manifest.image} hashes to"):
            launch_matmul_at_made_up_addresses(manifest.name, torch.float16)
    finally:
        kabi.unregister_kernel("matmul", manifest.name)
    with pytest.raises(ValueError, match="directory"):
        load_binaries(tmp_path / "absent")


def test_compile_all_builds_every_config_split_k_included(tmp_path):
    import kabi

    paths = compile_all(80, tmp_path, dtypes=["bfloat16"], families=["small_m", "persistent_tma"])
    # sm_80 rules out the Hopper family; split-K configs add their slices in the same launch, so they compile too.
    expected = [config.tag for config in SMALL_M_CONFIGS]
    assert sorted(read_manifest(path).name.split(".")[3] for path in paths) == sorted(expected)
    assert kabi.load_binaries(tmp_path) == len(paths)
    with pytest.raises(TypeError, match="dtype must be one of"):
        compile_all(80, tmp_path, dtypes=["float8"])
