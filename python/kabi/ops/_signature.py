"""The public function of an op whose hit path runs in Python, generated from its parsed schema.

``kabi.ops.<op>`` follows one convention for every op: required tensors positional, optional tensors
positional-or-keyword defaulting to None, attributes keyword-only with the schema's defaults (one without a default
is a required keyword), then ``out=None``::

    linear(x, w, /, bias=None, *, activation='none', out=None)

The function is Python source built from the schema and compiled once per op, so Python itself binds the arguments
(its errors name a missing attribute or an unexpected keyword) and a hit costs one tuple build and one dict lookup:
no ``*args``/``**kwargs`` unpacking, no loop over the schema. The decision key is one expression, used by the
generated function and by :func:`key_function` (the miss path's key) alike: per required input its shape, strides,
dtype, device and requires_grad, per optional input those facts or None when absent, then every attribute value and
the ``kabi.use`` scope.

Example::

    >>> print(parameters_text(op_schema("linear")))
    x, w, /, bias=None, *, activation='none', out=None
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from .._base.errors import InvalidArgumentError
from ._schema import OpSchema

__all__ = ["front_function", "key_function", "parameters_text"]

# Names the generated code binds for itself; a schema's names are identifiers the core checked, and these end in
# an underscore, which no tensor or attribute of a kabi schema is expected to.
_INTERNAL = ("entries_", "active_scope_", "count_hit_", "count_miss_", "miss_", "call_with_out_", "kernel_failed_",
             "KabiError_", "expected_outputs_", "Tensor_", "expected_", "defaults_", "op_", "key_", "implementation_",
             "error_", "scope_", "inputs_", "attributes_", "check_host_values_")


def _check_names(op: str, schema: OpSchema) -> None:
    names = [*schema.input_names, *schema.attribute_names]
    clashes = sorted({name for name in names if name == "out" or name in _INTERNAL})
    if clashes:
        raise InvalidArgumentError(
            f"{op}: the schema names {', '.join(clashes)}, which the op function's own parameters or locals use; "
            "rename it"
        )
    required_after_optional = [
        later.name for index, pattern in enumerate(schema.inputs) if pattern.optional
        for later in schema.inputs[index + 1:] if not later.optional
    ]
    if required_after_optional:
        raise InvalidArgumentError(
            f"{op}: required input {required_after_optional[0]} follows an optional one; a Python op function takes "
            "required inputs first"
        )


def parameters_text(schema: OpSchema) -> str:
    """The parameter list of the op function, as in its ``def`` (defaults written as values)."""
    return _parameters(schema, lambda index: repr(schema.attributes[index].default))


def _parameters(schema: OpSchema, default: Callable[[int], str]) -> str:
    required = [pattern.name for pattern in schema.inputs if not pattern.optional]
    optional = [f"{pattern.name}=None" for pattern in schema.inputs if pattern.optional]
    attributes = [
        f"{attribute.name}={default(index)}" if attribute.has_default else attribute.name
        for index, attribute in enumerate(schema.attributes)
    ]
    return ", ".join([*required, *(["/"] if required else []), *optional, "*", *attributes, "out=None"])


def _key_expression(schema: OpSchema, scope: str) -> str:
    parts = []
    for pattern in schema.inputs:
        name = pattern.name
        facts = f"{name}.shape, {name}.stride(), {name}.dtype, {name}.device, {name}.requires_grad"
        parts.append(f"None if {name} is None else ({facts})" if pattern.optional else facts)
    parts.extend(schema.attribute_names)
    parts.append(scope)
    return f"({', '.join(parts)})"


def _tuple_text(names: tuple[str, ...]) -> str:
    return f"({', '.join(names)}{',' if len(names) == 1 else ''})"


def key_function(schema: OpSchema) -> Callable[[tuple, tuple, Any], tuple]:
    """``key(inputs, attributes, scope)``: the decision key the op function builds on its hit path, for the miss
    path, which stores the decision under it."""
    source = (
        "def key_(inputs_, attributes_, scope_):\n"
        f"    {_tuple_text(schema.input_names)} = inputs_\n"
        + (f"    {_tuple_text(schema.attribute_names)} = attributes_\n" if schema.attributes else "")
        + f"    return {_key_expression(schema, 'scope_')}\n"
    )
    namespace: dict[str, Any] = {}
    exec(compile(source, "<kabi op key>", "exec"), namespace)
    return namespace["key_"]


def front_function(op: str, schema: OpSchema, *, entries: dict, expected_outputs: dict,
                   active_scope: Callable[[], Any], count_hit: Callable[[], None], count_miss: Callable[[], None],
                   miss: Callable[..., Any], call_with_out: Callable[..., Any],
                   kernel_failed: Callable[..., Exception], kabi_error: type,
                   check_host_values: Callable[[tuple], None] | None = None) -> Callable[..., Any]:
    """The op function (see the module docstring): a hit calls the cached implementation, which has the attributes
    bound, with the inputs (and ``out``); anything else goes to ``miss(inputs, out, attributes)``. A single output's
    ``out`` that has the decision's (shape, dtype, device) in ``expected_outputs`` is passed on at once; any other
    ``out`` goes to ``call_with_out(implementation, key, inputs, out)``, which checks it and says what is wrong.
    For a schema with value-checked inputs (``offsets(R)``: values differ between calls of one decision), a hit
    first calls ``check_host_values(inputs)``, which checks those in host memory."""
    _check_names(op, schema)
    inputs = _tuple_text(schema.input_names)
    attributes = _tuple_text(schema.attribute_names)
    arguments = ", ".join(schema.input_names)
    checked_out = "" if len(schema.outputs) != 1 else f"""\
        expected_ = expected_outputs_.get(key_)
        if expected_ is not None and isinstance(out, Tensor_) and out.shape == expected_[0] and \\
                out.dtype is expected_[1] and out.device == expected_[2]:
            return implementation_({arguments}, out=out)
"""
    value_check = f"    check_host_values_({inputs})\n" if schema.value_checked_inputs else ""
    source = f"""\
def op_({_parameters(schema, lambda index: f"defaults_[{index}]")}):
    try:
        key_ = {_key_expression(schema, "active_scope_()")}
        implementation_ = entries_[key_]
    except (KeyError, AttributeError, TypeError, ValueError):
        implementation_ = None
    if implementation_ is None:
        count_miss_()
        return miss_({inputs}, out, {attributes})
    count_hit_()
{value_check}    try:
        if out is None:
            return implementation_({arguments})
{checked_out}        return call_with_out_(implementation_, key_, {inputs}, out)
    except KabiError_:
        raise
    except Exception as error_:
        raise kernel_failed_(key_, error_) from error_
"""
    namespace: dict[str, Any] = {
        "entries_": entries, "active_scope_": active_scope, "count_hit_": count_hit, "count_miss_": count_miss,
        "miss_": miss, "call_with_out_": call_with_out, "kernel_failed_": kernel_failed, "KabiError_": kabi_error,
        "defaults_": tuple(attribute.default for attribute in schema.attributes),
        "expected_outputs_": expected_outputs, "Tensor_": torch.Tensor, "check_host_values_": check_host_values,
    }
    exec(compile(source, f"<kabi.ops.{op}>", "exec"), namespace)
    function = namespace["op_"]
    function.__name__ = function.__qualname__ = op
    return function
