"""tests/cpp/test_cuda_plugin.c built against the installed kabi (its headers and libkabi, as a C application of
the wheel would be), for test_cuda_plugin.py (no GPU: the plugin loads and registers nothing) and
test_cuda_plugin_gpu.py (every kernel called from C); and tests/cpp/cuda_plugin_registration.c, the host of
test_cuda_plugin.py that reports GPUs this machine lacks."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from kabi import config

import _cmake

SOURCE = _cmake.REPOSITORY / "tests" / "cpp" / "test_cuda_plugin.c"
REGISTRATION_HOST_SOURCE = _cmake.REPOSITORY / "tests" / "cpp" / "cuda_plugin_registration.c"
# What the program returns when there is no CUDA device (ctest's convention for a skipped test).
SKIPPED = 77


def compile_c_caller(directory: Path, source: Path = SOURCE) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    program = directory / source.stem
    library_dir = config.library_dir()
    command = [compiler, "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", f"-I{config.include_dir()}",
               str(source), "-o", str(program), f"-L{library_dir}", "-lkabi", "-ldl", "-lm",
               f"-Wl,-rpath,{library_dir}"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return program
