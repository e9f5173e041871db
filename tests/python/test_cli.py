"""The kabi command line: info, list, explain, run — through main(argv) and once as the installed console script."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import kabi
from kabi import _core
from kabi._base.decision_cache import invalidate_all
from kabi.cli import main

# The tests that dispatch in-process use the heuristic's picks (the fixture `untuned`), except the first-call test,
# which turns tuning on itself: tests/python/test_user_cache_untouched.py runs it and test_console_script without
# the conftest.


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    """Tables wide enough that kernel names are not wrapped across lines."""
    monkeypatch.setenv("COLUMNS", "300")


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def test_info_lists_versions_devices_and_plugins(capsys):
    status, output = run_cli(capsys, "info")
    assert status == 0
    for text in ("versions", "C ABI", "torch", "devices", "cpu:0", "x86-64", "plugins", "kabi-cpu", "loaded"):
        assert text in output, text


def test_list_shows_every_kernel(capsys):
    status, output = run_cli(capsys, "list")
    assert status == 0
    for text in ("matmul", "cpu.openblas.gemm", "torch.matmul.cpu", "torch.matmul.cuda", "float32,float64"):
        assert text in output, text


@pytest.mark.usefixtures("untuned")
def test_explain_prints_the_pick(capsys):
    status, output = run_cli(capsys, "explain", "matmul", "--shape", "64x32x16", "--dtype", "float32", "--device", "cpu")
    assert status == 0
    assert "pick: cpu.openblas.gemm" in output and "torch.matmul.cpu" in output


@pytest.mark.usefixtures("untuned")
def test_explain_with_a_force_that_cannot_run_exits_nonzero(capsys):
    status, output = run_cli(capsys, "explain", "matmul", "--shape", "8x8x8", "--dtype", "float16", "--force", "cpu")
    assert status == 1
    assert "no eligible kernel" in output


@pytest.mark.usefixtures("untuned")
@pytest.mark.parametrize(
    "shape, dtype, extra",
    [("64x48x32", "float32", []), ("3x16x8x24", "float64", ["--transpose", "a"]), ("32x32x32", "bfloat16", ["--transpose", "b"]),
     ("M=20,N=12,K=7", "float32", ["--batch", "2,3"]), ("K=9,M=5,N=6", "float64", ["--transpose", "a", "--transpose", "b"])],
)
def test_run_checks_and_times(capsys, shape, dtype, extra):
    status, output = run_cli(capsys, "run", "matmul", "--shape", shape, "--dtype", dtype, "--device", "cpu", "--repeat", "3", *extra)
    assert status == 0, output
    for text in ("pick", "reason", "error vs float64", "PASS", "median time"):
        assert text in output, text


@pytest.mark.usefixtures("untuned")
def test_run_forced_kernel(capsys):
    status, output = run_cli(capsys, "run", "matmul", "--shape", "16x16x16", "--force", "torch", "--repeat", "3")
    assert status == 0
    assert "torch.matmul.cpu (forced)" in output


@pytest.mark.parametrize("shape", ["512x512", "0x4x4", "axbxc", "1x2x3x4x5"])
def test_bad_shape_is_a_usage_error(capsys, shape):
    status, output = run_cli(capsys, "run", "matmul", "--shape", shape)
    assert status == 2
    assert f"--shape {shape!r}: expected 3 positive sizes [M, N, K], or 4 with a leading batch size [B, M, N, K]" in output


def test_unknown_dtype_is_reported(capsys):
    status, output = run_cli(capsys, "run", "matmul", "--shape", "4x4x4", "--dtype", "float128")
    assert status == 2
    assert "unknown dtype 'float128'" in output


def test_console_script():
    beside_python = Path(sys.executable).with_name("kabi")
    script = str(beside_python) if beside_python.exists() else shutil.which("kabi")
    assert script is not None, "the kabi console script is neither beside this Python nor on PATH"
    environment = {**os.environ, "KABI_TUNE": "off"}
    result = subprocess.run(
        [script, "explain", "matmul", "--shape", "8x8x8"], capture_output=True, text=True, timeout=120, env=environment
    )
    assert result.returncode == 0, result.stderr
    assert "pick:" in result.stdout


def test_run_reports_the_decision_its_first_call_made(capsys, monkeypatch):
    # With tuning on (the default policy), the first call of a new problem tunes: `kabi run` must show that pick,
    # not the heuristic one that was current before the call.
    from kabi._selection import tuner

    monkeypatch.setattr(kabi.ops._front, "_on_selection_miss", tuner.on_selection_miss)
    invalidate_all()
    with kabi.tuning("first-call", repeat=3, min_time_s=0.0):
        status, output = run_cli(capsys, "run", "matmul", "--shape", "40x24x56", "--dtype", "float32", "--repeat", "3")
    assert status == 0
    assert "(tuned)" in output and "tuned: fastest of" in output


@pytest.mark.usefixtures("untuned")
def test_run_defaults_to_the_device_present_and_its_dtype(capsys):
    import torch

    status, output = run_cli(capsys, "run", "matmul", "--shape", "24x16x8", "--repeat", "2")
    assert status == 0
    expected = "bfloat16 on cuda" if torch.cuda.is_available() else "float32 on cpu"
    assert f"M=24,N=16,K=8 {expected}" in output


def test_binaries_compile_then_list(capsys, tmp_path):
    pytest.importorskip("triton")
    out = tmp_path / "binaries"
    status, output = run_cli(capsys, "binaries", "compile", "--arch", "80", "--out", str(out), "--dtypes", "bfloat16",
                             "--families", "small_m")
    assert status == 0, output
    manifests = sorted(out.glob("*.kabi-manifest"))
    assert manifests, output
    names = [path.name.removesuffix(".kabi-manifest") for path in manifests]
    # Names of different lengths (split-K tags are longer) are padded to their column's width.
    for name in names:
        assert re.search(rf"{re.escape(name)} +│ bfloat16 │ {re.escape(name)}\.cubin", output), name
    assert f"KABI_BINARY_PATH={out.resolve()}" in output

    status, output = run_cli(capsys, "binaries", "list", str(out))
    assert status == 0, output
    for name in names:
        assert re.search(rf"{re.escape(name)} +│ sm_80 │ bfloat16 │ matmul_", output), name


def test_binaries_compile_native_writes_where_registration_looks(capsys, tmp_path, monkeypatch):
    pytest.importorskip("triton")
    from kabi.backends.triton import Manifest, ManifestParam, _native
    from kabi.backends.triton._manifest import fnv1a64, write_binary

    def compile_request(variants, arch, multiprocessors, directory):
        for variant in variants:
            name, image = variant.name(arch), b"\x7fELF" + bytes(60)
            write_binary(Manifest(op="matmul", name=name, backend="triton", device="cuda", priority=0,
                                  dtypes=(variant.dtype,), layouts=("contiguous",), alignment=16, batch_mode="none",
                                  image=f"{name}.cubin", image_format="cubin", image_fnv1a64=fnv1a64(image),
                                  arch=arch, entry="kernel", grid=("1", "1", "1"), block=(128, 1, 1),
                                  shared_memory_bytes=0, cluster_size=1, params=(ManifestParam.tensor(0),)),
                         image, directory)
        return []

    # One in-process worker, and a stand-in for Triton's compiler: what is checked is where the files go.
    monkeypatch.setattr(_native.os, "cpu_count", lambda: 1)
    monkeypatch.setattr(_native, "_compile_request", compile_request)
    status, output = run_cli(capsys, "binaries", "compile", "--native", "--arch", "90", "--multiprocessors", "114",
                             "--out", str(tmp_path), "--families", "persistent_tma", "scaled_mm_tma")
    assert status == 0, output
    variants = _native.binary_variants(90, ["persistent_tma", "scaled_mm_tma"])
    # Each family's native dtypes: 4 configs x 2 dtypes x 3 layout variants, and the FP8 kernel's 4 configs x 3
    # output dtypes less the one whose tiles overflow shared memory.
    assert len(variants) == 24 + 11 and "KABI_BINARY_PATH=" in output
    monkeypatch.setattr(_native, "_PACKAGED_ROOT", tmp_path)
    directory = _native.ensure_binaries(variants, 90, 114)
    assert tmp_path in directory.parents and directory.name == "sm90_sms114"
    assert len(list(directory.glob("*.kabi-manifest"))) == 24 + 11


def test_binaries_list_reports_an_invalid_manifest(capsys, tmp_path):
    (tmp_path / "broken.kabi-manifest").write_text("not a manifest\n")
    status, output = run_cli(capsys, "binaries", "list", str(tmp_path))
    assert status == 1
    assert "broken.kabi-manifest: first line must be" in output
    status, output = run_cli(capsys, "binaries", "list", str(tmp_path / "absent"))
    assert status == 2 and "is not a directory" in output


@pytest.mark.parametrize(
    "arguments, expected",
    [(["--arch", "70"], "argument --arch: must be 80 or 90, got '70'"),
     (["--arch", "90", "--multiprocessors", "0"], "argument --multiprocessors: must be a positive integer")],
)
def test_binaries_compile_usage_errors(capsys, tmp_path, arguments, expected):
    with pytest.raises(SystemExit) as exit_info:
        main(["binaries", "compile", "--out", str(tmp_path), *arguments])
    assert exit_info.value.code == 2
    assert expected in capsys.readouterr().err


def test_binaries_compile_names_an_unknown_dtype(capsys, tmp_path):
    pytest.importorskip("triton")
    status, output = run_cli(capsys, "binaries", "compile", "--arch", "90", "--out", str(tmp_path),
                             "--dtypes", "float8")
    assert status == 2
    assert "--dtypes: unknown dtype float8; expected some of float16, bfloat16, float32" in output
    assert not list(tmp_path.iterdir())


def test_version_names_kabi_and_its_abi(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    abi = _core.abi_version()
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"kabi {kabi.__version__} (C ABI {abi >> 16}.{abi & 0xFFFF})\n"


@pytest.mark.parametrize("command", [
    ["list", "nope"],
    ["explain", "nope", "--shape", "4x4x4"],
    ["run", "nope", "--shape", "4x4x4"],
    ["tune", "nope", "--shape", "4x4x4"],
])
def test_an_unknown_op_is_worded_once_for_every_command(capsys, command):
    status = main(command)
    captured = capsys.readouterr()
    assert status == 2
    assert captured.err == f"error: unknown op 'nope'; kabi has {', '.join(_core.op_list())}\n"


@pytest.mark.parametrize("command", ["run", "explain", "tune"])
@pytest.mark.parametrize("device", ["tpu", "cuda:99", "xla"])
def test_a_device_that_is_not_here_is_named(capsys, command, device):
    status = main([command, "matmul", "--shape", "4x4x4", "--device", device])
    captured = capsys.readouterr()
    assert status == 2
    assert captured.err.startswith(f"error: --device {device!r} is not a device of this machine; expected auto or "
                                   "one of cpu")
    assert "Traceback" not in captured.out + captured.err


def test_cuda_on_a_machine_without_cuda_is_named(capsys, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert main(["run", "matmul", "--shape", "4x4x4", "--device", "cuda"]) == 2
    assert capsys.readouterr().err == ("error: --device 'cuda' is not a device of this machine; expected auto or "
                                       "one of cpu\n")


def test_a_negative_shape_gets_the_shapes_own_message(capsys):
    status, output = run_cli(capsys, "run", "matmul", "--shape", "-3x4x4")
    assert status == 2
    assert "--shape '-3x4x4': expected 3 positive sizes [M, N, K]" in output
    status, output = run_cli(capsys, "run", "matmul", "--shape", "M=-3,N=4,K=4")
    assert status == 2
    assert "--shape 'M=-3,N=4,K=4': M: expected a positive size, got -3" in output


def test_a_bad_tuning_environment_is_a_kabi_error_naming_the_variable(capsys, monkeypatch):
    monkeypatch.setenv("KABI_TUNE", "sometimes")
    assert main(["tune", "matmul", "--shape", "4x4x4"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("error: bad tuning environment (KABI_TUNE") and error.count("\n") == 1
    assert "tuning mode must be one of 'off', 'first-call', 'graph', got 'sometimes'" in error


def test_tune_keeps_the_environments_tuning_settings_beside_its_own_budget(monkeypatch):
    from kabi.cli._commands import tune

    monkeypatch.setenv("KABI_TUNE", "off")
    monkeypatch.setenv("KABI_TUNE_SCREEN_MARGIN", "0.5")
    monkeypatch.setenv("KABI_TUNE_CONDITION_S", "0.01")
    monkeypatch.setenv("KABI_TUNE_MIN_CPU_SHARE", "0.25")
    arguments = tune.argparse.Namespace(warmup=None, repeat=9, min_time_s=None)
    settings = tune._settings(arguments)
    assert (settings.mode, settings.repeat) == ("first-call", 9), "the command tunes, with its own budget"
    assert (settings.screen_margin, settings.condition_s, settings.min_cpu_share) == (0.5, 0.01, 0.25)


@pytest.mark.usefixtures("untuned")
def test_run_prints_the_median_once(capsys):
    status, output = run_cli(capsys, "run", "matmul", "--shape", "8x8x8", "--device", "cpu", "--repeat", "3")
    assert status == 0
    assert output.count("median") == 1


def test_run_refuses_a_repeat_below_one(capsys):
    assert main(["run", "matmul", "--shape", "8x8x8", "--repeat", "0"]) == 2
    assert capsys.readouterr().err == "error: --repeat must be at least 1, got 0\n"


def test_cache_export_names_the_users_path(capsys, tmp_path):
    target = tmp_path / "absent" / "x.tsv"
    assert main(["cache", "export", str(target)]) == 2
    assert capsys.readouterr().err == f"error: cannot write {target}: No such file or directory\n"


def test_without_a_terminal_tables_are_not_squeezed_to_80_columns(capsys, monkeypatch):
    monkeypatch.delenv("COLUMNS")
    status, output = run_cli(capsys, "list", "matmul")
    assert status == 0
    assert max(map(len, output.splitlines())) > 80


@pytest.mark.parametrize("command", ["tune", "verify"])
@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--suite", "no-such-suite"], "--suite: matmul has no suite 'no-such-suite'"),
        (["--shape", "8x8x8", "--dtype", "float8_e4m3fn"], "--dtype: matmul is not defined for float8_e4m3fn"),
        (["--shape", "8x8x8", "--device", "tpu"], "--device 'tpu' is not a device of this machine"),
    ],
)
def test_tune_and_verify_word_a_bad_problem_alike(capsys, command, arguments, message):
    assert main([command, "matmul", *arguments]) == 2
    assert capsys.readouterr().err.startswith(f"error: {message}")
