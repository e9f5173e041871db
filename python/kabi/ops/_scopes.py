"""Forcing a backend or a kernel: ``kabi.use(matmul="torch")`` and its environment twin ``KABI_FORCE``.

``use`` is a context manager backed by a ContextVar, so scopes nest (inner choices override outer ones, op by op)
and each thread and asyncio task sees its own. A choice is a backend name ("torch", "cpu", "triton": then the usual
rules pick among that backend's kernels) or a kernel name ("cpu.openblas.gemm"). Outside any scope, the core reads
``KABI_FORCE="matmul=torch,other=cpu"`` itself. A forced choice with no eligible kernel fails the call with
``NoEligibleKernelError`` naming the choice and why each candidate was rejected; so does a forced kernel that failed
the correctness gate on the problem, unless the scope says ``allow_failed_gate=True``.

The active scope is an interned object, so the op fronts put it in their decision-cache keys at the cost of one
ContextVar read and one identity hash.

Example::

    >>> with kabi.use(matmul="torch"):
    ...     kabi.ops.matmul(a, b)  # runs torch.matmul.cpu
"""

from __future__ import annotations

import contextlib
import threading
from contextvars import ContextVar
from typing import Iterator, Mapping

from .. import _core
from .._base.errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["ForcedChoices", "active_scope", "environment_choice", "failed_gate_allowed", "forced_choice", "use"]


class ForcedChoices:
    """An immutable op -> choice mapping, interned: equal mappings are the same object."""

    __slots__ = ("choices", "allow_failed_gate")

    def __init__(self, choices: Mapping[str, str], allow_failed_gate: bool = False) -> None:
        self.choices = dict(choices)
        self.allow_failed_gate = allow_failed_gate

    def __repr__(self) -> str:
        return f"ForcedChoices({self.choices!r}, allow_failed_gate={self.allow_failed_gate})"


_active: ContextVar[ForcedChoices | None] = ContextVar("kabi_forced_choices", default=None)
# The op fronts read the variable directly (the C hit path takes the ContextVar itself).
scope_variable = _active
active_scope = _active.get
_interned: dict[tuple[frozenset[tuple[str, str]], bool], ForcedChoices] = {}
_intern_lock = threading.Lock()


def _intern(choices: Mapping[str, str], allow_failed_gate: bool) -> ForcedChoices | None:
    if not choices and not allow_failed_gate:
        return None
    key = (frozenset(choices.items()), allow_failed_gate)
    with _intern_lock:
        scope = _interned.get(key)
        if scope is None:
            scope = _interned[key] = ForcedChoices(choices, allow_failed_gate)
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
    token = _active.set(_intern(merged, allow_failed_gate))
    try:
        yield
    finally:
        _active.reset(token)


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
