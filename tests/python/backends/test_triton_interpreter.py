"""Every Triton kernel, forced through kabi, against the float64 reference in Triton's CPU interpreter.

The kernels run in a child process (triton_interpreter_worker.py) because TRITON_INTERPRET must be set before
Triton is first imported, and this pytest process imports Triton for real (the compile tests). bfloat16 is left
out: the interpreter's bfloat16 tl.dot is wrong (it multiplies raw bit patterns); the GPU tests cover it.
"""

import pytest
from _interpreter_runs import MATMUL_TOLERANCES, matmul_record_failures, run_interpreter_worker

from kabi.backends.triton._families import FAMILIES


@pytest.fixture(scope="module")
def interpreter_run() -> dict:
    return run_interpreter_worker("triton_interpreter_worker.py")


def test_every_registered_kernel_ran(interpreter_run):
    registered = set(interpreter_run["registered"])
    ran = {record["kernel"] for record in interpreter_run["records"]}
    families = {name.split(".")[2] for name in registered}
    assert families == {"tiled", "persistent_tma", "small_m"}
    assert registered == ran, f"registered but never run: {sorted(registered - ran)}"


def test_every_kernel_matches_the_reference(interpreter_run):
    def out_path_failure(record: dict, tolerance: dict) -> str | None:
        if record["out_norm"] > tolerance["norm"] or not record["out_returned"]:
            return f"out= path wrong (error {record['out_norm']:.2e}, returned out: {record['out_returned']})"
        return None

    failures = matmul_record_failures(interpreter_run["records"], out_path_failure)
    assert not failures, "\n".join(failures)


def test_cases_cover_edges(interpreter_run):
    cases = {(record["case"], record["dtype"]) for record in interpreter_run["records"]}
    shapes = {case.split()[0] for case, _ in cases}
    assert any(shape.startswith("1x") for shape in shapes), "M = 1 is not covered"
    assert all(int(shape.split("x")[2]) % 16 for shape in shapes), "every case has K not a multiple of 16"
    assert any("aT" in case for case, _ in cases) and any("bT" in case for case, _ in cases)
    assert {dtype for _, dtype in cases} == {"float16", "float32"}


def test_binary_builds_are_right_whether_or_not_pitches_align(interpreter_run):
    # A device binary cannot tell the core what it needs of the strides (16-byte row pitches for TMA, for vector
    # loads): the kernels check at run time and take a slower path when the check fails.
    records = interpreter_run["pitch_checked"]
    assert {record["case"] for record in records} == {
        "persistent_tma 40x72x48", "persistent_tma 40x72x33", "persistent_tma 35x72x40",
        "tiled 40x72x48", "tiled 40x70x33"} | {
        f"small_m {config.tag} {shape}" for config in FAMILIES["small_m"].configs[:2]
        for shape in ("40x72x48", "40x70x33")}
    assert any(config.split_k > 1 for config in FAMILIES["small_m"].configs[:2])
    for record in records:
        assert record["norm"] <= MATMUL_TOLERANCES["float16"]["norm"], record
        assert record["extreme"] <= MATMUL_TOLERANCES["float16"]["extreme"], record
