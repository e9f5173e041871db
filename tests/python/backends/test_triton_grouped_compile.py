"""The persistent grouped GEMM of grouped_mm compiled to device binaries on a machine without a GPU: the manifest's
parameters against the PTX entry and the cubin's own parameter table, every assumption the image bakes in declared
(per-input layouts, 16-byte alignment, K, N, pitches and group strides multiples of 16, archs, the features the PTX
uses), TMA into wgmma on sm_90a (UTMALDG, HGMMA) and 16-byte cp.async into mma.sync on sm_80, each tail config
(``tail_m``) and short-last-tile config (``short_m``) on both archs where it fits their shared memory (a short tile's
in that of the config without it, and on sm_90 without more spills); the binaries loaded by
the core (kernel info equal to the manifest), which refuses to launch the problems the image would compute wrong,
saying why, and takes the others in both forms (2-D with offsets, 3-D with offs absent); the binary variants the
native registration compiles, and the Python kernel leaving to its binary the problems that binary serves."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from types import SimpleNamespace

import pytest

triton = pytest.importorskip("triton")

import torch  # noqa: E402
from _cubins import (CUOBJDUMP, assert_the_core_read_the_manifest, claimed_on_cuda, cubin_param_sizes,  # noqa: E402
                     loaded_by_the_core, sass)

import kabi  # noqa: E402
from kabi import ConstraintViolatedError, _core  # noqa: E402
from kabi.backends.triton import compile_all, compile_to_binary, read_manifest  # noqa: E402
from kabi.backends.triton import _compile, _families, _native  # noqa: E402
from kabi.backends.triton._configs import shared_memory_limit  # noqa: E402
from kabi.backends.triton._grouped import GROUPED_CONFIGS, GROUPED_FAMILY, grouped_unsupported_reason  # noqa: E402
from kabi.backends.triton._manifest import ptx_entry_params  # noqa: E402
from kabi.backends.triton._registration import _GroupedSupports  # noqa: E402

_TAILS = [config for config in GROUPED_CONFIGS if config.tail_m]
_LAST_TILES = [config for config in GROUPED_CONFIGS if config.tail_m or config.short_m]
_PREFILL = _TAILS[0]
_MID = next(config for config in GROUPED_CONFIGS if config.block_m == 64)
_DECODE = next(config for config in GROUPED_CONFIGS if config.block_m == 16)
# (config, dtype, arch, layout): both weight layouts, both archs, a wgmma tile with a tail and the 16-row tile (TMA
# without wgmma: 16 rows are below wgmma's 64).
_BINARIES = [
    (_PREFILL, "bfloat16", 90, "row_column"),
    (_DECODE, "float16", 90, "row_major"),
    (_MID, "bfloat16", 80, "row_column"),
]
_IDS = [f"{config.tag}-{dtype}-sm{arch}-{layout}" for config, dtype, arch, layout in _BINARIES]
_ROW_MAJOR = ("contiguous", "row_strided")
_ELEMENT_CODES = {"float16": (2, 16), "bfloat16": (4, 16)}


@pytest.fixture(scope="module")
def binaries(tmp_path_factory) -> dict:
    directory = tmp_path_factory.mktemp("grouped-binaries")
    return {spec: compile_to_binary("grouped", spec[0], spec[1], spec[2], directory, layout=spec[3])
            for spec in _BINARIES}


@pytest.fixture(scope="module")
def loaded(binaries, tmp_path_factory) -> dict:
    """The binaries loaded by the core's reader from a directory of their own: {key: kernel name}."""
    yield from loaded_by_the_core(binaries, tmp_path_factory.mktemp("grouped-loaded"), "grouped_mm")


@pytest.mark.parametrize("spec", _BINARIES, ids=_IDS)
def test_manifest_describes_the_compiled_entry(binaries, spec):
    config, dtype, arch, layout = spec
    manifest = read_manifest(binaries[spec])
    assert manifest.op == "grouped_mm" and manifest.entry == "grouped_mm_kernel"
    assert manifest.name == f"triton.grouped_mm.{config.tag}.{layout}.{dtype}.sm{arch}"
    assert manifest.dtypes == (dtype,) and manifest.block == (32 * config.num_warps, 1, 1)
    texts = [param.text() for param in manifest.params]
    pitch_dim = -1 if layout == "row_column" else -2
    assert texts[:15] == [
        "tensor index=0", "tensor index=1", "tensor index=2", "tensor index=3",
        "dim name=E size=4", "dim name=R size=4", "dim name=N size=4 divisible_by=16", "dim name=K size=4 divisible_by=16",
        "stride index=0 dim=-3 size=8 divisible_by=16", "stride index=0 dim=-2 size=4 divisible_by=16",
        "stride index=1 dim=-3 size=8 divisible_by=16", f"stride index=1 dim={pitch_dim} size=4 divisible_by=16",
        "stride index=3 dim=-3 size=8 divisible_by=16", "stride index=3 dim=-2 size=4 divisible_by=16",
        "constant value=132 size=4"]
    # Triton's global scratch holds the device-side TMA descriptors (x and w) on sm_90; then profile scratch.
    assert [param.kind for param in manifest.params[15:]] == ["scratch", "scratch"]
    assert (manifest.params[15].get("value") > 0) == (arch == 90)
    if CUOBJDUMP.exists():
        assert cubin_param_sizes(binaries[spec].parent / manifest.image) == [param.size_bytes
                                                                            for param in manifest.params]
    # One grid for both forms: min(SMs, the larger form's item count), the count launch_grouped_mm computes.
    row_tiles = f"max(cdiv(R, {config.block_m}) + E, E * cdiv(R, {config.block_m}))"
    assert manifest.grid == (f"min(132, {row_tiles} * cdiv(N, {config.block_n}))", "1", "1")


def test_params_match_the_ptx_entry():
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    config, dtype, arch, layout = _BINARIES[2]
    spec = GROUPED_FAMILY.binary_spec(config, torch.bfloat16, layout,
                                      **GROUPED_FAMILY.binary_options(arch, 132, 0))
    compiled = triton.compile(ASTSource(GROUPED_FAMILY.kernel, spec.signature, spec.constexprs, spec.attrs),
                              target=GPUTarget("cuda", arch, 32),
                              options={"num_warps": config.num_warps, "num_stages": config.num_stages,
                                       "enable_fp_fusion": True})
    ptx_types = ptx_entry_params(compiled.asm["ptx"])
    # The kernel's own parameters, then Triton's two scratch pointers.
    assert len(ptx_types) == len(spec.params) + 2
    for param, ptx_type in zip(spec.params, ptx_types):
        assert ptx_type.endswith(str(8 * param.size_bytes)), (param.text(), ptx_type)


@pytest.mark.parametrize("spec", _BINARIES, ids=_IDS)
def test_the_manifest_declares_what_the_image_assumes(binaries, spec):
    config, dtype, arch, layout = spec
    manifest = read_manifest(binaries[spec])
    # x row-major, w as the layout reads it (its unit stride folded into the code), offs dense (it is read one
    # element after another); an absent offs is the 3-D form, which the same image serves.
    w_classes = ("col_strided",) if layout == "row_column" else _ROW_MAJOR
    assert manifest.input_layouts == (_ROW_MAJOR, w_classes, ("contiguous",))
    assert manifest.format_line == "kabi-manifest 2" and manifest.alignment == 16
    assert manifest.batch_mode == "none" and manifest.priority == GROUPED_FAMILY.priority + 1
    if arch == 90:
        assert (manifest.archs, manifest.arch_min, manifest.arch_max) == ((90,), 0, 0)
        assert manifest.features == (("tma", "wgmma") if config.block_m >= 64 else ("tma",))
    else:
        assert (manifest.archs, manifest.arch_min, manifest.arch_max) == ((), 80, 89)
        assert manifest.features == ()


@pytest.mark.skipif(not CUOBJDUMP.exists(), reason="cuobjdump is not shipped with this Triton wheel")
def test_sm90_reads_through_tma_into_wgmma_and_sm80_in_16_byte_copies(binaries):
    def sass_of(spec):
        return sass(binaries[spec].parent / read_manifest(binaries[spec]).image)

    hopper = sass_of(_BINARIES[0])
    assert "HGMMA" in hopper and "UTMALDG" in hopper
    decode_tile = sass_of(_BINARIES[1])
    assert "UTMALDG" in decode_tile and "HMMA" in decode_tile and "HGMMA" not in decode_tile
    ampere = sass_of(_BINARIES[2])
    # What the declared divisibility buys: 16-byte cp.async copies, and no 2-byte loads.
    assert "HMMA" in ampere and "HGMMA" not in ampere and "UTMALDG" not in ampere
    assert "LDGSTS.E.BYPASS.LTC128B.128" in ampere and "LDG.E.U16" not in ampere


def _stack_bytes(manifest_path) -> int:
    """The stack frame of a binary's kernel (its register spills), as cuobjdump reports its resource usage."""
    image = manifest_path.parent / read_manifest(manifest_path).image
    usage = subprocess.run([str(CUOBJDUMP), "--dump-resource-usage", str(image)], capture_output=True, text=True,
                           check=True).stdout
    return int(re.search(r"STACK:(\d+)", usage).group(1))


@pytest.mark.parametrize("arch", [90, 80])
@pytest.mark.parametrize("config", _LAST_TILES, ids=[config.tag for config in _LAST_TILES])
def test_each_last_tile_config_compiles_for_its_archs(config, arch, tmp_path):
    """A last row tile absorbing ``tail_m`` rows (its swapped product: the weight tile as the MMA's M side), or run as
    a ``short_m``-row tile (its own accumulator, TMA descriptor and buffers, which share the full tile's shared
    memory), reads both operands through TMA into wgmma on sm_90 and through 16-byte cp.async into mma.sync on sm_80,
    in the shared memory the arch allows; where the config's buffers overflow it, the family ships no binary, as its
    supports predicate would decline every problem there."""
    if not GROUPED_FAMILY.binary_rows(config, torch.bfloat16, arch):
        assert "shared memory" in grouped_unsupported_reason(config, 4096, 4096, 4096, 2, arch)
        assert not [variant for variant in _native.binary_variants(arch, ["grouped"]) if variant.config == config]
        return
    manifest_path = compile_to_binary("grouped", config, "bfloat16", arch, tmp_path, layout="row_column")
    manifest = read_manifest(manifest_path)
    assert manifest.name == f"triton.grouped_mm.{config.tag}.row_column.bfloat16.sm{arch}"
    suffix = f"_t{config.tail_m}" if config.tail_m else f"_short{config.short_m}"
    assert manifest.name.split(".")[2].endswith(suffix)
    assert manifest.shared_memory_bytes <= shared_memory_limit(arch)
    if config.short_m:
        full_tile_path = compile_to_binary("grouped", dataclasses.replace(config, short_m=0), "bfloat16", arch,
                                           tmp_path, layout="row_column")
        assert manifest.shared_memory_bytes == read_manifest(full_tile_path).shared_memory_bytes
        if arch == 90 and CUOBJDUMP.exists():
            assert _stack_bytes(manifest_path) <= _stack_bytes(full_tile_path)
    if CUOBJDUMP.exists():
        listing = sass(manifest_path.parent / manifest.image)
        if arch == 90:
            assert "HGMMA" in listing and "UTMALDG" in listing
            # wgmma takes 64 rows per warpgroup: a shorter last tile runs mma.sync, every other tile wgmma.
            assert ("HMMA" in listing) == (0 < config.short_m < 64)
        else:
            # 16-byte cp.async copies (without the L2 prefetch hint of the tile without a tail).
            assert "HMMA" in listing and "HGMMA" not in listing and "LDG.E.U16" not in listing
            assert re.search(r"LDGSTS\.E\.BYPASS(\.LTC128B)?\.128", listing)


def test_the_core_loads_each_binary_as_its_manifest_says(binaries, loaded):
    for spec, name in loaded.items():
        manifest = read_manifest(binaries[spec])
        assert manifest.batch_mode == "none"
        assert_the_core_read_the_manifest("grouped_mm", name, manifest)



def _problem(dtype: torch.dtype, linear_weight: bool, *, groups=4, rows=40, n=64, k=96, form="2d"):
    """x, w, offs (None in the 3-D form) and out, dense."""
    w = torch.zeros(groups, n, k, dtype=dtype).mT if linear_weight else torch.zeros(groups, k, n, dtype=dtype)
    if form == "3d":
        return torch.zeros(groups, rows, k, dtype=dtype), w, None, torch.zeros(groups, rows, n, dtype=dtype)
    offs = torch.tensor([5, 5, 30, 33][:groups], dtype=torch.int32)
    return torch.zeros(rows, k, dtype=dtype), w, offs, torch.zeros(rows, n, dtype=dtype)


def _launch(name: str, x, w, offs, out, shift: int = 0) -> None:
    _core.launch("grouped_mm", name, [claimed_on_cuda(x, shift), claimed_on_cuda(w), claimed_on_cuda(offs)],
                 [claimed_on_cuda(out)], stream=0)


def test_the_core_refuses_what_the_image_would_compute_wrong_and_says_why(loaded):
    name = loaded[_BINARIES[0]]
    dtype = torch.bfloat16
    refused = {
        "K off 16": (_problem(dtype, True, k=88), 0, "param 7 (dim K) is 88, not a multiple of 16"),
        "N off 16": (_problem(dtype, True, n=72), 0, "param 6 (dim N) is 72, not a multiple of 16"),
        "row-major w": (_problem(dtype, False), 0, "w is contiguous; the kernel takes {col_strided} for w"),
        "misaligned x": (_problem(dtype, True), 2, "is not aligned to 16 bytes"),
    }
    x, w, offs, out = _problem(dtype, True)
    # x's rows 104 elements apart (a view into wider rows): TMA and 16-byte loads need a multiple of 16.
    refused["x pitch"] = ((torch.zeros(40, 104, dtype=dtype)[:, :96], w, offs, out), 0,
                          "param 9 (stride of x, dim -2) is 104, not a multiple of 16")
    # Every other offset (a strided view): the kernel reads them one element after another.
    refused["strided offs"] = ((x, w, torch.tensor([5, 0, 5, 0, 30, 0, 33, 0], dtype=torch.int32)[::2], out), 0,
                               "offs is general; the kernel takes {contiguous} for offs")
    x3, w3, _, out3 = _problem(dtype, True, form="3d")
    # Groups of x 3848 elements apart: a pitch TMA cannot take.
    group_stride = 40 * 96 + 8
    spaced = torch.zeros(4 * group_stride, dtype=dtype).as_strided(x3.shape, (group_stride, 96, 1))
    refused["x group stride"] = ((spaced, w3, None, out3), 0,
                                 "param 8 (stride of x, dim -3) is 3848, not a multiple of 16")
    for what, (tensors, shift, reason) in refused.items():
        with pytest.raises(ConstraintViolatedError, match=re.escape(reason)):
            _launch(name, *tensors, shift=shift)
    # Problems it takes, in both forms, E = 1 and a broadcast weight included, go on to the driver, and stop there
    # for want of one (with a GPU they would launch on host memory: test_triton_grouped_gpu.py runs them for real).
    if any(device.device_type == "cuda" for device in kabi.devices()):
        return
    x1, w1, offs1, out1 = _problem(dtype, True, groups=1)
    broadcast = torch.zeros(1, 64, 96, dtype=dtype).expand(4, 64, 96).mT
    for what, tensors in {"2-D": (x, w, offs, out), "3-D": (x3, w3, None, out3), "E=1": (x1, w1, offs1, out1),
                          "broadcast w": (x3, broadcast, None, out3)}.items():
        with pytest.raises(kabi.UnavailableError):
            _launch(name, *tensors)


def test_the_native_set_holds_every_config_that_fits_in_both_weight_layouts():
    # Every config on sm_90; on sm_80 (163 KiB) not the 4-stage 128x256 tiles nor the 16x256x128 decode tile, and on
    # sm_89 (99 KiB) only the two whose buffers fit: a binary of another would decline every problem there
    # (grouped_unsupported_reason).
    fitting_sm89 = {"bm128_bn128_bk64_w8_s3_g8", "bm64_bn128_bk64_w4_s4_g8"}
    missing = {90: set(), 80: {"bm128_bn256_bk64_w8_s4_g8", "bm128_bn256_bk64_w8_s4_g8_t16",
                               "bm128_bn256_bk64_w8_s4_g8_short32", "bm16_bn256_bk128_w4_s3_g8"},
               89: {config.tag for config in GROUPED_CONFIGS} - fitting_sm89}
    for arch, tags in missing.items():
        grouped = {(variant.config, variant.dtype, variant.layout)
                   for variant in _native.binary_variants(arch) if variant.family == "grouped"}
        assert grouped == {(config, dtype, layout) for config in GROUPED_CONFIGS if config.tag not in tags
                           for dtype in ("float16", "bfloat16") for layout in ("row_major", "row_column")}
    name = _native.BinaryVariant("grouped", _PREFILL, "bfloat16", "row_column").name(90)
    assert name == f"triton.grouped_mm.{_PREFILL.tag}.row_column.bfloat16.sm90"


def test_compile_all_takes_the_grouped_family(tmp_path, monkeypatch):
    compiled = []
    # What compile_all asks for, without compiling it.
    monkeypatch.setattr(_compile, "compile_to_binary", lambda family, config, dtype, arch, out_dir, **options:
                        compiled.append((family.name, config, dtype, arch, options["layout"])))
    compile_all(80, tmp_path, dtypes=["float16", "float32"], layouts=["row_major", "row_column"],
                families=["grouped"])
    assert compiled == [("grouped", config, torch.float16, 80, layout)
                        for config in GROUPED_CONFIGS if GROUPED_FAMILY.binary_rows(config, torch.float16, 80)
                        for layout in ("row_major", "row_column")]
    monkeypatch.undo()
    with pytest.raises(TypeError, match="dtype: the grouped family compiles for float16, bfloat16"):
        compile_to_binary("grouped", _PREFILL, "float32", 90, tmp_path)
    with pytest.raises(ValueError, match="layout"):
        compile_to_binary("grouped", _PREFILL, "float16", 90, tmp_path, layout="column_major")


def _grouped_problem(layouts, dtype="bfloat16", rows=512, n=1024, k=768):
    return SimpleNamespace(dims={"E": 8, "R": rows, "N": n, "K": k}, dtype=dtype, layouts=layouts, device_type=2,
                           device_index=0)


def test_the_python_kernel_leaves_the_problems_its_binary_serves(monkeypatch):
    monkeypatch.setattr(_families, "device_facts", lambda device: (90, 132))
    names = {layout: f"triton.grouped_mm.{_PREFILL.tag}.{layout}.bfloat16.sm90" for layout in ("row_major",
                                                                                                "row_column")}
    twin = _GroupedSupports(_PREFILL, {(90, "bfloat16", layout, 0): name for layout, name in names.items()})
    linear = ("contiguous", "col_strided", "contiguous")
    assert twin(_grouped_problem(linear)) == f"runs as its device binary {names['row_column']}"
    assert twin(_grouped_problem(("contiguous", "col_strided", "absent"))) == \
        f"runs as its device binary {names['row_column']}"
    assert twin(_grouped_problem(("row_strided", "contiguous", "contiguous"))) == \
        f"runs as its device binary {names['row_major']}"
    # What no binary covers stays with the Python kernel: K or N off 16, general strides, strided offsets, float16
    # (no binary registered here), another arch.
    assert twin(_grouped_problem(linear, k=776)) is True
    assert twin(_grouped_problem(linear, n=1000)) is True
    assert twin(_grouped_problem(("general", "col_strided", "contiguous"))) is True
    assert twin(_grouped_problem(("contiguous", "col_strided", "general"))) is True
    assert twin(_grouped_problem(linear, dtype="float16")) is True
    # The shape rules come first, for the binary's predicate and its twin's alike.
    assert "BLOCK_M" in twin(_grouped_problem(linear, rows=8))
    assert "BLOCK_M" in _GroupedSupports(_PREFILL)(_grouped_problem(linear, rows=8))
    monkeypatch.setattr(_families, "device_facts", lambda device: (80, 108))
    assert twin(_grouped_problem(linear)) is True
