"""The fused Triton linear kernel against the op's float64 reference in Triton's CPU interpreter: every activation,
x of rank 1 to 4, w dense, transposed and sliced, bias absent, dense and strided, float16, bfloat16 and float32.

The kernel runs in a child process (linear_interpreter_worker.py) because TRITON_INTERPRET must be set before
Triton is first imported, and this pytest process imports Triton for real (the compile tests). bfloat16 runs too:
the launcher widens its operands to float32 before tl.dot on the CPU (DOT_IN_FLOAT32), where the interpreter's
bfloat16 tl.dot is wrong.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
numpy = pytest.importorskip("numpy")  # the interpreter runs on numpy

from _linear_cases import LINEAR_CASES  # noqa: E402

from kabi.ops._references import ACTIVATIONS  # noqa: E402


def _version(text: str) -> tuple:
    return tuple(int(part) for part in text.split(".")[:2])


# As in test_triton_interpreter.py: Triton 3.6's interpreter cannot run with numpy 2.5.
pytestmark = pytest.mark.skipif(
    _version(triton.__version__) < (3, 9) and _version(numpy.__version__) >= (2, 5),
    reason=f"Triton {triton.__version__}'s interpreter cannot run with numpy {numpy.__version__}")

_WORKER = Path(__file__).with_name("linear_interpreter_worker.py")


@pytest.fixture(scope="module")
def interpreter_run() -> dict:
    environment = dict(os.environ, TRITON_INTERPRET="1", TRITON_DEFAULT_FP_FUSION="1")
    completed = subprocess.run([sys.executable, str(_WORKER)], capture_output=True, text=True, env=environment,
                               timeout=600, cwd=_WORKER.parent)
    assert completed.returncode == 0, f"interpreter worker failed:\n{completed.stderr[-4000:]}"
    return json.loads(completed.stdout)


def test_every_run_matches_the_reference(interpreter_run):
    failures = []
    for record in interpreter_run["records"]:
        where = f"{record['config']} {record['dtype']} {record['activation']} {record['case']}"
        if "error" in record:
            failures.append(f"{where}: raised {record['error']}")
            continue
        if record["verdict"] is not None:
            failures.append(f"{where}: {record['verdict']}")
        if record["out_verdict"] is not None or not record["out_returned"]:
            failures.append(f"{where}: out= path: {record['out_verdict']}, returned out: {record['out_returned']}")
    assert not failures, "\n".join(failures)


def test_runs_cover_every_case_dtype_activation_and_config(interpreter_run):
    records = interpreter_run["records"]
    covered = {(record["case"], record["dtype"], record["activation"]) for record in records}
    expected = {(case.name, dtype, activation) for case in LINEAR_CASES
                for dtype in ("float16", "bfloat16", "float32") for activation in ACTIVATIONS}
    assert covered == expected
    assert {record["config"] for record in records} == set(interpreter_run["configs"])
