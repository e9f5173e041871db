"""Running a worker script in Triton's CPU interpreter, for the interpreter tests of tests/python/backends, and
judging the records of the matmul workers against the op's tolerances.

A worker runs in a child process because TRITON_INTERPRET must be set before Triton is first imported, and the
pytest process imports Triton for real (the compile tests). It prints one JSON object, on its last line of output.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterable

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import pytest

MATMUL_TOLERANCES = tomllib.loads(
    (Path(__file__).parents[3] / "registry" / "ops" / "matmul.toml").read_text())["tolerance"]


def _version(text: str) -> tuple:
    return tuple(int(part) for part in text.split(".")[:2])


def run_interpreter_worker(script: str, timeout: float = 600) -> dict:
    """Run ``script`` (a file beside this one) in Triton's interpreter and return the JSON object it printed.

    Skips the calling test where Triton or numpy (which the interpreter runs on) is missing, or where the installed
    pair cannot run: Triton 3.6's interpreter turns 1-element arrays into loop bounds with int(), which numpy 2.5
    refuses ("only 0-dimensional arrays can be converted to Python scalars"); Triton 3.9 works, versions between
    are untested."""
    triton = pytest.importorskip("triton")
    numpy = pytest.importorskip("numpy")
    if _version(triton.__version__) < (3, 9) and _version(numpy.__version__) >= (2, 5):
        pytest.skip(f"Triton {triton.__version__}'s interpreter cannot run with numpy {numpy.__version__}")
    worker = Path(__file__).with_name(script)
    environment = dict(os.environ, TRITON_INTERPRET="1", TRITON_DEFAULT_FP_FUSION="1")
    completed = subprocess.run([sys.executable, str(worker)], capture_output=True, text=True, env=environment,
                               timeout=timeout, cwd=worker.parent)
    assert completed.returncode == 0, f"{script} failed:\n{completed.stderr[-4000:]}"
    return json.loads(completed.stdout.strip().splitlines()[-1])


def matmul_record_failures(records: Iterable[dict],
                           out_path_failure: Callable[[dict, dict], str | None]) -> list[str]:
    """What is wrong in the records of a matmul worker (kernel, dtype, case, relative errors ``norm`` and
    ``extreme`` against the float64 reference, ``dtype_ok``, or the ``error`` a run raised): each line names the
    run. ``out_path_failure(record, tolerance)`` judges the worker's own record of its ``out=`` run."""
    failures = []
    for record in records:
        where = f"{record['kernel']} {record['dtype']} {record['case']}"
        if "error" in record:
            failures.append(f"{where}: raised {record['error']}")
            continue
        tolerance = MATMUL_TOLERANCES[record["dtype"]]
        if record["norm"] > tolerance["norm"] or record["extreme"] > tolerance["extreme"]:
            failures.append(f"{where}: relative error norm {record['norm']:.2e}, extreme {record['extreme']:.2e}")
        out_failure = out_path_failure(record, tolerance)
        if out_failure is not None:
            failures.append(f"{where}: {out_failure}")
        if not record["dtype_ok"]:
            failures.append(f"{where}: output dtype or shape differs from the input's")
    return failures
