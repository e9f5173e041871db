"""Every validation error of the op front: the exception class and a message that names the argument and what
was expected."""

from __future__ import annotations

import pytest
import torch

import kabi

pytestmark = pytest.mark.usefixtures("untuned")

matmul = kabi.ops.matmul


def test_dtype_mismatch_names_both_dtypes():
    with pytest.raises(kabi.UnsupportedDtypeError, match="a is float32 but b is float64") as error:
        matmul(torch.randn(2, 3), torch.randn(3, 4, dtype=torch.float64))
    assert isinstance(error.value, TypeError)


def test_shape_mismatch_prints_both_shapes():
    with pytest.raises(kabi.InvalidArgumentError) as error:
        matmul(torch.randn(2, 3), torch.randn(5, 4))
    message = str(error.value)
    assert "[5, 4]" in message and "[2, 3]" in message
    assert isinstance(error.value, ValueError)


def test_batch_dimensions_that_do_not_broadcast():
    with pytest.raises(kabi.InvalidArgumentError, match=r"\[2, 2, 3\].*\[3, 3, 4\]"):
        matmul(torch.randn(2, 2, 3), torch.randn(3, 3, 4))


def test_device_mismatch_names_each_device():
    with pytest.raises(kabi.InvalidArgumentError, match="a on cpu, b on meta"):
        matmul(torch.randn(2, 3), torch.randn(3, 4, device="meta"))


def test_a_device_kabi_cannot_run_on():
    with pytest.raises(kabi.InvalidArgumentError, match="device 'meta'"):
        matmul(torch.randn(2, 3, device="meta"), torch.randn(3, 4, device="meta"))


@pytest.mark.parametrize("dtype", [torch.float8_e5m2, torch.uint16, torch.bool], ids=str)
def test_unsupported_dtype(dtype):
    a = torch.ones(2, 3, dtype=dtype)
    b = torch.ones(3, 4, dtype=dtype)
    with pytest.raises(kabi.UnsupportedDtypeError) as error:
        matmul(a, b)
    assert isinstance(error.value, TypeError)
    assert "matmul" in str(error.value)


def test_a_dtype_kabi_lacks_is_named_as_the_caller_knows_it():
    # bool reaches the core (DLPack describes it; kabi has no bit for it); uint16 and the like are refused before it.
    with pytest.raises(kabi.UnsupportedDtypeError, match="matmul: a is bool, a dtype kabi does not support"):
        matmul(torch.ones(2, 3, dtype=torch.bool), torch.ones(3, 4, dtype=torch.bool))


def test_float8_message_lists_the_supported_dtypes():
    with pytest.raises(kabi.UnsupportedDtypeError, match="float8_e5m2.*float16, bfloat16, float32, float64, int8"):
        matmul(torch.ones(2, 3, dtype=torch.float8_e5m2), torch.ones(3, 4, dtype=torch.float8_e5m2))


@pytest.mark.parametrize("value", [[[1.0, 2.0]], 3.0, None, "a"], ids=["list", "float", "None", "str"])
def test_non_tensor_input_names_the_argument_and_its_type(value):
    with pytest.raises(kabi.ArgumentTypeError, match=f"b must be a torch.Tensor, got builtins.{type(value).__name__}"):
        matmul(torch.randn(2, 1), value)


def test_an_object_without_dlpack_is_named():
    class Matrix:
        shape = (2, 2)

    with pytest.raises(TypeError, match="a must be a torch.Tensor, got .*Matrix"):
        matmul(Matrix(), torch.randn(2, 2))


@pytest.mark.parametrize("count", [0, 1, 3])
def test_wrong_number_of_inputs(count):
    with pytest.raises(kabi.ArgumentTypeError, match=f"matmul takes 2 inputs \\(a, b\\), got {count}"):
        matmul(*[torch.randn(2, 2) for _ in range(count)])


def test_zero_dimensional_input():
    with pytest.raises(kabi.InvalidArgumentError, match=r"a has shape \[\] \(rank 0\); expected \[\.\.\., M, K\] or a vector"):
        matmul(torch.tensor(3.0), torch.randn(3, 4))


def test_wrong_out_shape_on_a_miss_and_on_a_hit():
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    with pytest.raises(kabi.InvalidArgumentError, match=r"out has shape \[3, 3\].*\[2, 4\]"):
        matmul(a, b, out=torch.empty(3, 3))
    matmul(a, b)  # now cached
    with pytest.raises(kabi.InvalidArgumentError, match=r"out has shape \[3, 3\].*expected shape \[2, 4\]"):
        matmul(a, b, out=torch.empty(3, 3))


def test_wrong_out_dtype_on_a_miss_and_on_a_hit():
    a, b = torch.randn(2, 5), torch.randn(5, 4)
    with pytest.raises(kabi.UnsupportedDtypeError, match="out is float64"):
        matmul(a, b, out=torch.empty(2, 4, dtype=torch.float64))
    matmul(a, b)
    with pytest.raises(kabi.InvalidArgumentError, match="dtype float64.*expected shape \\[2, 4\\], dtype float32"):
        matmul(a, b, out=torch.empty(2, 4, dtype=torch.float64))


def test_out_that_is_not_a_tensor():
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    with pytest.raises(kabi.ArgumentTypeError, match="out must be a torch.Tensor, got builtins.list"):
        matmul(a, b, out=[])
    matmul(a, b)
    with pytest.raises(kabi.ArgumentTypeError, match="out must be a torch.Tensor"):
        matmul(a, b, out=[])


def test_errors_are_not_cached():
    """A failed call leaves nothing behind: the same bad call fails again the same way."""
    for _ in range(2):
        with pytest.raises(kabi.InvalidArgumentError):
            matmul(torch.randn(2, 3), torch.randn(4, 4))


def test_every_error_is_a_kabi_error():
    for cls in (kabi.InvalidArgumentError, kabi.UnsupportedDtypeError, kabi.ArgumentTypeError, kabi.NotFoundError,
                kabi.NoEligibleKernelError, kabi.AlreadyExistsError, kabi.KernelError, kabi.ConstraintViolatedError):
        assert issubclass(cls, kabi.KabiError)
    assert issubclass(kabi.KernelError, RuntimeError)
    assert issubclass(kabi.NotFoundError, LookupError)
    assert issubclass(kabi.ConstraintViolatedError, ValueError)
