"""Forcing a backend or a kernel: ``kabi.use(matmul="torch")`` and its environment twin ``KABI_FORCE``.

``use`` is a context manager backed by a ContextVar, so scopes nest (inner choices override outer ones, op by op)
and each thread and asyncio task sees its own. A choice is a backend name ("torch", "cpu", "triton": then the usual
rules pick among that backend's kernels) or a kernel name ("cpu.openblas.gemm"). Outside any scope, the core reads
``KABI_FORCE="matmul=torch,other=cpu"`` itself. A forced choice with no eligible kernel fails the call with
``NoEligibleKernelError`` naming the choice and why each candidate was rejected; so does a forced kernel that failed
the correctness gate on the problem, unless the scope says ``allow_failed_gate=True``.

The active scope is an interned object, so the op fronts put it in their decision-cache keys at the cost of one
ContextVar read and one identity hash. It also carries the execution mode the calls in it are selected for
(``"eager"``, or ``"graph"`` inside ``kabi.tuning(mode="graph")``, which sets it through :func:`execution`): calls
about to be captured in a CUDA graph get the picks measured under graph replay, and their decisions are kept apart
from eager ones by the same key, without a capture check on the hit path.

Example::

    >>> with kabi.use(matmul="torch"):
    ...     kabi.ops.matmul(a, b)  # runs torch.matmul.cpu
"""

from __future__ import annotations

import contextlib
import threading
from contextvars import ContextVar
from typing import Iterator, Mapping

import torch

from .. import _core
from .._base.errors import ArgumentTypeError, InvalidArgumentError

__all__ = [
    "EXECUTION_MODES", "ForcedChoices", "active_scope", "cuda_graph_capturing", "environment_choice", "execution",
    "execution_mode", "failed_gate_allowed", "forced_choice", "use",
]

EXECUTION_MODES = ("eager", "graph")


class ForcedChoices:
    """An immutable op -> choice mapping with the scope's execution mode, interned: equal scopes are the same
    object."""

    __slots__ = ("choices", "allow_failed_gate", "execution_mode")

    def __init__(self, choices: Mapping[str, str], allow_failed_gate: bool = False,
                 execution_mode: str = "eager") -> None:
        self.choices = dict(choices)
        self.allow_failed_gate = allow_failed_gate
        self.execution_mode = execution_mode

    def __repr__(self) -> str:
        return (f"ForcedChoices({self.choices!r}, allow_failed_gate={self.allow_failed_gate}, "
                f"execution_mode={self.execution_mode!r})")


_active: ContextVar[ForcedChoices | None] = ContextVar("kabi_forced_choices", default=None)
# The op fronts read the variable directly (the C hit path takes the ContextVar itself).
scope_variable = _active
active_scope = _active.get
_interned: dict[tuple[frozenset[tuple[str, str]], bool, str], ForcedChoices] = {}
_intern_lock = threading.Lock()


def _intern(choices: Mapping[str, str], allow_failed_gate: bool, execution_mode: str) -> ForcedChoices | None:
    if not choices and not allow_failed_gate and execution_mode == "eager":
        return None
    key = (frozenset(choices.items()), allow_failed_gate, execution_mode)
    with _intern_lock:
        scope = _interned.get(key)
        if scope is None:
            scope = _interned[key] = ForcedChoices(choices, allow_failed_gate, execution_mode)
        return scope


@contextlib.contextmanager
def use(*, allow_failed_gate: bool | None = None, **choices: str | None) -> Iterator[None]:
    """Force a backend or kernel per op inside the ``with`` block; ``op=None`` lifts an outer scope's choice.

    A forced kernel that failed the correctness gate on the call's problem raises ``NoEligibleKernelError`` naming
    the failure; ``allow_failed_gate=True`` runs it anyway (this scope's choices and KABI_FORCE's), ``None`` keeps
    the outer scope's setting.

    Example::

        >>> with kabi.use(matmul="cpu.openblas.gemm"):
        ...     kabi.ops.matmul(a, b)
    """
    if allow_failed_gate is not None and not isinstance(allow_failed_gate, bool):
        raise ArgumentTypeError(f"kabi.use: allow_failed_gate must be True, False or None, got {allow_failed_gate!r}")
    known_ops = set(_core.op_list())
    for op, choice in choices.items():
        if op not in known_ops:
            raise InvalidArgumentError(f"kabi.use: unknown op {op!r}; known ops: {', '.join(sorted(known_ops))}")
        if choice is not None and (not isinstance(choice, str) or not choice.strip()):
            raise ArgumentTypeError(f"kabi.use: {op} must be a backend or kernel name (str) or None, got {choice!r}")
    outer = _active.get()
    merged = dict(outer.choices) if outer is not None else {}
    for op, choice in choices.items():
        if choice is None:
            merged.pop(op, None)
        else:
            merged[op] = choice
    if allow_failed_gate is None:
        allow_failed_gate = outer is not None and outer.allow_failed_gate
    token = _active.set(_intern(merged, allow_failed_gate, outer.execution_mode if outer is not None else "eager"))
    try:
        yield
    finally:
        _active.reset(token)


@contextlib.contextmanager
def execution(mode: str) -> Iterator[None]:
    """Select the calls inside the ``with`` block for ``mode``: ``"graph"`` (they will be captured in a CUDA graph
    and replayed) or ``"eager"``; the enclosing ``kabi.use`` choices stay. ``kabi.tuning(mode="graph")`` enters it.

    Example::

        >>> with execution("graph"):
        ...     kabi.ops.matmul(a, b)  # the pick measured under CUDA-graph replay, where one exists
    """
    if mode not in EXECUTION_MODES:
        raise InvalidArgumentError(f"execution mode must be one of {', '.join(map(repr, EXECUTION_MODES))}, got {mode!r}")
    outer = _active.get()
    choices = outer.choices if outer is not None else {}
    token = _active.set(_intern(choices, outer is not None and outer.allow_failed_gate, mode))
    try:
        yield
    finally:
        _active.reset(token)


def execution_mode() -> str:
    """The execution mode of the innermost scope: ``"graph"`` inside :func:`execution` ("graph"), else ``"eager"``."""
    scope = _active.get()
    return scope.execution_mode if scope is not None else "eager"


def cuda_graph_capturing(device: torch.device) -> bool:
    """Whether a CUDA graph is being captured on the current stream of ``device``'s type. Costs a call into the CUDA
    runtime, so only miss paths and decisions whose picks differ by mode ask; never for a CPU device, and never
    before CUDA is initialized (then no capture can be under way, and asking would initialize it)."""
    return (device.type == "cuda" and torch.cuda.is_available() and torch.cuda.is_initialized()
            and torch.cuda.is_current_stream_capturing())


def forced_choice(op: str) -> str | None:
    """The choice the innermost ``kabi.use`` scope makes for ``op``, or None."""
    scope = _active.get()
    return scope.choices.get(op) if scope is not None else None


def failed_gate_allowed() -> bool:
    """Whether the innermost ``kabi.use`` scope lets a forced kernel run although it failed the correctness gate."""
    scope = _active.get()
    return scope is not None and scope.allow_failed_gate


def environment_choice(op: str) -> str | None:
    """``op``'s entry of ``KABI_FORCE`` (which the core applies outside ``kabi.use`` scopes), or None.

    The core is the one reader of the variable, so what this reports is what selection does; a malformed value or
    an op named twice raises ``InvalidArgumentError`` quoting it."""
    return _core.environment_force(op)
