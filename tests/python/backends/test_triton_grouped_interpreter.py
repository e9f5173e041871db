"""The persistent grouped GEMM against the op's float64 reference in Triton's CPU interpreter: empty groups, one
group, every row in one group, no rows, rows past the last offset, the 3-D form, both weight layouts, float16,
bfloat16 and float32, and ``out=``. The kernel runs in a child process (grouped_interpreter_worker.py) because
TRITON_INTERPRET must be set before Triton is first imported. bfloat16 runs too: the launcher widens its operands
to float32 before tl.dot on the CPU, where the interpreter's bfloat16 tl.dot is wrong."""

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

_WORKER = Path(__file__).with_name("grouped_interpreter_worker.py")


def test_every_config_matches_the_reference_in_the_interpreter() -> None:
    environment = dict(os.environ, TRITON_INTERPRET="1")
    completed = subprocess.run([sys.executable, str(_WORKER)], capture_output=True, text=True, env=environment,
                               timeout=900, cwd=_WORKER.parent)
    assert completed.returncode == 0, f"the interpreter worker failed:\n{completed.stderr[-4000:]}"
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert not report["failures"], "\n".join(report["failures"])
    # 5 (config, dtype) pairs x 8 cases x 2 layouts
    assert report["runs"] == 5 * 8 * 2
