"""From a problem key back to a problem: representative inputs that the core describes with the same tuning key.

An op's tuning key spec (``[tuning] key`` in ``registry/ops/<op>.toml``, e.g. ``"dtype,layout,batch,M:pow2<=4096,N,K"``)
says which facts of a call a decision is remembered under; the core formats them into a problem key such as
``float32|contiguous,col_strided|1|64|16|32``. ``kabi cache retune`` needs the way back: inputs whose key is that
key, to measure the problem again. A bucketed dimension takes its bucket's value (the key holds nothing finer); a
field the spec leaves out takes the plainest value (contiguous inputs, no batch); dtype and every dimension the
inputs have must be in the spec.

Example::

    >>> inputs = representative_inputs("matmul", "float32|contiguous,col_strided|3|64|16|32", torch.device("cpu"))
    >>> [(tuple(t.shape), t.is_contiguous()) for t in inputs]
    [((3, 64, 32), True), ((3, 32, 16), False)]
"""

from __future__ import annotations

from typing import Sequence

import torch

from .. import _core
from .._base.errors import InvalidArgumentError
from .._base.tensors import descriptor, torch_dtype
from ..ops._schema import op_schema

__all__ = ["representative_inputs"]


def _field_names(spec: str) -> list[str]:
    """The field of each item of a tuning key spec, without its bucket: ``"M:pow2<=4096"`` -> ``"M"``."""
    return [item.split(":")[0].strip() for item in spec.split(",")]


def _parse_key(op: str, spec: str, key: str) -> dict[str, str]:
    names = _field_names(spec)
    values = key.split("|")
    if len(values) != len(names):
        raise InvalidArgumentError(f"problem key {key!r} of {op} has {len(values)} fields; its tuning key "
                                   f"{spec!r} has {len(names)}")
    return dict(zip(names, values))


def _integer(op: str, key: str, field: str, text: str) -> int:
    if not text.isdigit():
        raise InvalidArgumentError(f"problem key {key!r} of {op}: {field} must be a non-negative integer, got {text!r}")
    return int(text)


def _tensor(shape: Sequence[int], layout: str, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A tensor of ``shape`` in the layout class ``layout`` (of its last two dimensions), values uninitialized."""
    *batch, rows, columns = shape
    if layout == "contiguous":
        return torch.empty(shape, dtype=dtype, device=device)
    if layout == "row_strided":
        return torch.empty(*batch, rows, columns + 1, dtype=dtype, device=device)[..., :columns]
    if layout == "col_strided":
        return torch.empty(*batch, columns, rows, dtype=dtype, device=device).transpose(-1, -2)
    if layout == "general":
        return torch.empty(*batch, rows, 2 * columns, dtype=dtype, device=device)[..., ::2]
    raise InvalidArgumentError(f"unknown layout class {layout!r}; expected contiguous, row_strided, col_strided or "
                               "general")


def representative_inputs(op: str, key: str, device: torch.device) -> list[torch.Tensor]:
    """Inputs of ``op`` on ``device`` that the core describes with problem key ``key``.

    Raises ``InvalidArgumentError`` naming the field when the key does not fit the op's tuning key spec, or when no
    inputs of this op have that key (a layout class that a dimension of size 1 cannot show, for one).
    """
    spec, schema = _core.op_info(op)["tuning_key"], op_schema(op)
    fields = _parse_key(op, spec, key)
    if "dtype" not in fields:
        raise InvalidArgumentError(f"{op}: its tuning key {spec!r} has no dtype, so a problem cannot be rebuilt from it")
    dtype = torch_dtype(fields["dtype"])
    layouts = fields["layout"].split(",") if "layout" in fields else ["contiguous"] * len(schema.inputs)
    if len(layouts) != len(schema.inputs):
        raise InvalidArgumentError(f"problem key {key!r} of {op}: layout names {len(layouts)} inputs, the op has "
                                   f"{len(schema.inputs)}")
    batch = _integer(op, key, "batch", fields["batch"]) if "batch" in fields else 1
    inputs = []
    for pattern, layout in zip(schema.inputs, layouts):
        shape = [batch] if pattern.batched and batch != 1 else []
        for dim in pattern.dims:
            if dim in fields:
                shape.append(_integer(op, key, dim, fields[dim]))
            else:
                raise InvalidArgumentError(f"{op}: its tuning key {spec!r} leaves out dimension {dim}, so a problem "
                                           "cannot be rebuilt from it")
        inputs.append(_tensor(shape, layout, dtype, device))
    described = _core.describe(op, [descriptor(tensor) for tensor in inputs])["key"]
    if described != key:
        raise InvalidArgumentError(f"problem key {key!r} of {op}: no representative inputs found (the closest, "
                                   f"{[tuple(t.shape) for t in inputs]}, have key {described!r})")
    return inputs
