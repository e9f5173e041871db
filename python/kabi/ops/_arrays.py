"""Any array with the DLPack protocol in, the same kind of array out, sharing memory both ways.

kabi's ops run on torch tensors. An argument that is not a tensor but has ``__dlpack__`` (a numpy array on CPU, a
CuPy or JAX array on a GPU, ...) is imported with ``torch.from_dlpack``, which shares the array's memory. The result
goes back through the array library's own ``from_dlpack`` (from the array API's ``__array_namespace__``, else the
array type's top-level module), again without a copy. The result is of the kind of the first input that is not a
torch tensor; an ``out=`` array is written in place and returned. An argument with no ``__dlpack__`` is left as it
is, so the op front's own error for it (naming the argument and its type) still fires.

Example::

    >>> import numpy as np
    >>> a, b = np.random.rand(4, 3), np.random.rand(3, 2)
    >>> call_with_arrays(kabi.ops.matmul, "matmul", ("a", "b"), (a, b), None)  # a numpy.ndarray of shape (4, 2)
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Sequence

import torch

from .._base.errors import ArgumentTypeError

__all__ = ["array_result", "call_with_arrays", "has_foreign_array", "to_tensor"]

# Array type -> its library's from_dlpack, looked up once per type.
_importers: dict[type, Callable[[Any], Any]] = {}


def _is_foreign(value: Any) -> bool:
    return not isinstance(value, torch.Tensor) and hasattr(type(value), "__dlpack__")


def has_foreign_array(inputs: Sequence[Any], out: Any = None) -> bool:
    """Whether any argument is a DLPack array other than a torch tensor (the op front then calls
    :func:`call_with_arrays`)."""
    return _is_foreign(out) or any(_is_foreign(value) for value in inputs)


def to_tensor(value: Any, argument: str, op: str) -> torch.Tensor:
    """A torch tensor sharing ``value``'s memory; ``ArgumentTypeError`` naming the argument when the array cannot
    be shared (e.g. a non-native byte order)."""
    try:
        return torch.from_dlpack(value)
    except (BufferError, RuntimeError, TypeError, ValueError) as error:
        kind = f"{type(value).__module__}.{type(value).__qualname__}"
        raise ArgumentTypeError(
            f"{op}: {argument} ({kind}) cannot be shared with torch through DLPack: {error}"
        ) from error


def _importer(array_type: type, like: Any) -> Callable[[Any], Any]:
    importer = _importers.get(array_type)
    if importer is not None:
        return importer
    namespace = like.__array_namespace__() if hasattr(like, "__array_namespace__") else None
    if namespace is None or not hasattr(namespace, "from_dlpack"):
        namespace = sys.modules.get(array_type.__module__.partition(".")[0])
    importer = getattr(namespace, "from_dlpack", None)
    if importer is None:
        raise ArgumentTypeError(
            f"kabi cannot return a {array_type.__module__}.{array_type.__qualname__}: its library has no from_dlpack "
            f"(pass a torch.Tensor, or an array whose library implements the array API)"
        )
    _importers[array_type] = importer
    return importer


def array_result(result: Any, like: Any) -> Any:
    """``result`` (a tensor or a tuple of tensors) as arrays of ``like``'s kind, sharing memory."""
    importer = _importer(type(like), like)
    if isinstance(result, tuple):
        return tuple(importer(tensor) for tensor in result)
    return importer(result)


def call_with_arrays(
    function: Callable[..., Any], op: str, names: Sequence[str], inputs: Sequence[Any], out: Any
) -> Any:
    """Call the op ``function`` on tensors sharing the memory of the DLPack arrays among ``inputs`` and ``out``;
    return ``out`` when given, else the result as the first foreign input's kind of array."""
    tensors = tuple(
        to_tensor(value, names[index] if index < len(names) else f"input {index}", op) if _is_foreign(value) else value
        for index, value in enumerate(inputs)
    )
    if out is not None:
        function(*tensors, out=to_tensor(out, "out", op) if _is_foreign(out) else out)
        return out
    like = next(value for value in inputs if _is_foreign(value))
    return array_result(function(*tensors), like)
