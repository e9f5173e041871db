"""The suite never writes to the user's tuning cache: tests/conftest.py gives every test a temporary one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
# Tests that tune, so that each records timings in whatever cache is current: one in this process, one in a child.
TUNING_TESTS = ["python/test_cli.py::test_run_reports_the_decision_its_first_call_made",
                "python/test_cli.py::test_console_script"]


def _pytest_session(home: Path, *options: str) -> subprocess.CompletedProcess[str]:
    environment = {name: value for name, value in os.environ.items() if name != "KABI_CACHE_DIR"}
    environment.update(HOME=str(home / "home"), XDG_CACHE_HOME=str(home / "xdg-cache"))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options, *TUNING_TESTS],
                          cwd=TESTS, env=environment, capture_output=True, text=True, timeout=600)


def _files_under(directory: Path) -> list[Path]:
    return sorted(path for path in directory.rglob("*") if path.is_file())


@pytest.mark.slow
def test_a_test_session_leaves_the_users_cache_untouched(tmp_path):
    (tmp_path / "home").mkdir()
    (tmp_path / "xdg-cache").mkdir()
    result = _pytest_session(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _files_under(tmp_path) == []


@pytest.mark.slow
def test_without_the_conftest_the_same_tests_write_to_the_users_cache(tmp_path):
    # The control for the test above: its tests do reach the default cache when nothing redirects it.
    result = _pytest_session(tmp_path, "--noconftest")
    assert result.returncode == 0, result.stdout + result.stderr
    written = _files_under(tmp_path)
    assert written and all(path.is_relative_to(tmp_path / "xdg-cache" / "kabi") for path in written)
