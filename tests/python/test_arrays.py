"""Any DLPack array: numpy in, numpy out, sharing memory both ways; out= arrays written in place; another array
library found through its array namespace; clear errors for what cannot be shared or is no array at all."""

import types

import numpy as np
import pytest
import torch

import kabi
from kabi.ops._arrays import array_result, call_with_arrays, has_foreign_array, to_tensor

rng = np.random.default_rng()


def test_numpy_in_numpy_out(untuned):
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((2, 3, 5))
    result = kabi.ops.matmul(a, b)
    assert isinstance(result, np.ndarray)
    assert result.dtype == np.float64 and result.shape == (2, 4, 5)
    np.testing.assert_allclose(result, a @ b, rtol=1e-12, atol=1e-12)


def test_inputs_reach_the_kernel_without_a_copy(untuned):
    a = rng.standard_normal((6, 4)).astype(np.float32)
    b = rng.standard_normal((5, 4)).astype(np.float32).T  # a column-major view: strides are kept, not compacted
    seen = []

    def kernel(a_tensor, b_tensor):
        seen.append((a_tensor.data_ptr(), b_tensor.data_ptr(), b_tensor.stride()))
        return torch.matmul(a_tensor, b_tensor)

    result = call_with_arrays(kernel, "matmul", ("a", "b"), (a, b), None)
    assert seen == [(a.ctypes.data, b.ctypes.data, (1, 4))]
    np.testing.assert_allclose(result, a @ b, rtol=1e-5, atol=1e-5)


def test_result_shares_the_kernels_output_memory():
    tensor = torch.randn(3, 4)
    result = array_result(tensor, rng.standard_normal(2))
    assert isinstance(result, np.ndarray)
    assert result.ctypes.data == tensor.data_ptr()
    np.testing.assert_array_equal(result, tensor.numpy())


def test_out_array_is_written_in_place_and_returned(untuned):
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((3, 5))
    out = np.full((4, 5), np.nan)
    assert kabi.ops.matmul(a, b, out=out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)


def test_mixed_torch_and_numpy_inputs_return_numpy(untuned):
    a, b = torch.randn(4, 3, dtype=torch.float64), rng.standard_normal((3, 5))
    result = kabi.ops.matmul(a, b)
    assert isinstance(result, np.ndarray)
    np.testing.assert_allclose(result, a.numpy() @ b, rtol=1e-12, atol=1e-12)


def test_arrays_run_through_kabi_dispatch(spy):
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((3, 5))
    kabi.ops.matmul(a, b)
    kabi.ops.matmul(a, b)
    assert spy.calls == [((4, 3), (3, 5))] * 2


class NamespacedArray:
    """An array of a library kabi has never heard of: DLPack plus the array API's namespace, nothing else."""

    namespace = types.SimpleNamespace(from_dlpack=lambda value: NamespacedArray(np.from_dlpack(value)))

    def __init__(self, data):
        self.data = data

    def __dlpack__(self, **options):
        return self.data.__dlpack__(**options)

    def __dlpack_device__(self):
        return self.data.__dlpack_device__()

    def __array_namespace__(self, api_version=None):
        return self.namespace


def test_any_array_library_round_trips_through_its_namespace(untuned):
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((3, 5))
    result = kabi.ops.matmul(NamespacedArray(a), NamespacedArray(b))
    assert isinstance(result, NamespacedArray)
    np.testing.assert_allclose(result.data, a @ b, rtol=1e-12, atol=1e-12)


def test_objects_without_dlpack_keep_the_fronts_error(untuned):
    assert not has_foreign_array(([[1.0, 2.0]], torch.randn(2, 2)))
    with pytest.raises(kabi.ArgumentTypeError, match="b must be a torch.Tensor, got builtins.list"):
        kabi.ops.matmul(rng.standard_normal((2, 2)), [[1.0, 2.0], [3.0, 4.0]])


def test_array_that_cannot_be_shared_names_the_argument():
    big_endian = np.arange(6, dtype=">f8").reshape(2, 3)
    message = r"matmul: b \(numpy.ndarray\) cannot be shared with torch through DLPack"
    with pytest.raises(kabi.ArgumentTypeError, match=message):
        to_tensor(big_endian, "b", "matmul")


def _cuda_or_skip() -> None:
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


@pytest.mark.gpu
def test_cupy_in_cupy_out(untuned):
    cupy = pytest.importorskip("cupy")
    _cuda_or_skip()
    a = cupy.random.standard_normal((64, 32), dtype=cupy.float32)
    b = cupy.random.standard_normal((32, 16), dtype=cupy.float32)
    result = kabi.ops.matmul(a, b)
    assert isinstance(result, cupy.ndarray)
    cupy.testing.assert_allclose(result, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_cupy_arrays_reach_the_kernel_and_come_back_without_a_copy(spy):
    cupy = pytest.importorskip("cupy")
    _cuda_or_skip()
    a = cupy.random.standard_normal((48, 40), dtype=cupy.float32)
    b = cupy.random.standard_normal((24, 40), dtype=cupy.float32).T  # column-major: strides kept, not compacted
    result = kabi.ops.matmul(a, b)
    a_pointer, b_pointer, result_pointer = spy.pointers[-1]
    assert (a_pointer, b_pointer) == (a.data.ptr, b.data.ptr)
    assert isinstance(result, cupy.ndarray) and result.data.ptr == result_pointer
    cupy.testing.assert_allclose(result, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_cupy_out_is_written_in_place(untuned):
    cupy = pytest.importorskip("cupy")
    _cuda_or_skip()
    a = cupy.random.standard_normal((16, 8), dtype=cupy.float32)
    b = cupy.random.standard_normal((8, 12), dtype=cupy.float32)
    out = cupy.full((16, 12), cupy.nan, dtype=cupy.float32)
    assert kabi.ops.matmul(a, b, out=out) is out
    cupy.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


def test_jax_in_jax_out(untuned):
    jax_numpy = pytest.importorskip("jax.numpy")
    a = jax_numpy.asarray(rng.standard_normal((4, 3)).astype(np.float32))
    b = jax_numpy.asarray(rng.standard_normal((3, 5)).astype(np.float32))
    result = kabi.ops.matmul(a, b)
    assert type(result) is type(a)
    np.testing.assert_allclose(np.asarray(result), np.asarray(a) @ np.asarray(b), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("platform", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_jax_arrays_round_trip_without_a_copy(spy, monkeypatch, platform):
    # JAX takes most of the GPU's memory at start-up unless told not to; torch shares the device in this process.
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    jax = pytest.importorskip("jax")
    if platform == "gpu":
        _cuda_or_skip()
    try:
        devices = jax.devices(platform)
    except RuntimeError:
        pytest.skip(f"JAX has no {platform} backend here")
    a = jax.device_put(rng.standard_normal((32, 24)).astype(np.float32), devices[0])
    b = jax.device_put(rng.standard_normal((24, 16)).astype(np.float32), devices[0])
    result = kabi.ops.matmul(a, b)
    a_pointer, b_pointer, result_pointer = spy.pointers[-1]
    assert (a_pointer, b_pointer) == (a.unsafe_buffer_pointer(), b.unsafe_buffer_pointer())
    assert type(result) is type(a) and result.devices() == {devices[0]}
    assert result.unsafe_buffer_pointer() == result_pointer
    np.testing.assert_allclose(np.asarray(result), np.asarray(a) @ np.asarray(b), rtol=1e-4, atol=1e-4)
