"""The correctness gate on the dtypes beyond floating point: integer results compared exactly against a reference
that wraps as the dtype does, complex results compared in complex128 on inputs with both parts random."""

import pytest
import torch

from kabi._base.declarations import op_spec
from kabi._selection.correctness import check_output, reference_output
from kabi.ops import _references
from kabi.ops._inputs import inputs_like
from kabi.ops._references import widened, widens_its_own_inputs

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


def test_a_reference_that_widens_its_own_inputs_gets_them_as_given():
    seen = []

    @widens_its_own_inputs
    def piecewise(a, b):
        seen.extend([a.dtype, b.dtype])
        return widened(a) @ widened(b)

    a, b = torch.randn(4, 3).to(torch.bfloat16), torch.randn(3, 2).to(torch.bfloat16)
    result = reference_output(piecewise, [a, b])
    assert seen == [torch.bfloat16, torch.bfloat16]
    assert result.dtype == torch.float64
    assert torch.equal(result, a.double() @ b.double())
    seen.clear()
    reference_output(lambda x, y: (seen.extend([x.dtype, y.dtype]), x @ y)[1], [a, b])
    assert seen == [torch.float64, torch.float64]


@pytest.mark.parametrize("transposed", [False, True])
def test_grouped_reference_widens_one_group_at_a_time_and_equals_the_whole_product(transposed):
    generator = torch.Generator().manual_seed(3)
    w = torch.randn(3, 6, 5, generator=generator).to(torch.bfloat16)
    w = w.mT.contiguous().mT if transposed else w
    x = torch.randn(9, 6, generator=generator).to(torch.bfloat16)
    offs = torch.tensor([2, 2, 7], dtype=torch.int32)  # an empty group, and two rows past the last offset
    result = reference_output(_references.grouped_mm, [x, w, offs])
    wide_x, wide_w = x.double(), w.double()
    expected = torch.cat([wide_x[0:2] @ wide_w[0], wide_x[2:7] @ wide_w[2], torch.zeros(2, 5, dtype=torch.float64)])
    assert result.dtype == torch.float64
    torch.testing.assert_close(result, expected, rtol=1e-12, atol=1e-12)
    batched_x = torch.randn(3, 4, 6, generator=generator).to(torch.bfloat16)
    torch.testing.assert_close(reference_output(_references.grouped_mm, [batched_x, w, None]),
                               torch.bmm(batched_x.double(), wide_w), rtol=1e-12, atol=1e-12)


def test_a_check_reads_its_values_back_from_the_device_in_two_transfers(monkeypatch):
    """Each value read back waits for the device: a check that passes reads its counts once and its errors once."""
    reads = []
    for method in ("tolist", "item", "__bool__", "__float__", "__int__"):
        original = getattr(torch.Tensor, method)
        monkeypatch.setattr(torch.Tensor, method,
                            lambda self, *args, _original=original, _name=method: reads.append(_name) or
                            _original(self, *args))
    a, b = torch.randn(8, 6, dtype=torch.float64), torch.randn(6, 5, dtype=torch.float64)
    tolerance = op_spec("matmul").tolerance["float64"]
    assert check_output(a @ b, reference_output(torch.matmul, [a, b]), tolerance) is None
    assert reads == ["tolist", "tolist"]
