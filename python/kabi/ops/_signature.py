"""The calling convention of every op function, from its parsed schema.

``kabi.ops.<op>`` follows one convention: required tensors positional, optional tensors positional-or-keyword
defaulting to None, attributes keyword-only with the schema's defaults (one without a default is a required
keyword), then ``out=None``::

    linear(x, w, /, bias=None, *, activation='none', out=None)

The op function itself is C (csrc/python/front.cpp binds a call by this convention); this module gives the same
convention as a Python signature, for ``inspect``, for binding the calls the C path hands back (with Python's own
errors), and for the text signature in the function's docstring.

Example::

    >>> print(parameters_text(op_schema("linear")))
    x, w, /, bias=None, *, activation='none', out=None
"""

from __future__ import annotations

import inspect

from .._base.errors import InvalidArgumentError
from ._schema import OpSchema

__all__ = ["check_names", "parameters_text", "signature"]


def check_names(op: str, schema: OpSchema) -> None:
    """Raise unless the schema fits the convention: no parameter named ``out``, required inputs first."""
    names = [*schema.input_names, *schema.attribute_names]
    if "out" in names:
        raise InvalidArgumentError(f"{op}: the schema names out, which is the op function's own parameter; rename it")
    required_after_optional = [
        later.name for index, pattern in enumerate(schema.inputs) if pattern.optional
        for later in schema.inputs[index + 1:] if not later.optional
    ]
    if required_after_optional:
        raise InvalidArgumentError(
            f"{op}: required input {required_after_optional[0]} follows an optional one; a Python op function takes "
            "required inputs first"
        )


def signature(schema: OpSchema) -> inspect.Signature:
    """The op function's signature."""
    parameter = inspect.Parameter
    return inspect.Signature([
        *(parameter(pattern.name, parameter.POSITIONAL_ONLY) for pattern in schema.inputs if not pattern.optional),
        *(parameter(pattern.name, parameter.POSITIONAL_OR_KEYWORD, default=None)
          for pattern in schema.inputs if pattern.optional),
        *(parameter(attribute.name, parameter.KEYWORD_ONLY,
                    default=attribute.default if attribute.has_default else parameter.empty)
          for attribute in schema.attributes),
        parameter("out", parameter.KEYWORD_ONLY, default=None),
    ])


def parameters_text(schema: OpSchema) -> str:
    """The parameter list of the op function, as in its ``def`` (defaults written as values)."""
    return str(signature(schema))[1:-1]
