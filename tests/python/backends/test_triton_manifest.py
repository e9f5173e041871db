"""The manifest fields of ABI 2.4 and 2.5 (docs/manifest.md), through kabi's one writer, its Python reader and the C++
loader: per-input layouts and a param's divisible_by, written under the format line ``kabi-manifest 2`` only where
used, and the zeroed_scratch param under ``kabi-manifest 3`` (a manifest without them is written byte for byte as
before), read back alike, and refused alike when malformed. Needs no GPU: the image is registered, never loaded."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import kabi
from kabi.backends.triton import Manifest, ManifestError, ManifestParam, read_manifest
from kabi.backends.triton._manifest import fnv1a64, write_binary

NAME = "test.manifest.fields"
IMAGE = b"\x7fELF" + bytes(range(60))

# What the writer wrote before ABI 2.4 for the manifest below: one without the new fields must stay exactly this.
WRITTEN_BEFORE_2_4 = """kabi-manifest 1
abi_major = 2
op = matmul
name = test.manifest.fields
backend = test
device = cuda
archs = 90
priority = 3
features =
dtypes = float16,bfloat16
layouts = contiguous,row_strided
alignment = 16
batch_mode = none
fingerprint = test:fields
image = test.manifest.fields.cubin
image_format = cubin
image_fnv1a64 = 0290a40e461ba287
arch = 90
entry = kernel
grid = cdiv(M, 64) * cdiv(N, 64); 1; 1
block = 128, 1, 1
shared_memory_bytes = 0
cluster_size = 1
param = tensor index=0
param = tensor index=1
param = tensor index=2
param = dim name=K size=4
param = stride index=1 dim=-2 size=4
param = scratch value=0
"""


def _manifest(**changes) -> Manifest:
    manifest = Manifest(
        op="matmul", name=NAME, backend="test", device="cuda", priority=3, dtypes=("float16", "bfloat16"),
        layouts=("contiguous", "row_strided"), alignment=16, batch_mode="none", image=f"{NAME}.cubin",
        image_format="cubin", image_fnv1a64=fnv1a64(IMAGE), arch=90, archs=(90,), entry="kernel",
        grid=("cdiv(M, 64) * cdiv(N, 64)", "1", "1"), block=(128, 1, 1), shared_memory_bytes=0, cluster_size=1,
        params=(ManifestParam.tensor(0), ManifestParam.tensor(1), ManifestParam.tensor(2), ManifestParam.dim("K"),
                ManifestParam.stride(1, -2), ManifestParam.scratch(0)),
        fingerprint="test:fields")
    return dataclasses.replace(manifest, **changes)


def _with_new_fields() -> Manifest:
    """nn.Linear's layout (a row-major, b column-major), K and b's column stride assumed multiples of 16."""
    return _manifest(input_layouts=(("contiguous", "row_strided"), ("col_strided",)),
                     params=(ManifestParam.tensor(0), ManifestParam.tensor(1), ManifestParam.tensor(2),
                             ManifestParam.dim("K", divisible_by=16), ManifestParam.stride(1, -1, divisible_by=16),
                             ManifestParam.scratch(0)))


@pytest.fixture
def unregister():
    yield
    if any(kernel.name == NAME for kernel in kabi.kernels("matmul")):
        kabi.unregister_kernel("matmul", NAME)


def test_a_manifest_without_the_new_fields_is_written_as_before():
    assert _manifest().format_line == "kabi-manifest 1"
    assert _manifest().text() == WRITTEN_BEFORE_2_4


def test_the_new_fields_are_written_under_format_2_and_read_back_by_both_readers(tmp_path: Path, unregister):
    manifest = _with_new_fields()
    path = write_binary(manifest, IMAGE, tmp_path)
    text = path.read_text()
    assert text.startswith("kabi-manifest 2\n")
    assert "input_layouts = contiguous,row_strided; col_strided\n" in text
    assert "param = dim name=K size=4 divisible_by=16\n" in text
    assert "param = stride index=1 dim=-1 size=4 divisible_by=16\n" in text
    assert read_manifest(path) == manifest
    assert kabi.load_binaries(tmp_path) == 1
    info = kabi.kernel_info("matmul", NAME)
    assert info.input_layouts == (("a", ("contiguous", "row_strided")), ("b", ("col_strided",)))
    # One field of 2.4 is enough for format 2.
    assert _manifest(input_layouts=(("any",), ("col_strided",))).format_line == "kabi-manifest 2"
    divisible = _manifest(params=(ManifestParam.tensor(0), ManifestParam.stride(0, -2, size=8, divisible_by=16)))
    assert divisible.format_line == "kabi-manifest 2"
    assert ManifestParam.stride(0, -2, divisible_by=1) == ManifestParam.stride(0, -2)


@pytest.mark.parametrize(
    "edit, python_message, loader_message",
    [
        (lambda text: text.replace("col_strided\n", "diagonal\n", 1), "input_layouts: entry 1",
         'input_layouts: unknown layout "diagonal" for b'),
        (lambda text: text.replace("; col_strided\n", "\n", 1), "input_layouts: 1 entries separated by ';'; op matmul "
         "has 2 inputs", "input_layouts: 1 entries separated by ';'; op matmul has 2 inputs (a, b)"),
        (lambda text: text.replace("param = tensor index=2\n", "param = tensor index=2 divisible_by=16\n"),
         "param tensor: divisible_by: only dim and stride parameters take one",
         "param divisible_by: only dim and stride parameters take one, not tensor"),
        (lambda text: text.replace("divisible_by=16\nparam = scratch", "divisible_by=-16\nparam = scratch"),
         "divisible_by must be 0 or a power of two, got '-16'", "param divisible_by: -16 is outside"),
        (lambda text: text.replace("divisible_by=16\nparam = scratch", "divisible_by=24\nparam = scratch"),
         "divisible_by must be 0 or a power of two, got '24'", "param divisible_by: 24 is not a power of two"),
        (lambda text: text.replace("kabi-manifest 2", "kabi-manifest 1"),
         "input_layouts: needs the first line 'kabi-manifest 2'",
         'input_layouts: needs the first line "kabi-manifest 2"'),
        (lambda text: text.replace("kabi-manifest 2", "kabi-manifest 4"), "first line must be",
         'first line is "kabi-manifest 4"'),
    ],
    ids=["layout-name", "input-count", "divisor-on-tensor", "negative-divisor", "divisor-not-power-of-two",
         "format-1", "format-4"],
)
def test_malformed_new_fields_are_refused_by_both_readers(tmp_path: Path, unregister, edit, python_message,
                                                          loader_message):
    _assert_both_readers_refuse(_with_new_fields(), edit, python_message, loader_message, tmp_path)


def _assert_both_readers_refuse(manifest: Manifest, edit, python_message: str, loader_message: str,
                                directory: Path) -> None:
    """Write ``manifest``, apply ``edit`` to its text, and check that the Python reader and the core's loader both
    refuse it with their messages naming the file, and that nothing was registered."""
    path = write_binary(manifest, IMAGE, directory)
    path.write_text(edit(path.read_text()))
    with pytest.raises(ManifestError, match=python_message) as refusal:
        read_manifest(path)
    assert str(path) in str(refusal.value)
    with pytest.raises(kabi.InvalidArgumentError) as refusal:
        kabi.load_binaries(directory)
    assert loader_message in str(refusal.value) and str(path) in str(refusal.value)
    assert NAME not in {kernel.name for kernel in kabi.kernels("matmul")}


def test_the_writer_refuses_a_divisor_that_is_no_power_of_two():
    with pytest.raises(ValueError, match="divisible_by must be 0 .no assumption. or a power of two, got 12"):
        ManifestParam.dim("K", divisible_by=12)


def _with_zeroed_scratch() -> Manifest:
    """Serial split-K's entry: partial sums in scratch, tile counters in zeroed scratch."""
    return _manifest(grid=("cdiv(N, 64)", "4", "cdiv(M, 16)"),
                     params=_manifest().params + (ManifestParam.scratch(4096), ManifestParam.zeroed_scratch(4)))


def test_zeroed_scratch_is_written_under_format_3_and_read_back_by_both_readers(tmp_path: Path, unregister):
    manifest = _with_zeroed_scratch()
    path = write_binary(manifest, IMAGE, tmp_path)
    text = path.read_text()
    assert text.startswith("kabi-manifest 3\n") and text.endswith("param = zeroed_scratch value=4\n")
    assert read_manifest(path) == manifest
    assert kabi.load_binaries(tmp_path) == 1
    assert ManifestParam.zeroed_scratch(4).size_bytes == 8
    # Format 3 holds the fields of format 2 too; one zeroed_scratch param is enough for it.
    with_layouts = dataclasses.replace(manifest, input_layouts=_with_new_fields().input_layouts)
    assert with_layouts.format_line == "kabi-manifest 3"


@pytest.mark.parametrize(
    "edit, python_message, loader_message",
    [
        (lambda text: text.replace("kabi-manifest 3", "kabi-manifest 2"),
         "param 'zeroed_scratch value=4': needs the first line 'kabi-manifest 3' .a field of ABI 2.5., not "
         "'kabi-manifest 2'",
         'param zeroed_scratch: needs the first line "kabi-manifest 3" (a field of ABI 2.5), not "kabi-manifest 2"'),
        (lambda text: text.replace("kabi-manifest 3", "kabi-manifest 1"),
         "needs the first line 'kabi-manifest 3'", 'param zeroed_scratch: needs the first line "kabi-manifest 3"'),
        (lambda text: text.replace("zeroed_scratch value=4", "zeroed_scratch value=-4"),
         "param zeroed_scratch: value must be a count of bytes >= 0, got -4", "param value: -4 is outside [0, "),
        (lambda text: text.replace("zeroed_scratch value=4", "zeroed_scratch value=4 size=4"),
         "param zeroed_scratch: unexpected item 'size=4'",
         'param: "size=4" is not a field of a zeroed_scratch parameter'),
        (lambda text: text.replace("zeroed_scratch value=4", "zeroed_scratch"),
         "param zeroed_scratch: missing value", "param: zeroed_scratch needs value="),
    ],
    ids=["format-2", "format-1", "negative-bytes", "unknown-item", "no-value"],
)
def test_malformed_zeroed_scratch_is_refused_by_both_readers(tmp_path: Path, unregister, edit, python_message,
                                                             loader_message):
    _assert_both_readers_refuse(_with_zeroed_scratch(), edit, python_message, loader_message, tmp_path)
