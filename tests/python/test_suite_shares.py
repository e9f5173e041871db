"""tests/conftest.py's --share I/N, which splits a suite too long for one GPU machine call: the I-th share is every
N-th test the markers selected, from the I-th on, and a malformed share is a usage error naming the option."""

import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# A CPU file of a dozen tests; the GPU suite splits the same way after -m gpu has selected.
SAMPLE = TESTS / "python" / "test_arrays.py"


def _collect(*options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           str(SAMPLE), *options], cwd=TESTS.parent, capture_output=True, text=True, timeout=300)


def _ids(result: subprocess.CompletedProcess) -> list[str]:
    assert result.returncode == 0, result.stdout + result.stderr
    return [line for line in result.stdout.splitlines() if "::" in line]


def test_a_share_is_every_nth_selected_test_from_the_ith_on() -> None:
    every = _ids(_collect())
    assert len(every) >= 6, every
    assert _ids(_collect("--share", "2/3")) == every[1::3]


def test_a_malformed_share_is_a_usage_error_naming_the_option() -> None:
    for share in ("0/2", "3/2", "x"):
        result = _collect("--share", share)
        assert result.returncode == 4, (share, result.stdout, result.stderr)
        assert f"--share: expected I/N with 1 <= I <= N, got '{share}'" in result.stderr
