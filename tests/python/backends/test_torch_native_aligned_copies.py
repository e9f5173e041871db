"""kabi.backends.torch_native.matmul_aligned_copies (torch.matmul over copies whose pitches are 16-byte aligned)
against the op's float64 reference on unaligned sizes, both weight layouts and a given ``out``, judged as the
correctness gate judges a candidate; and its supports predicate."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from kabi._base.declarations import op_spec
from kabi._selection.correctness import check_output, reference_output
from kabi.backends.torch_native import (_torch_copy_into, aligned_product, matmul_aligned_copies,
                                       matmul_aligned_copies_supports, zero_padded)

# (M, N, K): both unaligned, only N unaligned (a needs no copy), only K unaligned (the product needs no copy back),
# both aligned.
_SHAPES = [(1, 4095, 4097 // 64), (7, 143, 41), (33, 17, 9), (33, 17, 16), (33, 16, 9), (64, 8, 8)]


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


@pytest.mark.parametrize("column_major", [False, True], ids=["row_major", "column_major"])
def test_padded_copies_hold_zeros_around_the_matrix_and_have_aligned_pitches(column_major: bool) -> None:
    matrix = torch.randn(13, 7).to(torch.bfloat16) + 3
    source = matrix.t().contiguous().t() if column_major else matrix
    padded = zero_padded(source, 16, 24, _torch_copy_into)
    assert padded.shape == (16, 24)
    pitch = padded.stride(1) if column_major else padded.stride(0)
    assert (padded.stride(0) == 1) == column_major and pitch * padded.element_size() % 16 == 0
    assert torch.equal(padded[:13, :7], matrix)
    # The buffer behind the copy, a line per row (per column when column-major), pitch included.
    lines = 24 if column_major else 16
    buffer = padded.as_strided((lines, pitch), (pitch, 1))
    outside = torch.ones_like(buffer, dtype=torch.bool)
    if column_major:
        outside[:7, :13] = False
    else:
        outside[:13, :7] = False
    assert not buffer[outside].any()


@pytest.mark.parametrize("b_column_major", [False, True], ids=["b_row_major", "b_column_major"])
@pytest.mark.parametrize("m,n,k,copied,compacted", [
    (33, 17, 9, {"a", "b"}, True),
    (33, 17, 16, {"b"}, True),
    (33, 16, 9, {"a", "b"}, False),
    (33, 16, 16, set(), False),
])
def test_only_what_needs_padding_is_copied(m: int, n: int, k: int, copied: set, compacted: bool,
                                           b_column_major: bool) -> None:
    a = torch.randn(m, k, dtype=torch.float16)
    b = torch.randn(n, k, dtype=torch.float16).t() if b_column_major else torch.randn(k, n, dtype=torch.float16)
    names = {a.data_ptr(): "a", b.data_ptr(): "b"}
    padded_operands, compactions = [], []

    def copy_into(source, target):
        # An operand's copy starts at its own data; the copy back reads the product.
        if source.data_ptr() in names:
            padded_operands.append(names[source.data_ptr()])
        else:
            compactions.append(source.shape)
        return _torch_copy_into(source, target)

    result = aligned_product(a, b, None, copy_into)
    assert set(padded_operands) == copied and len(padded_operands) == len(copied)
    assert bool(compactions) == compacted
    assert result.shape == (m, n) and result.is_contiguous()
    torch.testing.assert_close(result.double(), a.double() @ b.double(), rtol=2e-3, atol=2e-3)


def test_a_misaligned_view_is_copied_though_its_sizes_are_aligned() -> None:
    storage = torch.randn(33 * 16 + 1, dtype=torch.float16)
    a = storage[1:].view(33, 16)  # 2 bytes past an aligned address
    b = torch.randn(16, 16, dtype=torch.float16)
    padded_operands = []

    def copy_into(source, target):
        padded_operands.append(source.data_ptr())
        return _torch_copy_into(source, target)

    aligned_product(a, b, None, copy_into)
    assert padded_operands == [a.data_ptr()]
