"""Inputs and checks shared by the grouped_mm tests: the cases the issue names (empty groups, a single group, every
row in one group, E=1, T=0, rows past the last offset, both weight layouts, the 3-D form), fresh random values on
each call, and the op's own gate check against its float64 reference with the tolerances of
registry/ops/grouped_mm.toml."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kabi._base.declarations import op_specs
from kabi._selection.correctness import check_output, reference_output
from kabi.ops import _references

TOLERANCE = op_specs()["grouped_mm"].tolerance
# Rows of 16-byte multiples in every dtype (torch's grouped GEMM takes only those) and sizes that are not (it then
# loops over the groups); neither a multiple of the kernels' tiles.
SIZES = ((24, 8), (12, 10))
K, N = SIZES[0]


@dataclass(frozen=True)
class GroupedCase:
    """One problem: ``group_rows`` the rows of each group (2-D form), or ``rows_per_group`` with ``groups`` (3-D
    form, ``group_rows`` None); ``tail`` rows past the last offset."""

    name: str
    group_rows: tuple[int, ...] | None = None
    groups: int = 0
    rows_per_group: int = 0
    tail: int = 0


GROUPED_CASES = (
    GroupedCase("empty-groups", group_rows=(3, 0, 5, 0, 0, 2)),
    GroupedCase("single-group", group_rows=(9,)),
    GroupedCase("all-rows-in-one-group", group_rows=(0, 0, 13, 0)),
    GroupedCase("no-rows", group_rows=(0, 0, 0)),
    GroupedCase("rows-past-the-last-offset", group_rows=(4, 1, 3), tail=5),
    GroupedCase("many-rows", group_rows=(70, 3, 0, 61)),
    GroupedCase("3d", groups=3, rows_per_group=7),
    GroupedCase("3d-one-group", groups=1, rows_per_group=5),
)


def make_inputs(case: GroupedCase, dtype: torch.dtype, *, transposed_weight: bool, k: int = K, n: int = N,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Fresh standard-normal x and w (w the transposed view of an [E, N, K] tensor when ``transposed_weight``) and
    the int32 offsets of the case (None in the 3-D form)."""
    groups = len(case.group_rows) if case.group_rows is not None else case.groups
    if transposed_weight:
        w = torch.randn(groups, n, k, generator=generator).to(dtype).mT
    else:
        w = torch.randn(groups, k, n, generator=generator).to(dtype)
    if case.group_rows is None:
        return torch.randn(groups, case.rows_per_group, k, generator=generator).to(dtype), w, None
    rows = sum(case.group_rows) + case.tail
    offs = torch.tensor(case.group_rows, dtype=torch.int64).cumsum(0).to(torch.int32)
    return torch.randn(rows, k, generator=generator).to(dtype), w, offs


def expected(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor | None) -> torch.Tensor:
    return reference_output(_references.grouped_mm, [x, w, offs])


def assert_matches(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor | None) -> None:
    """out against the op's float64 reference within the op's tolerance for x's dtype (the gate's own check)."""
    verdict = check_output(out, expected(x, w, offs), TOLERANCE[str(x.dtype).removeprefix("torch.")],
                           expected_dtype=x.dtype)
    assert verdict is None, verdict
