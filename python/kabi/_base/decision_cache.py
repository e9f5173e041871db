"""The per-op decision tables and their invalidation.

Each op front remembers its decisions in one C-owned, bounded table (``kabi._core.DecisionTable``,
csrc/python/decision_table.hpp): keyed by the raw facts of a call (each input's dtype, device, shape, strides and
requires_grad, every attribute's value, the active ``kabi.use`` scope), holding the ready-to-call implementation,
the output descriptors a caller's ``out=`` is checked against, and the kernel's name. The front's hit path
(csrc/python/front.cpp) reads it without building any Python object.

Anything that can change a selection of an op moves that op's generation in the core (``kabi_op_generation``):
registering or unregistering one of its kernels, a plugin load that registered kernels of it, a tuning store for
it, and replacing or clearing the tuning cache (every op's). A table never stores a decision selected under another
generation than its own, and a front whose table lags the op's generation takes the miss path, whose
``begin_miss()`` empties it; so changes made behind Python's back (a C++ caller registering into the same libkabi)
are caught too, and tuning one op, or registering a kernel of it, leaves every other op's decisions standing.
Registration needs nothing more: ``invalidate_all()``, which empties every table at once, is for starting over (a
test that wants a fresh process's first calls).

Example::

    >>> table = decision_table("matmul", attributes=())
    >>> generation = table.begin_miss()
    >>> table.store(inputs, attributes, scope, implementation, outputs, kernel_name, generation)
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence

import torch

from .. import _core
from .tensors import dispatch_facts

__all__ = ["decision_counts", "decision_table", "invalidate_all", "reset_decision_counts"]

_tables: weakref.WeakSet[_core.DecisionTable] = weakref.WeakSet()


def decision_table(op: str, attributes: Sequence[tuple]) -> _core.DecisionTable:
    """A new decision table for ``op``, whose attributes are ``(kind, enum values)`` or ``(kind, enum values, enum
    aliases)`` in schema order (an alias, or None, per enum value: an object a call may pass for it, matched by
    identity): plain tensors (``torch.Tensor``, ``nn.Parameter``) are read in C through DLPack's exchange API,
    anything else through :func:`kabi._base.tensors.dispatch_facts`."""
    specs = [(kind, list(values), *map(list, aliases)) for kind, values, *aliases in attributes]
    table = _core.DecisionTable(op, specs, [torch.Tensor, torch.nn.Parameter], dispatch_facts)
    _tables.add(table)
    return table


def invalidate_all() -> None:
    """Forget every remembered decision of every op, so that each next call misses as a new process's would.
    Nothing that changes a selection needs it: that moves the op's generation, which the tables follow."""
    for table in list(_tables):
        table.clear()


def decision_counts() -> tuple[int, int]:
    """Calls of every op front answered from its decisions, and calls that went to its miss path."""
    tables = list(_tables)
    return sum(table.hits for table in tables), sum(table.misses for table in tables)


def reset_decision_counts() -> None:
    """Zero every op front's hit and miss counts."""
    for table in list(_tables):
        table.reset_counts()
