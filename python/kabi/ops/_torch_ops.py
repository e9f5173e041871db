"""Every kabi op as a torch custom op, ``torch.ops.kabi.<op>``, so torch.compile and autograd can see it.

For each op declared in ``registry/ops`` this module defines ``kabi::<op>(Tensor a, Tensor b) -> Tensor`` (the
arguments and results come from the op's schema) with

- a real implementation that is the op's front, ``kabi.ops.<op>``: the same decision cache and chosen kernel as an
  eager call, so a compiled graph runs what eager would;
- a fake implementation from the schema's shape rule (:mod:`kabi.ops._schema`, vectors included): output shapes from
  the input shapes,
  the inputs' dtype and device, no data and no call into the core — it runs on FakeTensors with symbolic sizes;
- the op's gradient (:mod:`kabi.ops._autograd`).

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

from .._base.errors import InvalidArgumentError, NotFoundError, UnsupportedDtypeError
from .._base.tensors import dtype_name
from . import _autograd
from ._schema import OpSchema

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
        arguments = ", ".join(f"Tensor {name}" for name in schema.input_names)
        results = "Tensor" if len(schema.outputs) == 1 else f"({', '.join('Tensor' for _ in schema.outputs)})"
        _library.define(f"{front.name}({arguments}) -> {results}", tags=(torch.Tag.pt2_compliant_tag,))
        implementation = _real_implementation(front.function, len(schema.outputs))
        _library.impl(front.name, implementation, "CompositeExplicitAutograd")
        fake = _fake_implementation(front.name, schema, front.spec.dtypes)
        torch.library.register_fake(f"{LIBRARY_NAME}::{front.name}", fake, lib=_library)
        overload = getattr(getattr(torch.ops, LIBRARY_NAME), front.name).default
        _defined[front.name] = overload
        _autograd.register_gradient(front.name, overload, implementation, _library)
        _traceable[front.name] = (front.function, _traced_call(front.name, overload))
    _after_import("torch._dynamo", _register_dynamo_polyfills)


def _real_implementation(function: Callable[..., Any], output_count: int) -> Callable[..., Any]:
    """The custom op's kernel: the kabi front. Its result must be dense and row-major as the fake one is (compiled
    code indexes it with the fake strides), which a Python kernel registered with kabi need not guarantee."""

    def dense(tensor: torch.Tensor) -> torch.Tensor:
        return tensor if tensor.is_contiguous() else tensor.contiguous()

    if output_count == 1:

        def run(*inputs: torch.Tensor) -> torch.Tensor:
            return dense(function(*inputs))

    else:

        def run(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return tuple(map(dense, function(*inputs)))

    return run


def _fake_implementation(op: str, schema: OpSchema, dtypes: Sequence[str]) -> Callable[..., Any]:
    """Outputs of the schema's shapes, with the inputs' common dtype and device, checked as the core would."""

    def fake(*inputs: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        first = inputs[0]
        for name, tensor in zip(schema.input_names, inputs):
            if tensor.dtype != first.dtype:
                raise UnsupportedDtypeError(
                    f"{op}: {schema.input_names[0]} has dtype {dtype_name(first.dtype)} but {name} has "
                    f"{dtype_name(tensor.dtype)}; the inputs must share one dtype"
                )
            if tensor.device != first.device:
                raise InvalidArgumentError(
                    f"{op}: all tensors must be on one device; got {schema.input_names[0]} on {first.device}, "
                    f"{name} on {tensor.device}"
                )
        if dtype_name(first.dtype) not in dtypes:
            raise UnsupportedDtypeError(f"{op}: dtype {dtype_name(first.dtype)} is not one of {', '.join(dtypes)}")
        shapes = schema.output_shapes(op, [tensor.shape for tensor in inputs])
        outputs = tuple(torch.empty(shape, dtype=first.dtype, device=first.device) for shape in shapes)
        return outputs[0] if len(outputs) == 1 else outputs

    return fake


def _traced_call(op: str, overload: torch._ops.OpOverload) -> Callable[..., Any]:
    """What dynamo traces in place of ``kabi.ops.<op>``: the custom op, then ``out=`` written as eager would."""

    def traced(*inputs: torch.Tensor, out: torch.Tensor | None = None) -> Any:
        result = overload(*inputs)
        if out is None:
            return result
        if out.shape != result.shape or out.dtype != result.dtype or out.device != result.device:
            raise InvalidArgumentError(
                f"{op}: out has shape {list(out.shape)}, dtype {dtype_name(out.dtype)} on {out.device}; expected "
                f"shape {list(result.shape)}, dtype {dtype_name(result.dtype)} on {result.device}"
            )
        return out.copy_(result)

    traced.__name__ = traced.__qualname__ = op
    return traced


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

