"""The fused Triton linear kernel against the op's float64 reference in Triton's CPU interpreter: every activation,
x of rank 1 to 4, w dense, transposed and sliced, bias absent, dense and strided, float16, bfloat16 and float32.

The kernel runs in a child process (linear_interpreter_worker.py) because TRITON_INTERPRET must be set before
Triton is first imported, and this pytest process imports Triton for real (the compile tests). bfloat16 runs too:
the launcher widens its operands to float32 before tl.dot on the CPU (DOT_IN_FLOAT32), where the interpreter's
bfloat16 tl.dot is wrong.

The same kernel also runs every problem kind a device binary of it admits (x of rank 1 to 4, bias absent and given,
every activation, float16 and bfloat16) as the core launches that binary: the bias as a NULL pointer when absent and
the activation as its enum index, both read at run time. Each such run matches the reference and gives the same bits
as the Python kernel, which compiles the bias and the activation in.
"""

import pytest
from _interpreter_runs import run_interpreter_worker
from _linear_cases import BINARY_LINEAR_CASES, LINEAR_CASES

from kabi.ops._references import ACTIVATIONS


@pytest.fixture(scope="module")
def interpreter_run() -> dict:
    return run_interpreter_worker("linear_interpreter_worker.py")


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


def test_binary_launches_match_the_reference_and_the_python_kernel(interpreter_run):
    failures = []
    for record in interpreter_run["binary_records"]:
        where = f"{record['config']} {record['dtype']} {record['activation']} {record['case']}"
        if "error" in record:
            failures.append(f"{where}: raised {record['error']}")
        elif record["verdict"] is not None:
            failures.append(f"{where}: {record['verdict']}")
        elif not record["same_as_python_kernel"]:
            failures.append(f"{where}: the run-time bias and activation gave other bits than the compiled-in ones")
    assert not failures, "\n".join(failures)
    covered = {(record["case"], record["dtype"], record["activation"]) for record in interpreter_run["binary_records"]}
    assert covered == {(case.name, dtype, activation) for case in BINARY_LINEAR_CASES
                       for dtype in ("float16", "bfloat16") for activation in ACTIVATIONS}
    assert {case.bias for case in BINARY_LINEAR_CASES} == {"none", "dense"}
    assert {len(case.x_shape) for case in BINARY_LINEAR_CASES} == {1, 2, 3, 4}
