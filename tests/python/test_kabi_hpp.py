"""kabi.hpp, the header-only C++ wrapper: tests/cpp/test_kabi_hpp.cpp built against this tree's headers and the
installed libkabi, then run (it checks itself and prints "ok")."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

import _cmake
from kabi import config


def test_kabi_hpp_program(tmp_path: Path) -> None:
    compiler = shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    library_dir = config.library_dir()
    program = tmp_path / "test_kabi_hpp"
    command = [
        compiler, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-pedantic",
        f"-I{_cmake.REPOSITORY / 'csrc' / 'include'}", f"-I{_cmake.dlpack_include_dir()}",
        str(_cmake.REPOSITORY / "tests" / "cpp" / "test_kabi_hpp.cpp"),
        f"-L{library_dir}", "-lkabi", f"-Wl,-rpath,{library_dir}", "-o", str(program),
    ]
    build = subprocess.run(command, capture_output=True, text=True)
    assert build.returncode == 0, f"{' '.join(command)}\n{build.stderr}"

    import scipy_openblas32

    environment = {name: value for name, value in os.environ.items() if not name.startswith("KABI_")}
    environment["KABI_OPENBLAS_LIBRARY"] = str(
        Path(scipy_openblas32.get_lib_dir()) / f"lib{scipy_openblas32.get_library()}.so")
    result = subprocess.run([str(program)], capture_output=True, text=True, env=environment, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr
