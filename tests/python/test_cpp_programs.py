"""Build the C and C++ test programs of tests/cpp against this source tree and run them through ctest.

tests/cpp configures on its own (it pulls in the whole tree without the Python module), so this is exactly what a
C or C++ caller of libkabi gets. Set KABI_CPP_TEST_BUILD_DIR to keep and reuse one build directory across runs:

    KABI_CPP_TEST_BUILD_DIR=build/cpp-tests python -m pytest tests/python/test_cpp_programs.py
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from _cmake import build, require_cmake

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reused = os.environ.get("KABI_CPP_TEST_BUILD_DIR")
    directory = Path(reused).resolve() if reused else tmp_path_factory.mktemp("kabi-cpp-tests")
    build(ROOT / "tests" / "cpp", directory)
    return directory


def run_ctest(build_dir: Path, pattern: str) -> str:
    """Run the ctest tests whose names match pattern; fail with their output unless all pass."""
    ctest = str(Path(require_cmake()).with_name("ctest"))
    result = subprocess.run(
        [ctest, "--test-dir", str(build_dir), "--output-on-failure", "-R", pattern],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, f"ctest -R {pattern} failed:\n{result.stdout}\n{result.stderr}"
    assert "No tests were found" not in result.stdout, f"no ctest test matches {pattern}"
    return result.stdout


def test_c_program_passes(build_dir: Path) -> None:
    assert "100% tests passed" in run_ctest(build_dir, "^kabi_c_api$")


def test_cpp_program_passes(build_dir: Path) -> None:
    assert "100% tests passed" in run_ctest(build_dir, "^kabi_cpp_api$")


def test_header_compiles_alone_as_c99_and_cxx17(build_dir: Path) -> None:
    output = run_ctest(build_dir, "^kabi_header_")
    assert "kabi_header_c99" in output and "kabi_header_cxx17" in output


def test_every_registered_program_passes(build_dir: Path) -> None:
    assert "100% tests passed" in run_ctest(build_dir, ".")
