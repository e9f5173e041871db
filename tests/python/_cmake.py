"""Configure and build a CMake project from a test, the way a user of kabi would (Ninja when present, -j2)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def require_cmake() -> str:
    """The cmake executable, or skip the test when there is none."""
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake is not installed")
    return cmake


def build(source: Path, build_dir: Path, definitions: dict[str, str] | None = None) -> None:
    """Configure ``source`` into ``build_dir`` (Release) and build it; on failure, fail with CMake's output."""
    cmake = require_cmake()
    configure = [cmake, "-S", str(source), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                 f"-DPython_EXECUTABLE={sys.executable}"]
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    configure += [f"-D{name}={value}" for name, value in (definitions or {}).items()]
    for command in (configure, [cmake, "--build", str(build_dir), "-j", "2"]):
        result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "CMAKE_BUILD_PARALLEL_LEVEL": "2"})
        if result.returncode != 0:
            pytest.fail(f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}")
