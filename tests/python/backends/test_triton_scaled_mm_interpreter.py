"""The Triton FP8 kernels (pointer and persistent TMA) against the op's float64 reference in Triton's CPU
interpreter, through ``kabi.ops.scaled_mm`` with each config forced: float8_e4m3fn and float8_e5m2 (the interpreter multiplies both
exactly, so no widening is needed; its bfloat16 tl.dot is the one it gets wrong), per-tensor, row-wise and mixed
scales, every output dtype, bias and none, sizes off every tile.

The kernel runs in a child process (scaled_mm_interpreter_worker.py) because TRITON_INTERPRET must be set before
Triton is first imported, and this pytest process imports Triton for real (the compile tests).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
numpy = pytest.importorskip("numpy")  # the interpreter runs on numpy


def _version(text: str) -> tuple:
    return tuple(int(part) for part in text.split(".")[:2])


# As in test_triton_interpreter.py: Triton 3.6's interpreter cannot run with numpy 2.5.
pytestmark = pytest.mark.skipif(
    _version(triton.__version__) < (3, 9) and _version(numpy.__version__) >= (2, 5),
    reason=f"Triton {triton.__version__}'s interpreter cannot run with numpy {numpy.__version__}")

_WORKER = Path(__file__).with_name("scaled_mm_interpreter_worker.py")


def test_every_config_matches_the_reference_in_the_interpreter() -> None:
    environment = dict(os.environ, TRITON_INTERPRET="1", TRITON_DEFAULT_FP_FUSION="1")
    completed = subprocess.run([sys.executable, str(_WORKER)], capture_output=True, text=True, env=environment,
                               timeout=900, cwd=_WORKER.parent)
    assert completed.returncode == 0, f"interpreter worker failed:\n{completed.stderr[-4000:]}"
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert not report["failures"], "\n".join(report["failures"][:20])
    # Every config ran on some problem (the worker fails one that ran none); the smallest tiles on all 24 cases of
    # the shapes of 19 rows.
    assert report["runs"] >= 2 * 48
