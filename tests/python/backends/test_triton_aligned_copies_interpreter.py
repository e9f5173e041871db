"""triton.matmul.aligned_copies in Triton's CPU interpreter: the matmul over copies padded by the Triton copy kernel
against the op's float64 reference (float16 and bfloat16, both weight layouts, unaligned N and K, operands dense and
as views into wider rows, ``out=`` dense and strided), the copy kernel's zeros around the source, and the kernel
forced through kabi.ops.matmul where its supports predicate accepts the problem and declined where it does not.

The worker (aligned_copies_interpreter_worker.py) runs in a child process because TRITON_INTERPRET must be set
before Triton is first imported.
"""

import pytest
from _interpreter_runs import run_interpreter_worker


@pytest.fixture(scope="module")
def interpreter_run() -> dict:
    return run_interpreter_worker("aligned_copies_interpreter_worker.py")


def test_every_launch_matches_the_reference(interpreter_run):
    failures = []
    for record in interpreter_run["launches"]:
        where = f"{record['case']} {record['dtype']}"
        if "error" in record:
            failures.append(f"{where}: raised {record['error']}")
            continue
        for key in ("verdict", "out_verdict", "strided_out_verdict"):
            if record[key] is not None:
                failures.append(f"{where}: {key}: {record[key]}")
        if not record["out_returned"] or not record["strided_out_untouched_elsewhere"]:
            failures.append(f"{where}: out returned {record['out_returned']}, the strided out's other columns "
                            f"untouched {record['strided_out_untouched_elsewhere']}")
    assert not failures, "\n".join(failures)
    assert {record["dtype"] for record in interpreter_run["launches"]} == {"float16", "bfloat16"}
    assert any("pitched" in record["case"] for record in interpreter_run["launches"])


def test_the_copy_kernel_writes_the_source_and_zeros_everywhere_else(interpreter_run):
    bad = [record for record in interpreter_run["copies"]
           if not (record["holds_the_source"] and record["zeros_elsewhere"])]
    assert not bad
    assert {record["column_major"] for record in interpreter_run["copies"]} == {False, True}


def test_dispatch_serves_unaligned_problems_and_declines_aligned_ones(interpreter_run):
    dispatch = interpreter_run["dispatch"]
    assert dispatch["registered"] and dispatch["eligible"]
    assert dispatch["verdict"] is None
    assert not dispatch["aligned_problem_eligible"]
    assert "already 16-byte aligned" in dispatch["aligned_problem_reason"]
