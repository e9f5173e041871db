"""From a problem key back to a problem: representative inputs (and attribute values) that the core describes with
the same tuning key.

An op's tuning key spec (``[tuning] key`` in ``registry/ops/<op>.toml``, e.g. ``"dtype,layout,batch,M:pow2<=4096,N,K"``)
says which facts of a call a decision is remembered under; the core formats them into a problem key such as
``float32|contiguous,col_strided|1|64|16|32``. ``kabi cache retune`` needs the way back: inputs whose key is that
key, to measure the problem again. A bucketed dimension takes its bucket's value (the key holds nothing finer); a
field the spec leaves out takes the plainest value (contiguous inputs, no batch, an attribute's default); dtype and
every dimension the given inputs have must be in the spec. An optional input whose layout reads ``absent`` is left
out (None).

Example::

    >>> inputs, attributes = representative_problem("matmul", "float32|contiguous,col_strided|3|64|16|32",
    ...                                             torch.device("cpu"))
    >>> [(tuple(t.shape), t.is_contiguous()) for t in inputs], attributes
    ([((3, 64, 32), True), ((3, 32, 16), False)], {})
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from .. import _core
from .._base.errors import InvalidArgumentError
from .._base.tensors import descriptor, torch_dtype
from ..ops._schema import op_schema

__all__ = ["representative_problem"]


def _parse_key(op: str, fields: tuple[str, ...], spec: str, key: str) -> dict[str, str]:
    """The problem key's value of each field of the op's tuning key (as the core parsed it)."""
    values = key.split("|")
    if len(values) != len(fields):
        raise InvalidArgumentError(f"problem key {key!r} of {op} has {len(values)} fields; its tuning key "
                                   f"{spec!r} has {len(fields)}")
    return dict(zip(fields, values))


def _integer(op: str, key: str, field: str, text: str) -> int:
    if not text.isdigit():
        raise InvalidArgumentError(f"problem key {key!r} of {op}: {field} must be a non-negative integer, got {text!r}")
    return int(text)


def _tensor(shape: Sequence[int], layout: str, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A tensor of ``shape`` in the layout class ``layout`` (of its last two dimensions), values uninitialized."""
    if layout == "contiguous":
        return torch.empty(shape, dtype=dtype, device=device)
    if len(shape) < 2:
        # A vector or a scalar is contiguous or general (strided): its one stride is all it has.
        if layout == "general":
            return torch.empty(*shape[:-1], 2 * shape[-1], dtype=dtype, device=device)[..., ::2]
        raise InvalidArgumentError(f"layout class {layout!r} needs two dimensions; a tensor of shape {list(shape)} "
                                   "is contiguous or general")
    *batch, rows, columns = shape
    if layout == "row_strided":
        return torch.empty(*batch, rows, columns + 1, dtype=dtype, device=device)[..., :columns]
    if layout == "col_strided":
        return torch.empty(*batch, columns, rows, dtype=dtype, device=device).transpose(-1, -2)
    if layout == "general":
        return torch.empty(*batch, rows, 2 * columns, dtype=dtype, device=device)[..., ::2]
    raise InvalidArgumentError(f"unknown layout class {layout!r}; expected contiguous, row_strided, col_strided or "
                               "general")


def _attribute_value(op: str, key: str, attribute: Any, text: str) -> Any:
    """An attribute's value as the problem key prints it (an enum by name, a bool as true/false, numbers)."""
    if attribute.type == "enum":
        if text not in attribute.enum_values:
            raise InvalidArgumentError(f"problem key {key!r} of {op}: {attribute.name} must be one of "
                                       f"{', '.join(attribute.enum_values)}, got {text!r}")
        return text
    if attribute.type == "bool":
        if text not in ("true", "false", "1", "0"):
            raise InvalidArgumentError(f"problem key {key!r} of {op}: {attribute.name} must be true or false, got {text!r}")
        return text in ("true", "1")
    try:
        return int(text) if attribute.type == "int" else float(text)
    except ValueError:
        raise InvalidArgumentError(f"problem key {key!r} of {op}: {attribute.name} must be a number, got {text!r}") from None


def _type_bindings(op: str, key: str, schema: Any, text: str) -> dict[str, str]:
    """Each type variable's dtype name, as the key's dtype field prints them (in the schema's order, comma
    separated, ``absent`` for a variable that only absent inputs have)."""
    names = text.split(",")
    if len(names) != len(schema.type_variables):
        raise InvalidArgumentError(f"problem key {key!r} of {op}: dtype names {len(names)} type variables, the op has "
                                   f"{len(schema.type_variables)}")
    return {variable: name for (variable, _), name in zip(schema.type_variables, names) if name != "absent"}


def representative_problem(op: str, key: str, device: torch.device) -> tuple[list[torch.Tensor | None], dict[str, Any]]:
    """Inputs of ``op`` on ``device`` (None for an absent optional one) and attribute values, which the core
    describes with problem key ``key``.

    Raises ``InvalidArgumentError`` naming the field when the key does not fit the op's tuning key spec, or when no
    inputs of this op have that key (a layout class that a dimension of size 1 cannot show, for one).
    """
    spec, schema = _core.op_info(op)["tuning_key"], op_schema(op)
    fields = _parse_key(op, schema.tuning_key, spec, key)
    if "dtype" not in fields:
        raise InvalidArgumentError(f"{op}: its tuning key {spec!r} has no dtype, so a problem cannot be rebuilt from it")
    bindings = _type_bindings(op, key, schema, fields["dtype"])
    layouts = fields["layout"].split(",") if "layout" in fields else ["contiguous"] * len(schema.inputs)
    if len(layouts) != len(schema.inputs):
        raise InvalidArgumentError(f"problem key {key!r} of {op}: layout names {len(layouts)} inputs, the op has "
                                   f"{len(schema.inputs)}")
    batch = _integer(op, key, "batch", fields["batch"]) if "batch" in fields else 1
    inputs: list[torch.Tensor | None] = []
    present = {pattern.name for pattern, layout in zip(schema.inputs, layouts) if layout != "absent"}
    for pattern, layout in zip(schema.inputs, layouts):
        if layout == "absent":
            if not pattern.optional:
                raise InvalidArgumentError(f"problem key {key!r} of {op}: {pattern.name} is required, not absent")
            inputs.append(None)
            continue
        shape = [batch] if pattern.batched and (batch != 1 or len(pattern.dims) < 2) else []
        for dim in schema.generated_dims(pattern.name, present):
            if dim in fields:
                shape.append(_integer(op, key, dim, fields[dim]))
            else:
                raise InvalidArgumentError(f"{op}: its tuning key {spec!r} leaves out dimension {dim}, so a problem "
                                           "cannot be rebuilt from it")
        tensor = _tensor(shape, layout, torch_dtype(bindings.get(pattern.dtype, pattern.dtype)), device)
        # Offsets are checked where the host can read them: all zeros are valid ones (every group empty).
        inputs.append(tensor.zero_() if pattern.offsets_of is not None else tensor)
    attributes = {attribute.name: _attribute_value(op, key, attribute, fields[attribute.name])
                  for attribute in schema.attributes if attribute.name in fields}
    described = _core.describe(op, [descriptor(tensor) if tensor is not None else None for tensor in inputs],
                               attributes=[attributes.get(attribute.name, attribute.default)
                                           for attribute in schema.attributes])["key"]
    if described != key:
        shapes = [tuple(t.shape) if t is not None else None for t in inputs]
        raise InvalidArgumentError(f"problem key {key!r} of {op}: no representative inputs found (the closest, "
                                   f"{shapes}, have key {described!r})")
    return inputs, attributes
