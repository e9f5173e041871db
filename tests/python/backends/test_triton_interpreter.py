"""Every Triton kernel, forced through kabi, against the float64 reference in Triton's CPU interpreter.

The kernels run in a child process (triton_interpreter_worker.py) because TRITON_INTERPRET must be set before
Triton is first imported, and this pytest process imports Triton for real (the compile tests). bfloat16 is left
out: the interpreter's bfloat16 tl.dot is wrong (it multiplies raw bit patterns); the GPU tests cover it.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import pytest

triton = pytest.importorskip("triton")
numpy = pytest.importorskip("numpy")  # the interpreter runs on numpy


def _version(text: str) -> tuple:
    return tuple(int(part) for part in text.split(".")[:2])


# Triton 3.6's interpreter turns 1-element arrays into loop bounds with int(), which numpy 2.5 refuses ("only
# 0-dimensional arrays can be converted to Python scalars"); Triton 3.9 works. Versions between are untested.
pytestmark = pytest.mark.skipif(
    _version(triton.__version__) < (3, 9) and _version(numpy.__version__) >= (2, 5),
    reason=f"Triton {triton.__version__}'s interpreter cannot run with numpy {numpy.__version__}")

_WORKER = Path(__file__).with_name("triton_interpreter_worker.py")
_MATMUL_TOML = Path(__file__).parents[3] / "registry" / "ops" / "matmul.toml"


@pytest.fixture(scope="module")
def interpreter_run() -> dict:
    environment = dict(os.environ, TRITON_INTERPRET="1", TRITON_DEFAULT_FP_FUSION="1")
    completed = subprocess.run([sys.executable, str(_WORKER)], capture_output=True, text=True, env=environment,
                               timeout=600)
    assert completed.returncode == 0, f"interpreter worker failed:\n{completed.stderr[-4000:]}"
    return json.loads(completed.stdout)


@pytest.fixture(scope="module")
def tolerances() -> dict:
    return tomllib.loads(_MATMUL_TOML.read_text())["tolerance"]


def test_every_registered_kernel_ran(interpreter_run):
    registered = set(interpreter_run["registered"])
    ran = {record["kernel"] for record in interpreter_run["records"]}
    families = {name.split(".")[2] for name in registered}
    assert families == {"tiled", "persistent_tma", "small_m"}
    assert registered == ran, f"registered but never run: {sorted(registered - ran)}"


def test_every_kernel_matches_the_reference(interpreter_run, tolerances):
    failures = []
    for record in interpreter_run["records"]:
        where = f"{record['kernel']} {record['dtype']} {record['case']}"
        if "error" in record:
            failures.append(f"{where}: raised {record['error']}")
            continue
        tolerance = tolerances[record["dtype"]]
        if record["norm"] > tolerance["norm"] or record["extreme"] > tolerance["extreme"]:
            failures.append(f"{where}: relative error norm {record['norm']:.2e}, extreme {record['extreme']:.2e}")
        if record["out_norm"] > tolerance["norm"] or not record["out_returned"]:
            failures.append(f"{where}: out= path wrong (error {record['out_norm']:.2e}, returned out: "
                            f"{record['out_returned']})")
        if not record["dtype_ok"]:
            failures.append(f"{where}: output dtype or shape differs from the input's")
    assert not failures, "\n".join(failures)


def test_cases_cover_edges(interpreter_run):
    cases = {(record["case"], record["dtype"]) for record in interpreter_run["records"]}
    shapes = {case.split()[0] for case, _ in cases}
    assert any(shape.startswith("1x") for shape in shapes), "M = 1 is not covered"
    assert all(int(shape.split("x")[2]) % 16 for shape in shapes), "every case has K not a multiple of 16"
    assert any("aT" in case for case, _ in cases) and any("bT" in case for case, _ in cases)
    assert {dtype for _, dtype in cases} == {"float16", "float32"}


def test_binary_builds_are_right_whether_or_not_pitches_align(interpreter_run, tolerances):
    # A device binary cannot tell the core what it needs of the strides (16-byte row pitches for TMA, for vector
    # loads): the kernels check at run time and take a slower path when the check fails.
    records = interpreter_run["pitch_checked"]
    assert {record["case"] for record in records} == {
        "persistent_tma 40x72x48", "persistent_tma 40x72x33", "persistent_tma 35x72x40",
        "tiled 40x72x48", "tiled 40x70x33", "small_m 40x72x48", "small_m 40x70x33"}
    for record in records:
        assert record["norm"] <= tolerances["float16"]["norm"], record
        assert record["extreme"] <= tolerances["float16"]["extreme"], record
