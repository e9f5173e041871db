"""The correctness gate on the dtypes beyond floating point: integer results compared exactly against a reference
that wraps as the dtype does, complex results compared in complex128 on inputs with both parts random."""

import pytest
import torch

from kabi._base.declarations import op_spec
from kabi._selection.correctness import check_output, reference_output
from kabi.ops._inputs import inputs_like

INTEGER_DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


@pytest.mark.parametrize("dtype", INTEGER_DTYPES, ids=str)
def test_integer_products_must_be_exact(dtype):
    a, b = inputs_like("matmul", [torch.empty(16, 24, dtype=dtype), torch.empty(24, 8, dtype=dtype)])
    reference = reference_output(torch.matmul, [a, b])
    assert reference.dtype == dtype
    tolerance = op_spec("matmul").tolerance[str(dtype).removeprefix("torch.")]
    assert check_output(torch.matmul(a, b), reference, tolerance, dtype) is None
    off_by_one = torch.matmul(a, b)
    off_by_one[3, 5] += 1
    assert check_output(off_by_one, reference, tolerance, dtype) == "wrong result: 1 elements differ from the exact reference"


def test_integer_reference_wraps_as_the_dtype_does():
    # 100 * 2 + 100 * 1 = 300 overflows int8 and uint8: the exact product in the dtype is 300 mod 256.
    a = torch.tensor([[100, 100]], dtype=torch.int8)
    b = torch.tensor([[2], [1]], dtype=torch.int8)
    assert reference_output(torch.matmul, [a, b]).item() == 300 - 256
    assert reference_output(torch.matmul, [a.to(torch.uint8), b.to(torch.uint8)]).item() == 300 - 256


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_complex_products_are_compared_in_complex128(dtype):
    a, b = inputs_like("matmul", [torch.empty(16, 24, dtype=dtype), torch.empty(24, 8, dtype=dtype)])
    # Fresh complex inputs have imaginary parts, so a kernel that drops or conjugates them cannot pass.
    assert bool((a.imag != 0).any()) and bool((b.imag != 0).any())
    reference = reference_output(torch.matmul, [a, b])
    assert reference.dtype == torch.complex128
    tolerance = op_spec("matmul").tolerance[str(dtype).removeprefix("torch.")]
    assert check_output(torch.matmul(a, b), reference, tolerance, dtype) is None
    assert check_output(torch.matmul(a.conj(), b), reference, tolerance, dtype).startswith("wrong result: norm error")
    assert check_output(torch.matmul(a.real, b.real).to(dtype), reference, tolerance, dtype).startswith("wrong result")
