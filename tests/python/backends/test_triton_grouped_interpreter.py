"""The persistent grouped GEMM against the op's float64 reference in Triton's CPU interpreter: empty groups, one
group, every row in one group, no rows, rows past the last offset, the 3-D form, both weight layouts, float16,
bfloat16 and float32, ``out=``, and configs whose last row tile absorbs extra rows (``tail_m``) or runs as a shorter
tile when few rows are left for it (``short_m``), on groups whose last tile has fewer, as many and more rows left
than those bounds. The kernel runs in
a child process (grouped_interpreter_worker.py) because TRITON_INTERPRET must be set before Triton is first
imported. bfloat16 runs too: the launcher widens its operands to float32 before tl.dot on the CPU, where the
interpreter's bfloat16 tl.dot is wrong. Every case also runs as the core launches the kernel's device binary: offs
NULL in the 3-D form, the strides the core reads, the manifest's grid rule below the baked-in program count."""

import pytest
from _interpreter_runs import run_interpreter_worker

pytest.importorskip("triton")

from kabi.backends.triton._grouped import GROUPED_CONFIGS  # noqa: E402


def test_every_config_matches_the_reference_in_the_interpreter() -> None:
    report = run_interpreter_worker("grouped_interpreter_worker.py", timeout=900)
    assert not report["failures"], "\n".join(report["failures"])
    # (config, dtype) pairs (the first config in 3 dtypes, the others in float32) x 8 cases x 2 layouts, then the
    # worker's 2 LAST_TILE_CONFIGS in its 2 LAST_TILE_DTYPES x (8 + 3 LAST_TILE_CASES) x 2 layouts (not imported:
    # importing the worker sets TRITON_INTERPRET in this process)
    assert report["runs"] == (3 + len(GROUPED_CONFIGS) - 1) * 8 * 2 + 2 * 2 * (8 + 3) * 2
