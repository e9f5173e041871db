"""kabi.cuda.register_source on the CPU machine: NVRTC compiles CUDA C++ to a cubin with no driver, the image cache is
hit the second time, a bad source reports NVRTC's log, the launch spec is checked against the compiled entry, and
registering without a GPU registers nothing. What runs on a GPU is in test_cuda_source_gpu.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import kabi
from kabi.backends.triton import read_manifest
from kabi.backends.triton._manifest import write_atomically

from _cuda_sources import ENTRIES, TILED_MATMUL_SOURCE, tiled_matmul_declaration

nvrtc = pytest.importorskip("cuda.bindings.nvrtc", reason="kabi.cuda needs cuda-bindings (the test extras)")
try:
    kabi.cuda.nvrtc_version()
except kabi.UnavailableError as error:  # the bindings without the nvidia-cuda-nvrtc library
    pytest.skip(f"NVRTC is not installed: {error}", allow_module_level=True)

HAS_CUDA_DEVICE = any(device.device_type == "cuda" for device in kabi.devices())


@pytest.fixture
def binaries():
    """Names of the device binaries a test registers, unregistered afterwards."""
    names: list[str] = []
    yield names
    for name in dict.fromkeys(names):
        kabi.unregister_kernel("matmul", name)


def _register(names: list[str], dtype: str = "float32", **overrides) -> kabi.cuda.SourceKernel:
    declaration = {**tiled_matmul_declaration(dtype), "name": f"test.nvrtc.tiled.{dtype}", "target_archs": [90],
                   **overrides}
    (kernel,) = kabi.cuda.register_source("matmul", **declaration)
    names.append(kernel.name)
    return kernel


def test_a_registered_source_becomes_a_device_binary_of_the_op(binaries) -> None:
    kernel = _register(binaries, "bfloat16")
    assert kernel.name == "test.nvrtc.tiled.bfloat16.sm90" and kernel.arch == 90 and not kernel.from_cache
    # The lowered name of a template instance is its mangled symbol.
    assert kernel.entry.startswith("_Z") and "tiled_matmul" in kernel.entry
    manifest = read_manifest(kernel.directory / f"{kernel.name}.kabi-manifest")
    image = (kernel.directory / manifest.image).read_bytes()
    assert image[:4] == b"\x7fELF" and manifest.image_format == "cubin"
    assert (manifest.arch, manifest.archs, manifest.entry) == (90, (90,), kernel.entry)
    assert manifest.grid == ("cdiv(N, 16)", "cdiv(M, 16)", "1") and manifest.block == (16, 16, 1)
    assert [param.text() for param in manifest.params][:4] == ["tensor index=0", "tensor index=1", "tensor index=2",
                                                               "dim name=M size=4"]
    info = kabi.kernel_info("matmul", kernel.name)
    assert (info.kind, info.backend, info.dtypes) == ("device_binary", "cuda", ("bfloat16",))


def test_the_second_compile_comes_from_the_disk_cache(binaries, tmp_path: Path) -> None:
    first = kabi.cuda.compile_source(TILED_MATMUL_SOURCE, ENTRIES["float16"], "sm_80", (), tmp_path)
    second = kabi.cuda.compile_source(TILED_MATMUL_SOURCE, ENTRIES["float16"], "sm_80", (), tmp_path)
    assert not first.from_cache and second.from_cache
    assert (second.cubin, second.entry, second.param_types) == (first.cubin, first.entry, first.param_types)
    assert second.param_types == ("u64",) * 3 + ("u32",) * 6
    # Another option, arch or entry is another image.
    other = kabi.cuda.compile_source(TILED_MATMUL_SOURCE, ENTRIES["float16"], "sm_80", ("-lineinfo",), tmp_path)
    assert not other.from_cache
    assert len(list(tmp_path.glob("*.cubin"))) == 2 and not list(tmp_path.glob("*.partial"))

    # register_source keeps its images under kabi's cache directory: registering again compiles nothing, and the
    # same kernel (same image and launch spec) is kept rather than refused.
    kernel = _register(binaries, "float16")
    again = _register(binaries, "float16")
    assert not kernel.from_cache and again.from_cache and again.directory == kernel.directory
    assert kabi.cache.directory() in kernel.directory.parents


def test_a_source_nvrtc_refuses_raises_with_its_log(binaries) -> None:
    broken = TILED_MATMUL_SOURCE.replace("float sum = 0.0f;", "float sum = undeclared_value;")
    with pytest.raises(kabi.InvalidArgumentError, match="NVRTC could not compile") as raised:
        _register(binaries, source=broken)
    assert "undeclared_value" in str(raised.value) and "error" in str(raised.value)
    assert not binaries


def test_an_entry_the_source_lacks_is_named(binaries) -> None:
    with pytest.raises(kabi.InvalidArgumentError, match="no_such_kernel"):
        _register(binaries, entry="no_such_kernel")


def test_params_that_do_not_match_the_entry_are_refused(binaries) -> None:
    params = tiled_matmul_declaration("float32")["params"]
    with pytest.raises(kabi.InvalidArgumentError, match="params: .*lists 8 parameters, the entry takes 9"):
        _register(binaries, params=params[:-1])
    with pytest.raises(kabi.InvalidArgumentError, match=r"params\[3\]: param dim: missing size"):
        _register(binaries, params=[*params[:3], "dim name=M", *params[4:]])
    with pytest.raises(kabi.InvalidArgumentError, match="entry parameter 3 is .u32"):
        _register(binaries, params=[*params[:3], "dim name=M size=8", *params[4:]])


@pytest.mark.parametrize("argument, value, message", [
    ("grid", ("a", "b", "c", "d"), "grid must be one to three"),
    ("block", (16, "16"), "block must be one to three"),
    ("batch", "some", "batch must be one of"),
    ("archs", "90", "archs must be"),
    ("source", "  ", "source must be"),
    ("name", "../escape", "name must be letters"),
])
def test_bad_arguments_are_named(binaries, argument: str, value, message: str) -> None:
    with pytest.raises(kabi.InvalidArgumentError, match=message):
        _register(binaries, **{argument: value})


def test_an_unknown_op_is_refused_before_compiling(binaries) -> None:
    with pytest.raises(kabi.NotFoundError, match="no_such_op"):
        kabi.cuda.register_source("no_such_op", **tiled_matmul_declaration("float32"), target_archs=[90])


def test_the_same_name_with_another_image_is_refused(binaries) -> None:
    _register(binaries)
    with pytest.raises(kabi.AlreadyExistsError, match="test.nvrtc.tiled.float32.sm90"):
        _register(binaries, options=("-lineinfo",))


def test_the_default_name_keeps_the_entry_readable(binaries) -> None:
    declaration = {**tiled_matmul_declaration("float16"), "target_archs": [90]}
    (kernel,) = kabi.cuda.register_source("matmul", **declaration)
    binaries.append(kernel.name)
    assert kernel.name == "cuda.matmul.tiled_matmul___half_.sm90"


def test_archs_the_kernel_excludes_are_not_compiled(binaries) -> None:
    assert kabi.cuda.register_source("matmul", **tiled_matmul_declaration("float32"), name="test.nvrtc.excluded",
                                     archs=(80, 89), target_archs=[90]) == ()


@pytest.mark.skipif(HAS_CUDA_DEVICE, reason="checks the behaviour without a CUDA device")
def test_without_a_gpu_nothing_is_compiled_or_registered(binaries) -> None:
    before = len(kabi.kernels("matmul"))
    assert kabi.cuda.register_source("matmul", **tiled_matmul_declaration("float32"), name="test.nvrtc.nogpu") == ()
    assert len(kabi.kernels("matmul")) == before
    assert not (kabi.cache.directory() / "binaries").exists()


def test_an_interrupted_write_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "image.cubin"

    def crash(source, destination):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        write_atomically(target, b"\x7fELF" + b"\0" * 64)
    assert list(tmp_path.iterdir()) == []
