"""Registering Python implementations of ops: ``kabi.register_kernel``, ``@kabi.kernel`` and
``kabi.unregister_kernel``.

A Python kernel is registered in the core as an EXTERNAL kernel: it takes part in selection with the same filters
as native kernels (device, archs, features, dtypes, layouts, batch mode, alignment, priority, ``supports``), and
when it wins, the op front calls it directly with the caller's tensors: ``fn(*inputs, out=None, **attributes)``:
every input in schema order (None for an absent optional input), every attribute by name with its default filled in
(an enum by its value name), returning the result (written into ``out`` and returned when ``out`` is given; a tuple
for an op of several outputs, whose ``out`` is a tuple too). An op without attributes calls ``fn(*inputs, out=None)``.

Example::

    >>> @kabi.kernel("matmul", name="mine.matmul", dtypes=["float32"], priority=5)
    ... def my_matmul(a, b, out=None):
    ...     return torch.matmul(a, b, out=out)
    >>> kabi.unregister_kernel("matmul", "mine.matmul")
"""

from __future__ import annotations

import hashlib
import importlib
import os
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, TypeVar

import torch

from .. import _core
from .._base.core_answers import KernelInfo, Problem, names_to_bits
from .._base.declarations import KernelSpec, op_name_of, resolve_callable
from .._base.errors import AlreadyExistsError, ArgumentTypeError, InvalidArgumentError, UnavailableError
from .._base.tensors import device_type_code, dtype_name
from .._plugins import loading
from .._plugins.discovery import complete_registry

__all__ = [
    "kernel",
    "kernel_info",
    "kernels",
    "arch_bounds",
    "layout_declaration",
    "python_implementation",
    "register_binary",
    "register_binaries",
    "register_declared",
    "register_kernel",
    "unregister_kernel",
]

KernelFunction = TypeVar("KernelFunction", bound=Callable[..., Any])

_lock = threading.Lock()
_implementations: dict[tuple[str, str], Callable[..., Any]] = {}


def arch_bounds(archs: Any, owner: str) -> tuple[int, int, list[int]]:
    """(arch_min, arch_max, exact archs) from None, an int, a set/list of ints, or a (min, max) tuple."""
    if archs is None:
        return 0, 0, []
    if isinstance(archs, int) and not isinstance(archs, bool):
        return 0, 0, [archs]
    if isinstance(archs, tuple) and len(archs) == 2 and all(a is None or isinstance(a, int) for a in archs):
        low, high = (a or 0 for a in archs)
        if high and low > high:
            raise InvalidArgumentError(f"{owner}: archs range ({low}, {high}) is empty")
        return low, high, []
    if isinstance(archs, (set, frozenset, list)) and all(isinstance(a, int) and a > 0 for a in archs):
        return 0, 0, sorted(archs)
    raise InvalidArgumentError(
        f"{owner}: archs must be None, an int (90), a set of ints ({{80, 90}}) or a (min, max) range ((80, None)); "
        f"got {archs!r}"
    )


def _dtype_names(dtypes: Iterable[Any]) -> list[str]:
    return [dtype_name(d) if isinstance(d, torch.dtype) else d for d in dtypes]


def _dtype_bits(dtypes: Iterable[Any] | None, op_name: str, owner: str) -> int:
    """The dtypes a kernel accepts for the type variables type_constraints leaves out; None: every dtype of any of
    the op's type variables (the core narrows each variable to its own set)."""
    if dtypes is None:
        dtypes = {dtype for names in _core.op_schema(op_name)["type_variables"].values() for dtype in names}
    return names_to_bits(_dtype_names(dtypes), _core.DTYPES, "dtype", owner)


def _type_constraints_text(type_constraints: Mapping[str, Iterable[Any]] | None) -> str | None:
    """``{"U": ["float16"]}`` as kabi.h's type_constraints text, ``"U: float16"``; the core parses and checks it."""
    if not type_constraints:
        return None
    return "; ".join(f"{name}: {', '.join(_dtype_names(dtypes))}" for name, dtypes in type_constraints.items())


def _layout_bits(layouts: str | Iterable[str], owner: str) -> int:
    names = [layouts] if isinstance(layouts, str) else list(layouts)
    if "any" in names:
        return sum(_core.LAYOUTS.values())
    return names_to_bits(names, _core.LAYOUTS, "layout", owner)


def layout_declaration(op_name: str, layouts: Any, owner: str) -> tuple[int, list[int]]:
    """The core's ``layouts`` mask and per-input masks (kabi_kernel_desc.input_layouts) of a kernel's ``layouts``:
    "any", a class name or a list of them (every input), or a mapping from the op's input names to those forms
    (``{"a": ["contiguous", "row_strided"], "b": "col_strided"}``; an input it leaves out takes any layout). An
    unknown input name raises ``ValueError`` naming it and the op's inputs."""
    if not isinstance(layouts, Mapping):
        return _layout_bits(layouts, owner), []
    inputs = [tensor["name"] for tensor in _core.op_schema(op_name)["inputs"]]
    unknown = [name for name in layouts if name not in inputs]
    if unknown:
        raise InvalidArgumentError(f"{owner}: layouts names {', '.join(map(repr, unknown))}, not an input of op "
                                   f"{op_name}; its inputs are {', '.join(inputs)}")
    masks = [_layout_bits(layouts[name], f"{owner}: layouts of {name}") if name in layouts else 0 for name in inputs]
    while masks and masks[-1] == 0:
        masks.pop()
    return _layout_bits("any", owner), masks


def _default_fingerprint(fn: Callable[..., Any]) -> str | None:
    """A hash of a Python function's bytecode and constants, so editing it invalidates its tuning records."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return None
    digest = hashlib.sha256(code.co_code + repr(code.co_consts).encode()).hexdigest()[:16]
    return f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', '')}@{digest}"


def register_binary(manifest_path: str | Path, op: str, supports: Callable[[Problem], bool | str] | None = None) -> str:
    """Register the device binary one manifest file of ``op`` describes (docs/manifest.md) as a native kernel, with
    an optional ``supports(problem)`` predicate like a Python kernel's; return its name. A kernel already registered
    with the same fingerprint is kept. The core launches it, and applies what the manifest declares (its layouts,
    per input too, and the divisibility its parameters assume) before the predicate, the one part run in Python."""
    return register_binaries([(manifest_path, op, supports)])[0]


def register_binaries(
        binaries: Iterable[tuple[str | Path, str, Callable[[Problem], bool | str] | None]]) -> list[str]:
    """``register_binary`` for each ``(manifest path, op, supports or None)``, all or nothing: the core reads the
    manifests in parallel and registers them together, in this order (which breaks ties between equal priorities).
    Return the kernels' names, in the same order."""
    loads = []
    for manifest_path, op, supports in binaries:
        if supports is not None and not callable(supports):
            raise ArgumentTypeError(
                f"{manifest_path}: supports must be callable or None, got {type(supports).__name__}")
        predicate = _problem_predicate(supports, str(manifest_path)) if supports is not None else None
        loads.append((os.fspath(manifest_path), op, predicate))
    return loading.load_binaries_with(loads)


def _problem_predicate(supports: Callable[[Problem], Any], owner: str) -> Callable[[dict], bool | str]:
    """Adapt a user's ``supports(problem)`` to the binding's dict-in, True-or-reason-out convention."""

    def predicate(raw: dict) -> bool | str:
        try:
            verdict = supports(Problem.from_core(raw))
        except Exception as error:  # a predicate that raises declines the problem, with the error as the reason
            return f"supports raised {type(error).__name__}: {error}"
        if isinstance(verdict, str):
            return verdict
        return True if verdict else f"declined by {owner}'s supports predicate"

    return predicate


def register_kernel(
    op: Any,
    fn: Callable[..., Any],
    *,
    name: str,
    backend: str = "python",
    device: str = "cpu",
    archs: Any = None,
    features: Iterable[str] = (),
    dtypes: Iterable[Any] | None = None,
    type_constraints: Mapping[str, Iterable[Any]] | None = None,
    layouts: str | Iterable[str] | Mapping[str, str | Iterable[str]] = "any",
    batch: str = "any",
    alignment: int = 0,
    priority: int = 0,
    supports: Callable[[Problem], bool | str] | None = None,
    fingerprint: str | None = None,
) -> KernelInfo:
    """Register ``fn`` as an implementation of ``op`` and return its declaration.

    ``fn(*inputs, out=None, **attributes)`` returns the result (see the module docstring). ``archs`` is None (any), an int, a set of ints (exact) or a
    ``(min, max)`` range with None for an open end. ``dtypes`` defaults to all of the op's; ``type_constraints``
    (``{"U": ["float16"]}``) narrows the type variables it names, ``dtypes`` applying to the others. ``layouts``
    is "any" or names among contiguous/row_strided/col_strided/general, for every input; or a mapping from the op's
    input names to such names, per input (``{"a": ["contiguous", "row_strided"], "b": ["col_strided"]}``: a
    row-major a and a column-major b, nn.Linear's weight; an input it leaves out takes any layout). ``batch`` is
    "none", "uniform" or "any".
    ``supports(problem)`` returns True, or a string saying why the kernel declines the problem.
    A name already registered for the op raises ``AlreadyExistsError``.

    Example::

        >>> kabi.register_kernel("matmul", torch.matmul, name="my.matmul", dtypes=["float64"], priority=20)
    """
    op_name = op_name_of(op)
    owner = f"kernel {name!r}"
    if not callable(fn):
        raise ArgumentTypeError(f"{owner}: fn must be callable, got {type(fn).__name__}")
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgumentError(f"kernel name must be a non-empty string, got {name!r}")
    if supports is not None and not callable(supports):
        raise ArgumentTypeError(f"{owner}: supports must be callable or None, got {type(supports).__name__}")
    arch_min, arch_max, exact_archs = arch_bounds(archs, owner)
    if batch not in _core.BATCH_MODES:
        raise InvalidArgumentError(f"{owner}: batch must be one of {', '.join(_core.BATCH_MODES)}, got {batch!r}")
    if not isinstance(alignment, int) or alignment < 0:
        raise InvalidArgumentError(f"{owner}: alignment must be a non-negative int, got {alignment!r}")
    layout_mask, input_layout_masks = layout_declaration(op_name, layouts, owner)
    declaration = dict(
        op=op_name,
        name=name,
        backend=backend,
        device_type=device_type_code(device),
        arch_min=arch_min,
        arch_max=arch_max,
        archs=exact_archs,
        priority=int(priority),
        required_features=names_to_bits(features, _core.FEATURES, "feature", owner),
        dtypes=_dtype_bits(dtypes, op_name, owner),
        type_constraints=_type_constraints_text(type_constraints),
        layouts=layout_mask,
        input_layouts=input_layout_masks,
        alignment=alignment,
        batch_mode=_core.BATCH_MODES[batch],
        supports=_problem_predicate(supports, owner) if supports is not None else None,
        fingerprint=fingerprint if fingerprint is not None else _default_fingerprint(fn),
    )
    key = (op_name, name)
    with _lock:
        if key in _implementations:
            raise AlreadyExistsError(f"{op_name}: a kernel named {name!r} is already registered")
        _implementations[key] = fn
        try:
            _core.kernel_register_external(**declaration)
        except BaseException:
            del _implementations[key]
            raise
    return KernelInfo.from_core(_core.kernel_info(op_name, name))  # registering reads no other kernel: no completion


def kernel(op: Any, *, name: str | None = None, **declaration: Any) -> Callable[[KernelFunction], KernelFunction]:
    """Decorator form of ``register_kernel``; ``name`` defaults to the function's module and qualified name.

    Example::

        >>> @kabi.kernel("matmul", dtypes=["float32"])
        ... def matmul_f32(a, b, out=None):
        ...     return torch.matmul(a, b, out=out)
    """

    def decorate(fn: KernelFunction) -> KernelFunction:
        register_kernel(op, fn, name=name or f"{fn.__module__}.{fn.__qualname__}", **declaration)
        return fn

    return decorate


def unregister_kernel(op: Any, name: str) -> None:
    """Remove a kernel of ``op`` by name (``NotFoundError`` if there is none)."""
    op_name = op_name_of(op)
    with _lock:
        _core.kernel_unregister(op_name, name)
        _implementations.pop((op_name, name), None)


def kernels(op: Any = None) -> tuple[KernelInfo, ...]:
    """Every registered kernel (of one op, or of all), in registration order: with the plugins' and, where a CUDA
    device exists, the CUDA backends' kernels, as a call would see them."""
    complete_registry()
    return tuple(KernelInfo.from_core(raw) for raw in _core.kernel_list(None if op is None else op_name_of(op)))


def kernel_info(op: Any, name: str) -> KernelInfo:
    """The declaration of one kernel (``NotFoundError`` if unknown)."""
    complete_registry()
    return KernelInfo.from_core(_core.kernel_info(op_name_of(op), name))


def python_implementation(op: str, name: str) -> Callable[..., Any]:
    """The callable behind an EXTERNAL kernel; ``UnavailableError`` if this process registered none."""
    try:
        return _implementations[(op, name)]
    except KeyError:
        raise UnavailableError(
            f"{op}: kernel {name!r} runs outside libkabi and has no Python implementation in this process"
        ) from None


def register_declared(spec: KernelSpec) -> KernelInfo:
    """Register a Python kernel declared in ``registry/kernels`` (its ``implementation`` is ``module:attribute``)."""
    module_name, _, attribute = spec.implementation.partition(":")
    fn = getattr(importlib.import_module(module_name), attribute)
    if spec.archs:
        archs: Any = set(spec.archs)
    elif spec.arch_min or spec.arch_max:
        archs = (spec.arch_min or None, spec.arch_max or None)
    else:
        archs = None
    return register_kernel(
        spec.op,
        fn,
        name=spec.name,
        backend=spec.backend,
        device=spec.device,
        archs=archs,
        features=spec.features,
        dtypes=spec.dtypes,
        type_constraints=spec.type_constraints,
        layouts=spec.layouts_argument,
        batch=spec.batch_mode,
        alignment=spec.alignment,
        priority=spec.priority,
        supports=resolve_callable(spec.supports) if spec.supports else None,
        fingerprint=spec.fingerprint or None,
    )
