"""Every kabi op as a torch custom op, ``torch.ops.kabi.<op>``, so torch.compile and autograd can see it.

For each op (declared in ``registry/ops`` or registered with ``kabi.register_op``) this module defines the custom
op from its schema: required tensors as ``Tensor``, optional ones as ``Tensor? name=None``, attributes keyword-only
with their defaults (int -> ``int``, float -> ``float``, bool -> ``bool``, enum -> ``str``, its value name), and a
``Tensor`` result or a tuple of them for several outputs::

    kabi::linear(Tensor x, Tensor w, Tensor? bias=None, *, str activation="none") -> Tensor

with

- a real implementation that is the op's front, ``kabi.ops.<op>``: the same decision cache and chosen kernel as an
  eager call, so a compiled graph runs what eager would;
- a fake implementation from the schema's shape rule (:mod:`kabi.ops._schema`, vectors included): output shapes from
  the input shapes, output dtypes from the type variables' bindings (checked per variable as the core checks them),
  the inputs' device, no data and no call into the core — it runs on FakeTensors with symbolic sizes;
- the op's gradient (:mod:`kabi.ops._autograd`).

Every kernel of the custom op gets the tensors positionally and the attributes as keyword arguments.

``kabi.ops.<op>`` itself is a C function that dynamo cannot trace into. A polyfill registered with
``torch.compiler.substitute_in_graph`` makes dynamo record ``torch.ops.kabi.<op>`` in its place, so
``torch.compile(fullgraph=True)`` of code calling ``kabi.ops.matmul`` has no graph break, and eager calls pay
nothing for it. Importing ``torch._dynamo`` takes seconds, so kabi never imports it: the polyfills are registered
the moment the program imports it (usually through the first ``torch.compile``), or at once if it already has.

kabi's bootstrap (``kabi._bootstrap.bootstrap``) calls :func:`define_ops` with the front of every ``kabi.ops``
function; a later call defines those of ops added since.

Example::

    >>> import torch, kabi
    >>> torch.ops.kabi.matmul(torch.randn(4, 3), torch.randn(3, 2)).shape
    torch.Size([4, 2])
    >>> torch.compile(lambda a, b: kabi.ops.matmul(a, b).relu(), fullgraph=True)(torch.randn(4, 3), torch.randn(3, 2))
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from typing import Any, Callable, Sequence

import torch

from .._base.errors import InvalidArgumentError, NotFoundError
from .._base.tensors import dtype_name, torch_dtype
from . import _autograd
from ._schema import Attribute, OpSchema

__all__ = ["LIBRARY_NAME", "define_ops", "torch_op"]

LIBRARY_NAME = "kabi"
# The library must stay referenced: torch removes its definitions when it is collected.
_library = torch.library.Library(LIBRARY_NAME, "DEF")
_defined: dict[str, torch._ops.OpOverload] = {}
_traceable: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {}


def torch_op(name: str) -> torch._ops.OpOverload:
    """The custom op of a kabi op (``torch.ops.kabi.matmul.default``); ``NotFoundError`` if it is not defined."""
    try:
        return _defined[name]
    except KeyError:
        raise NotFoundError(f"kabi defines no torch op {name!r}; defined: {', '.join(_defined) or 'none'}") from None


def define_ops(fronts: Sequence[Any]) -> None:
    """Define ``torch.ops.kabi.<op>`` for each op front (:class:`kabi.ops._front.OpFront`) not defined yet, with its
    gradient, and make ``kabi.ops.<op>`` traceable by dynamo."""
    for front in fronts:
        if front.name in _defined:
            continue
        schema = front.schema
        _library.define(torch_schema(front.name, schema), tags=(torch.Tag.pt2_compliant_tag,))
        implementation = _real_implementation(front.function, len(schema.outputs))
        _library.impl(front.name, implementation, "CompositeExplicitAutograd")
        fake = _fake_implementation(front.name, schema)
        torch.library.register_fake(f"{LIBRARY_NAME}::{front.name}", fake, lib=_library)
        overload = getattr(getattr(torch.ops, LIBRARY_NAME), front.name).default
        _defined[front.name] = overload
        _autograd.register_gradient(front.spec, overload, implementation, _library)
        _traceable[front.name] = (front.function, _traced_call(front.name, schema, overload))
    _after_import("torch._dynamo", _register_dynamo_polyfills)


_TORCH_TYPES = {"int": "int", "float": "float", "bool": "bool", "enum": "str"}


def _torch_default(attribute: Attribute) -> str:
    if attribute.type == "enum":
        return f'"{attribute.default}"'
    return repr(attribute.default)


def torch_schema(op: str, schema: OpSchema) -> str:
    """The custom op's schema text (see the module docstring).

    Example::

        >>> torch_schema("linear", op_schema("linear"))
        'linear(Tensor x, Tensor w, Tensor? bias=None, *, str activation="none") -> Tensor'
    """
    arguments = [f"Tensor? {pattern.name}=None" if pattern.optional else f"Tensor {pattern.name}"
                 for pattern in schema.inputs]
    if schema.attributes:
        arguments.append("*")
    arguments += [
        f"{_TORCH_TYPES[attribute.type]} {attribute.name}"
        + (f"={_torch_default(attribute)}" if attribute.has_default else "")
        for attribute in schema.attributes
    ]
    results = "Tensor" if len(schema.outputs) == 1 else f"({', '.join('Tensor' for _ in schema.outputs)})"
    return f"{op}({', '.join(arguments)}) -> {results}"


def _real_implementation(function: Callable[..., Any], output_count: int) -> Callable[..., Any]:
    """The custom op's kernel: the kabi front. Its result must be dense and row-major as the fake one is (compiled
    code indexes it with the fake strides), which a Python kernel registered with kabi need not guarantee."""

    def dense(tensor: torch.Tensor) -> torch.Tensor:
        return tensor if tensor.is_contiguous() else tensor.contiguous()

    if output_count == 1:

        def run(*inputs: torch.Tensor | None, **attributes: Any) -> torch.Tensor:
            return dense(function(*inputs, **attributes))

    else:

        def run(*inputs: torch.Tensor | None, **attributes: Any) -> tuple[torch.Tensor, ...]:
            return tuple(map(dense, function(*inputs, **attributes)))

    return run


def _fake_implementation(op: str, schema: OpSchema) -> Callable[..., Any]:
    """Outputs of the schema's shapes and dtypes on the inputs' device, checked as the core would check them."""
    attributes_by_name = {attribute.name: attribute for attribute in schema.attributes}

    def fake(*given: torch.Tensor | None, **attributes: Any) -> torch.Tensor | tuple[torch.Tensor, ...]:
        inputs = schema.complete_inputs(given)
        present = [(name, tensor) for name, tensor in zip(schema.input_names, inputs) if tensor is not None]
        first_name, first = present[0]
        for name, tensor in present:
            if tensor.device != first.device:
                raise InvalidArgumentError(
                    f"{op}: all tensors must be on one device; got {first_name} on {first.device}, "
                    f"{name} on {tensor.device}"
                )
        for name, value in attributes.items():
            attributes_by_name[name].check(op, value)
        bound = schema.bind_dtypes(op, [None if tensor is None else dtype_name(tensor.dtype) for tensor in inputs],
                                   attributes)
        dtypes = schema.output_dtypes([bound.get(name, "") for name, _ in schema.type_variables])
        shapes = schema.output_shapes(op, [None if tensor is None else tensor.shape for tensor in inputs])
        outputs = tuple(
            torch.empty(shape, dtype=torch_dtype(dtype), device=first.device) for shape, dtype in zip(shapes, dtypes)
        )
        return outputs[0] if len(outputs) == 1 else outputs

    return fake


def _traced_call(op: str, schema: OpSchema, overload: torch._ops.OpOverload) -> Callable[..., Any]:
    """What dynamo traces in place of ``kabi.ops.<op>``: the custom op, then ``out=`` written as eager would.
    Attributes reach the custom op by their names (its schema types an enum as ``str``), aliases named."""
    # The attributes' own tables, as plain dicts, which dynamo reads as constants (it cannot wrap an Attribute).
    names_by_alias = {attribute.name: attribute.names_by_alias for attribute in schema.attributes
                      if attribute.names_by_alias}

    def traced(*arguments: torch.Tensor | None, out: Any = None, **keywords: Any) -> Any:
        # The custom op binds the arguments itself: optional tensors by position or name, attributes by name.
        for name, names in names_by_alias.items():
            if isinstance(keywords.get(name), torch.dtype) and keywords[name] in names:
                keywords[name] = names[keywords[name]]
        result = overload(*arguments, **keywords)
        if out is None:
            return result
        if isinstance(result, tuple):
            return tuple(_written(op, f"out[{index}]", given, value)
                         for index, (given, value) in enumerate(zip(out, result)))
        return _written(op, "out", out, result)

    traced.__name__ = traced.__qualname__ = op
    return traced


def _written(op: str, name: str, out: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    """``result`` copied into a caller's ``out`` of the same shape, dtype and device, as eager checks it."""
    if out.shape != result.shape or out.dtype != result.dtype or out.device != result.device:
        raise InvalidArgumentError(
            f"{op}: {name} has shape {list(out.shape)}, dtype {dtype_name(out.dtype)} on {out.device}; expected "
            f"shape {list(result.shape)}, dtype {dtype_name(result.dtype)} on {result.device}"
        )
    return out.copy_(result)


def _register_dynamo_polyfills() -> None:
    from torch._dynamo.trace_rules import is_polyfilled_callable

    for function, traced in _traceable.values():
        if not is_polyfilled_callable(function):
            # The front's C function has no inspectable parameter names to compare with ``traced(*inputs, out)``.
            torch.compiler.substitute_in_graph(function, skip_signature_check=True)(traced)


class _RunAfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Runs ``callback`` right after module ``name`` is first imported, whoever imports it."""

    def __init__(self, name: str, callback: Callable[[], None]) -> None:
        self.name, self.callback, self.loader = name, callback, None

    def find_spec(self, fullname: str, path: Any, target: types.ModuleType | None = None) -> Any:
        if fullname != self.name:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            self.loader, spec.loader = spec.loader, self
        return spec

    def create_module(self, spec: Any) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        module.__loader__ = module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        _run_import_callback(self.callback)


def _run_import_callback(callback: Callable[[], None]) -> None:
    # A failure here must not break the program's own import (e.g. of torch._dynamo by torch.compile).
    try:
        callback()
    except Exception as error:
        warnings.warn(
            f"kabi could not make its ops traceable by torch.compile: {type(error).__name__}: {error}", stacklevel=2
        )


def _after_import(name: str, callback: Callable[[], None]) -> None:
    if name in sys.modules:
        _run_import_callback(callback)
    elif not any(isinstance(finder, _RunAfterImport) and finder.name == name for finder in sys.meta_path):
        sys.meta_path.insert(0, _RunAfterImport(name, callback))

