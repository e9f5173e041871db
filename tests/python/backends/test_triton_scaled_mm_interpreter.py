"""The Triton FP8 kernels (pointer and persistent TMA) against the op's float64 reference in Triton's CPU
interpreter, through ``kabi.ops.scaled_mm`` with each config forced: float8_e4m3fn and float8_e5m2 (the interpreter
multiplies both exactly, so no widening is needed; its bfloat16 tl.dot is the one it gets wrong), per-tensor, row-wise
and mixed scales (row-wise ones read through a stride of 3 in every third case), every output dtype, bias and none,
sizes off every tile.

The kernel runs in a child process (scaled_mm_interpreter_worker.py) because TRITON_INTERPRET must be set before
Triton is first imported, and this pytest process imports Triton for real (the compile tests).
"""

from _interpreter_runs import run_interpreter_worker


def test_every_config_matches_the_reference_in_the_interpreter() -> None:
    report = run_interpreter_worker("scaled_mm_interpreter_worker.py", timeout=900)
    assert not report["failures"], "\n".join(report["failures"][:20])
    # Every config ran on some problem (the worker fails one that ran none); the smallest tiles on all 24 cases of
    # the shapes of 19 rows.
    assert report["runs"] >= 2 * 48
