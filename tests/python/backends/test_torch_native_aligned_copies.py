"""kabi.backends.torch_native.matmul_aligned_copies (torch.matmul over copies whose pitches are 16-byte aligned)
against the op's float64 reference on unaligned sizes, both weight layouts and a given ``out``, judged as the
correctness gate judges a candidate; and its supports predicate."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from kabi._base.declarations import op_spec
from kabi._selection.correctness import check_output, reference_output
from kabi.backends.torch_native import matmul_aligned_copies, matmul_aligned_copies_supports

_SHAPES = [(1, 4095, 4097 // 64), (7, 143, 41), (33, 17, 9), (64, 8, 8)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("b_column_major", [False, True], ids=["b_row_major", "b_column_major"])
@pytest.mark.parametrize("m,n,k", _SHAPES)
def test_matches_the_reference(m: int, n: int, k: int, b_column_major: bool, dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(m * 1000 + n + k)
    a = torch.randn(m, k, generator=generator).to(dtype)
    b = (torch.randn(n, k, generator=generator).to(dtype).t() if b_column_major
         else torch.randn(k, n, generator=generator).to(dtype))
    tolerance = op_spec("matmul").tolerance[str(dtype).removeprefix("torch.")]
    reference = reference_output(torch.matmul, [a, b])
    assert check_output(matmul_aligned_copies(a, b), reference, tolerance, expected_dtype=dtype) is None
    out = torch.full((m, n), float("nan"), dtype=dtype)
    assert matmul_aligned_copies(a, b, out=out) is out
    assert check_output(out, reference, tolerance, expected_dtype=dtype) is None


def test_supports_only_unaligned_problems_large_enough_to_pay() -> None:
    def verdict(m: int, n: int, k: int):
        return matmul_aligned_copies_supports(SimpleNamespace(dims={"M": m, "N": n, "K": k}))

    assert verdict(4093, 4099, 4091) is True
    assert verdict(4096, 4096, 4095) is True
    assert "already 16-byte aligned" in verdict(4096, 4104, 4096)
    assert "multiply-adds" in verdict(7, 13, 5)
