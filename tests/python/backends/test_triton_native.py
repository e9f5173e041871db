"""Triton candidates on the native launch path, on the CPU machine: the binary variants of each family, compiling
them into kabi's cache (once: the second registration compiles nothing), registering them as device binaries with
their supports predicate, a packaged directory taking precedence, the Python kernel leaving the problems its binary
serves to it, and the registration falling back to the Python kernels without a GPU, when asked, or when compiling
fails. What runs on a GPU is in test_triton_native_gpu.py."""

from __future__ import annotations

import logging
import shutil
from types import SimpleNamespace

import pytest

pytest.importorskip("triton")

import kabi  # noqa: E402
from kabi.backends.triton import TILED_CONFIGS  # noqa: E402
from kabi.backends.triton import _families, _native, _registration  # noqa: E402
from kabi.backends.triton._families import FAMILIES  # noqa: E402
from kabi.backends.triton._registration import _Supports  # noqa: E402

TAG = TILED_CONFIGS[0].tag
ROW_MAJOR = f"triton.matmul.tiled.{TAG}.row_major.float16.sm90"
COLUMN_MAJOR = f"triton.matmul.tiled.{TAG}.column_major.float16.sm90"


def _supports_for(family: str, config) -> _Supports:
    return _Supports(FAMILIES[family], config)


@pytest.fixture
def unregister():
    yield
    for name in (ROW_MAJOR, COLUMN_MAJOR):
        if any(kernel.name == name for kernel in kabi.kernels("matmul")):
            kabi.unregister_kernel("matmul", name)


def test_variants_cover_each_single_launch_config_dtype_and_native_layout() -> None:
    variants = _native.binary_variants(90)
    names = {variant.name(90) for variant in variants}
    assert len(names) == len(variants)
    assert {variant.family for variant in variants} == {"tiled", "small_m", "persistent_tma"}
    assert {variant.layout for variant in variants} == {"row_major", "column_major"}
    assert all(variant.config.split_k == 1 for variant in variants)
    assert f"triton.matmul.persistent_tma.{FAMILIES['persistent_tma'].configs[0].tag}.column_major.bfloat16.sm90" in names
    # sm_80 has no TMA kernel; the decode family has no binary at all (its binary_refusal).
    assert {variant.family for variant in _native.binary_variants(80)} == {"tiled", "small_m"}


def test_binaries_compile_once_and_register_with_their_supports_predicate(unregister, monkeypatch) -> None:
    registered = _native.register_native_binaries(90, 132, _supports_for, families=["tiled"], dtypes=["float16"],
                                                  tags=[TAG], workers=1)
    assert registered == {("tiled", TAG, "float16", "row_major"): ROW_MAJOR,
                          ("tiled", TAG, "float16", "column_major"): COLUMN_MAJOR}
    for name in registered.values():
        info = kabi.kernel_info("matmul", name)
        assert (info.kind, info.backend, info.dtypes, info.archs) == ("device_binary", "triton", ("float16",), (90,))
    directory = kabi.cache.directory() / "binaries" / "triton"
    assert len(list(directory.rglob("*.cubin"))) == 2 and not list(directory.rglob("*.partial"))

    def no_compiling(*arguments):
        raise AssertionError("the cached binaries were compiled again")

    monkeypatch.setattr(_native, "_compile_request", no_compiling)
    again = _native.register_native_binaries(90, 132, _supports_for, families=["tiled"], dtypes=["float16"],
                                             tags=[TAG], workers=1)
    assert again == registered


def test_a_complete_packaged_directory_is_used_without_compiling(tmp_path, monkeypatch) -> None:
    variants = _native.binary_variants(90, ["tiled"], ["float16"], [TAG])
    cache_directory = _native.ensure_binaries(variants, 90, 132, workers=1)
    packaged_root = tmp_path / "packaged"
    shutil.copytree(cache_directory, packaged_root / cache_directory.relative_to(cache_directory.parents[1]))
    monkeypatch.setattr(_native, "_PACKAGED_ROOT", packaged_root)
    def no_compiling(*arguments):
        raise AssertionError("the packaged binaries were compiled again")

    monkeypatch.setattr(_native, "_compile_request", no_compiling)
    assert packaged_root in _native.ensure_binaries(variants, 90, 132, workers=1).parents


def test_a_variant_that_fails_to_compile_is_logged_and_left_to_python(monkeypatch, caplog) -> None:
    monkeypatch.setattr(_native, "_compile_request",
                        lambda variants, *rest: [f"{variant.name(90)}: RuntimeError: boom" for variant in variants])
    with caplog.at_level(logging.WARNING, logger="kabi"):
        registered = _native.register_native_binaries(90, 132, _supports_for, families=["tiled"], dtypes=["float16"],
                                                      tags=[TAG], workers=1)
    assert registered == {}
    assert "boom" in caplog.text and ROW_MAJOR in caplog.text


def test_worker_processes_compile_in_parallel_and_report_each_failure(tmp_path) -> None:
    (variant,) = _native.binary_variants(80, ["tiled"], ["float16"], [TAG])[:1]
    unknown = _native.BinaryVariant("tiled", SimpleNamespace(tag="bm16_no_such_config"), "float16", "row_major")
    failures = _native._compile_in_processes([variant, unknown], 80, 132, tmp_path, workers=2)
    assert len(failures) == 1 and failures[0].startswith(unknown.name(80) + ": ValueError"), failures
    assert (tmp_path / f"{variant.name(80)}.kabi-manifest").is_file()
    assert (tmp_path / f"{variant.name(80)}.cubin").read_bytes()[:4] == b"\x7fELF"


def _cuda_problem(layouts, dtype="float16"):
    return SimpleNamespace(dims={"M": 512, "K": 256, "N": 384}, dtype=dtype, layouts=layouts, device_type=2,
                           device_index=0)


def test_the_python_kernel_leaves_the_problems_its_binary_serves(monkeypatch) -> None:
    monkeypatch.setattr(_families, "device_facts", lambda device: (90, 132))
    binaries = {(90, "float16", "row_major"): ROW_MAJOR, (90, "float16", "column_major"): COLUMN_MAJOR}
    supports = _Supports(FAMILIES["tiled"], TILED_CONFIGS[0], binaries)
    assert supports(_cuda_problem(("contiguous", "row_strided"))) == f"runs as its device binary {ROW_MAJOR}"
    assert supports(_cuda_problem(("col_strided", "col_strided"))) == f"runs as its device binary {COLUMN_MAJOR}"
    # What no binary covers stays with the Python kernel: mixed or general strides, another dtype or arch.
    assert supports(_cuda_problem(("contiguous", "col_strided"))) is True
    assert supports(_cuda_problem(("general", "contiguous"))) is True
    assert supports(_cuda_problem(("contiguous", "contiguous"), dtype="bfloat16")) is True
    monkeypatch.setattr(_families, "device_facts", lambda device: (80, 108))
    assert supports(_cuda_problem(("contiguous", "contiguous"))) is True


def test_registration_uses_the_arch_and_sm_count_of_each_gpu(monkeypatch) -> None:
    gpu = SimpleNamespace(device_type="cuda", arch=90, compute_units=132)
    monkeypatch.setattr("kabi._base.devices.devices", lambda: (gpu, gpu, SimpleNamespace(device_type="cpu")))
    calls = []

    def register(arch, multiprocessors, supports_for):
        calls.append((arch, multiprocessors))
        assert isinstance(supports_for("tiled", TILED_CONFIGS[0]), _Supports)
        return {("tiled", TAG, "float16", "row_major"): ROW_MAJOR}

    monkeypatch.setattr(_native, "register_native_binaries", register)
    assert _registration._register_binaries() == {("tiled", TAG): {(90, "float16", "row_major"): ROW_MAJOR}}
    assert calls == [(90, 132)]
    monkeypatch.setenv("KABI_TRITON_BINARIES", "0")
    assert _registration._register_binaries() == {}


def test_registration_without_a_gpu_or_with_a_failing_build_keeps_the_python_kernels(monkeypatch, caplog) -> None:
    monkeypatch.setattr("kabi._base.devices.devices", lambda: ())
    assert _registration._register_binaries() == {}
    gpu = SimpleNamespace(device_type="cuda", arch=90, compute_units=132)
    monkeypatch.setattr("kabi._base.devices.devices", lambda: (gpu,))

    def broken(*arguments):
        raise RuntimeError("no ptxas")

    monkeypatch.setattr(_native, "register_native_binaries", broken)
    with caplog.at_level(logging.WARNING, logger="kabi"):
        assert _registration._register_binaries() == {}
    assert "sm_90" in caplog.text and "no ptxas" in caplog.text
