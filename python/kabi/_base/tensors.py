"""How kabi sees an array: torch dtypes and devices as DLPack codes, and the raw descriptor the binding takes.

A descriptor is the tuple ``(data_ptr, shape, strides, dtype_code, dtype_bits, device_type, device_index)``; the
binding builds a ``DLTensor`` from it in C++, so no DLPack capsule is made on the way to a native kernel.

Inputs reach the core as ``torch.Tensor``: other DLPack arrays are shared with torch before validation
(``kabi.ops._arrays``, called from the op front's miss path), and ``check_array`` names the argument and its type for
anything else.

Example::

    >>> import torch
    >>> from kabi._base.tensors import descriptor
    >>> descriptor(torch.ones(2, 3))[1:]
    ((2, 3), (3, 1), 2, 32, 1, 0)
"""

from __future__ import annotations

from typing import Any

import torch

from .. import _core
from .errors import ArgumentTypeError, InvalidArgumentError, UnsupportedDtypeError

__all__ = [
    "DEVICE_TYPES",
    "check_array",
    "descriptor",
    "described_facts",
    "device_type_code",
    "dispatch_facts",
    "device_type_name",
    "dtype_name",
    "meta_descriptor",
    "torch_device",
]

# DLPack DLDeviceType codes of the device types torch names.
DEVICE_TYPES: dict[str, int] = {
    "cpu": 1,
    "cuda": 10 if torch.version.hip else 2,
    "mps": 8,
    "xpu": 14,
}
_DEVICE_NAMES: dict[int, str] = {1: "cpu", 2: "cuda", 8: "mps", 10: "rocm", 14: "xpu", 12: "ext_dev"}

# DLPack (type code, bits) of each torch dtype kabi can describe; whether an op accepts it is the core's call.
_DTYPE_CODES: dict[torch.dtype, tuple[int, int]] = {
    torch.bool: (6, 8),
    torch.uint8: (1, 8),
    torch.int8: (0, 8),
    torch.int16: (0, 16),
    torch.int32: (0, 32),
    torch.int64: (0, 64),
    torch.float16: (2, 16),
    torch.bfloat16: (4, 16),
    torch.float32: (2, 32),
    torch.float64: (2, 64),
    torch.complex64: (5, 64),
    torch.complex128: (5, 128),
    torch.float8_e4m3fn: (10, 8),
    torch.float8_e5m2: (12, 8),
}

# The torch dtype of each name in the core's dtype vocabulary (kabi names its dtypes as torch does).
_DTYPES_BY_NAME: dict[str, torch.dtype] = {
    name: dtype for dtype in _DTYPE_CODES if (name := str(dtype).removeprefix("torch.")) in _core.DTYPES
}


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"``."""
    return str(dtype).removeprefix("torch.")


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a kabi dtype name (``"bfloat16"``); ``InvalidArgumentError`` for an unknown name."""
    try:
        return _DTYPES_BY_NAME[name]
    except KeyError:
        raise InvalidArgumentError(
            f"unknown dtype {name!r}; expected one of {', '.join(_DTYPES_BY_NAME)}"
        ) from None


def known_torch_dtype(name: str) -> torch.dtype | None:
    """The torch dtype of a kabi dtype name, or None for a name outside the vocabulary."""
    return _DTYPES_BY_NAME.get(name)


def device_type_code(name: str) -> int:
    """The DLPack device type of a torch device type name (``"cuda"`` -> 2)."""
    try:
        return DEVICE_TYPES[name]
    except KeyError:
        raise InvalidArgumentError(
            f"kabi has no device type {name!r}; expected one of {', '.join(DEVICE_TYPES)}"
        ) from None


def device_type_name(code: int) -> str:
    """The name of a DLPack device type (2 -> ``"cuda"``)."""
    return _DEVICE_NAMES.get(code, f"device type {code}")


def torch_device(device_type: int, device_index: int) -> torch.device:
    """The torch device of a DLPack (type, index) pair."""
    name = "cuda" if device_type in (2, 10) else device_type_name(device_type)
    return torch.device(name, device_index) if name != "cpu" else torch.device("cpu")


def check_array(value: Any, argument: str, op: str) -> torch.Tensor:
    """Return ``value`` as a tensor, or raise ``ArgumentTypeError`` naming the argument and what it got."""
    if isinstance(value, torch.Tensor):
        return value
    raise ArgumentTypeError(
        f"{op}: {argument} must be a torch.Tensor, got {type(value).__module__}.{type(value).__qualname__}"
    )


def _codes(tensor: torch.Tensor, argument: str, op: str) -> tuple[int, int, int, int]:
    try:
        dtype_code, dtype_bits = _DTYPE_CODES[tensor.dtype]
    except KeyError:
        raise UnsupportedDtypeError(f"{op}: {argument} has dtype {dtype_name(tensor.dtype)}, which kabi cannot describe") from None
    device = tensor.device
    try:
        device_type = DEVICE_TYPES[device.type]
    except KeyError:
        raise InvalidArgumentError(
            f"{op}: {argument} is on device {device.type!r}, where kabi runs nothing "
            f"(kabi runs on {', '.join(DEVICE_TYPES)})"
        ) from None
    return dtype_code, dtype_bits, device_type, device.index or 0


def descriptor(tensor: torch.Tensor, argument: str = "tensor", op: str = "kabi") -> tuple:
    """The raw descriptor the binding turns into a DLTensor (see the module docstring)."""
    dtype_code, dtype_bits, device_type, device_index = _codes(tensor, argument, op)
    return (tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()), dtype_code, dtype_bits, device_type, device_index)


def dispatch_facts(tensor: Any) -> tuple:
    """What a decision depends on, for a tensor the decision table cannot read in C (a subclass, which may define its
    shape, strides or device in Python): ``(shape, strides, dtype_code, dtype_bits, device_type, device_index,
    requires_grad)``. Raises for anything else, which then takes the miss path."""
    if not isinstance(tensor, torch.Tensor):
        raise ArgumentTypeError(f"a {type(tensor).__name__} is not a tensor")
    dtype_code, dtype_bits, device_type, device_index = _codes(tensor, "tensor", "kabi")
    return (tuple(tensor.shape), tuple(tensor.stride()), dtype_code, dtype_bits, device_type, device_index,
            tensor.requires_grad)


def described_facts(descriptor: tuple) -> tuple[tuple[int, ...], torch.dtype, torch.device]:
    """(shape, dtype, device) of a descriptor."""
    _, shape, _, dtype_code, dtype_bits, device_type, device_index = descriptor
    dtype = next(dtype for dtype, codes in _DTYPE_CODES.items() if codes == (dtype_code, dtype_bits))
    return tuple(shape), dtype, torch_device(device_type, device_index)


def meta_descriptor(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> tuple:
    """A descriptor with no data (pointer 0) for a dense row-major tensor: enough for selection and explain."""
    strides = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    dtype_code, dtype_bits = _DTYPE_CODES[dtype]
    return (0, tuple(shape), tuple(reversed(strides)), dtype_code, dtype_bits, device_type_code(device.type), device.index or 0)
