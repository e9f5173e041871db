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
from kabi.backends.triton._binary_families import binary_families  # noqa: E402
from kabi.backends.triton._families import FAMILIES, MatmulProblem  # noqa: E402
from kabi.backends.triton._registration import _Supports  # noqa: E402

TAG = TILED_CONFIGS[0].tag
ROW_MAJOR = f"triton.matmul.tiled.{TAG}.row_major.float16.sm90"
COLUMN_MAJOR = f"triton.matmul.tiled.{TAG}.column_major.float16.sm90"
ROW_COLUMN = f"triton.matmul.tiled.{TAG}.row_column.float16.sm90"


def _supports_for(family: str, config, rows: int) -> _Supports:
    return _Supports(FAMILIES[family], config, rows=rows)


@pytest.fixture
def unregister():
    yield
    for name in (ROW_MAJOR, COLUMN_MAJOR, ROW_COLUMN):
        if any(kernel.name == name for kernel in kabi.kernels("matmul")):
            kabi.unregister_kernel("matmul", name)


def test_variants_cover_each_config_dtype_and_native_layout() -> None:
    variants = _native.binary_variants(90)
    names = {variant.name(90) for variant in variants}
    assert len(names) == len(variants)
    assert {variant.family for variant in variants} == {"tiled", "small_m", "persistent_tma", "decode", "grouped",
                                                         "linear", "scaled_mm", "scaled_mm_tma"}
    assert {variant.layout for variant in variants} == {"row_major", "column_major", "row_column"}
    # Split-K configs too: they add their slices in the same launch.
    assert {(variant.family, variant.config) for variant in variants} == {
        (family.name, config) for family in binary_families().values() for config in family.configs}
    # 40 of them are grouped_mm's: 10 configs x 2 dtypes x 2 weight layouts (28 on sm_80, whose shared memory the
    # three 4-stage 128 x 256 tiles overflow; 8 on sm_89, where 2 configs fit); 10 linear's: 5 configs x 2 dtypes; 23
    # scaled_mm's: 4 pointer and 4 persistent configs x 3 output dtypes, less the persistent 128 x 256 tile in
    # float32 (test_triton_scaled_mm_compile.py). sm_89 has the 6 of the 2 pointer configs that fit its shared memory.
    assert (len(variants), len(_native.binary_variants(89)), len(_native.binary_variants(80))) == (293, 204, 230)
    hopper_tag = FAMILIES["persistent_tma"].configs[0].tag
    assert f"triton.matmul.persistent_tma.{hopper_tag}.column_major.bfloat16.sm90" in names
    assert f"triton.matmul.persistent_tma.{hopper_tag}.row_column.bfloat16.sm90" in names
    # sm_80 has no TMA matmul kernel (the grouped one reads through pointers there).
    assert {variant.family for variant in _native.binary_variants(80)} == {"tiled", "small_m", "decode", "grouped",
                                                                           "linear"}


def test_decode_variants_read_their_weight_layout_with_one_binary_per_row_count() -> None:
    decode = [variant for variant in _native.binary_variants(90) if variant.family == "decode"]
    for config in FAMILIES["decode"].configs:
        mine = {(variant.layout, variant.rows, variant.dtype) for variant in decode if variant.config == config}
        layout = "row_column" if config.weight_layout == "n_by_k" else "row_major"
        # A row count whose pipelined tiles overflow sm_90's shared memory gets no binary.
        rows = [count for count in ((1,) if config.style == "gemv" else (16, 32, 64))
                if not FAMILIES["decode"].unsupported_reason(config, MatmulProblem(count, 4096, 4096, 2, 90,
                                                                                   b_column_major=layout == "row_column"))]
        assert mine == {(layout, count, dtype) for count in rows for dtype in ("float16", "bfloat16")}, config.tag
    assert not [variant for variant in decode if variant.config.tag == "dot_nk_bn16_bk512_w4_s4" and variant.rows == 64]
    assert "triton.matmul.decode.gemv_nk_bn8_bk512_w4_s3.m1.row_column.bfloat16.sm90" in {
        variant.name(90) for variant in decode}


def test_binaries_compile_once_and_register_with_their_supports_predicate(unregister, monkeypatch) -> None:
    registered = _native.register_native_binaries(90, 132, _supports_for, families=["tiled"], dtypes=["float16"],
                                                  tags=[TAG], workers=1)
    assert registered == {("tiled", TAG, "float16", "row_major", 0): ROW_MAJOR,
                          ("tiled", TAG, "float16", "column_major", 0): COLUMN_MAJOR,
                          ("tiled", TAG, "float16", "row_column", 0): ROW_COLUMN}
    for name in registered.values():
        info = kabi.kernel_info("matmul", name)
        assert (info.kind, info.backend, info.dtypes, info.archs) == ("device_binary", "triton", ("float16",), (90,))
    directory = kabi.cache.directory() / "binaries" / "triton"
    assert len(list(directory.rglob("*.cubin"))) == 3 and not list(directory.rglob("*.partial"))

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
    packaged = _native.ensure_binaries(variants, 90, 132, workers=1)
    assert packaged_root in packaged.parents
    # Registration reads every manifest from there.
    read = []
    monkeypatch.setattr(_native, "register_binaries",
                        lambda binaries: [read.append(path) or path for path, op, supports in binaries])
    _native.register_native_binaries(90, 132, _supports_for, families=["tiled"], dtypes=["float16"], tags=[TAG])
    assert sorted(read) == sorted(str(packaged / f"{variant.name(90)}.kabi-manifest") for variant in variants)
    # One manifest short, the packaged directory is passed over for the cache's, complete.
    (packaged / f"{variants[0].name(90)}.kabi-manifest").unlink()
    assert _native.ensure_binaries(variants, 90, 132, workers=1) == cache_directory


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


def _cuda_problem(layouts, dtype="float16", m=512, n=384, k=256):
    return SimpleNamespace(dims={"M": m, "K": k, "N": n}, dtype=dtype, layouts=layouts, device_type=2,
                           device_index=0)


def test_the_python_kernel_leaves_the_problems_its_binary_serves(monkeypatch) -> None:
    monkeypatch.setattr(_families, "device_facts", lambda device: (90, 132))
    binaries = {(90, "float16", "row_major", 0): ROW_MAJOR, (90, "float16", "column_major", 0): COLUMN_MAJOR,
                (90, "float16", "row_column", 0): ROW_COLUMN}
    supports = _Supports(FAMILIES["tiled"], TILED_CONFIGS[0], binaries)
    assert supports(_cuda_problem(("contiguous", "row_strided"))) == f"runs as its device binary {ROW_MAJOR}"
    assert supports(_cuda_problem(("col_strided", "col_strided"))) == f"runs as its device binary {COLUMN_MAJOR}"
    assert supports(_cuda_problem(("contiguous", "col_strided"))) == f"runs as its device binary {ROW_COLUMN}"
    # What no binary covers stays with the Python kernel: a column-major a with a row-major b, general strides,
    # another dtype or arch, and sizes the row_column binary's declared divisibility rules out.
    assert supports(_cuda_problem(("col_strided", "contiguous"))) is True
    assert supports(_cuda_problem(("general", "contiguous"))) is True
    assert supports(_cuda_problem(("contiguous", "contiguous"), dtype="bfloat16")) is True
    assert supports(_cuda_problem(("contiguous", "col_strided"), k=260)) is True
    assert supports(_cuda_problem(("contiguous", "col_strided"), n=376)) is True
    assert supports(_cuda_problem(("contiguous", "row_strided"), k=260)) == f"runs as its device binary {ROW_MAJOR}"
    monkeypatch.setattr(_families, "device_facts", lambda device: (80, 108))
    assert supports(_cuda_problem(("contiguous", "contiguous"))) is True


def test_a_decode_binary_serves_the_row_counts_it_is_compiled_for(monkeypatch) -> None:
    monkeypatch.setattr(_families, "device_facts", lambda device: (90, 132))
    decode = FAMILIES["decode"]
    (config,) = [config for config in decode.configs if config.tag == "dot_nk_bn16_bk256_w4_s5"]
    names = {rows: f"triton.matmul.decode.{config.tag}.m{rows}.row_column.float16.sm90" for rows in (16, 32, 64)}
    twin = _Supports(decode, config, {(90, "float16", "row_column", rows): name for rows, name in names.items()})
    linear_call = ("contiguous", "col_strided")
    for m, rows in ((1, 16), (16, 16), (17, 32), (33, 64), (64, 64)):
        problem = _cuda_problem(linear_call, m=m, n=4096, k=4096)
        assert twin(problem) == f"runs as its device binary {names[rows]}"
        assert _Supports(decode, config, rows=rows)(problem) is True
        for other in {16, 32, 64} - {rows}:
            assert "rows per program" in _Supports(decode, config, rows=other)(problem)
    # K or N off the declared multiple of 16, or a row-major weight (another config's), stay with the Python kernel.
    assert twin(_cuda_problem(linear_call, m=8, n=4096, k=4104)) is True
    assert twin(_cuda_problem(linear_call, m=8, n=4100, k=4096)) is True
    assert "streams" in twin(_cuda_problem(("contiguous", "contiguous"), m=8, n=4096, k=4096))


def test_registration_uses_the_arch_and_sm_count_of_each_gpu(monkeypatch) -> None:
    gpu = SimpleNamespace(device_type="cuda", arch=90, compute_units=132)
    monkeypatch.setattr("kabi._base.devices.devices", lambda: (gpu, gpu, SimpleNamespace(device_type="cpu")))
    calls = []

    def register(arch, multiprocessors, supports_for):
        calls.append((arch, multiprocessors))
        assert isinstance(supports_for("tiled", TILED_CONFIGS[0], 0), _Supports)
        return {("tiled", TAG, "float16", "row_major", 0): ROW_MAJOR}

    monkeypatch.setattr(_native, "register_native_binaries", register)
    assert _registration._register_binaries() == {("tiled", TAG): {(90, "float16", "row_major", 0): ROW_MAJOR}}
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
