"""The per-op decision caches and their invalidation.

Each op front keeps a dict from its dispatch key to a ready-to-call implementation, and beside it the output facts
(shape, dtype, device) each decision's problem produces, against which a caller's ``out=`` is checked, and the name
of each decision's kernel, which the error of a kernel that fails on a hit names. All are cleared together and
bounded together. Anything that can change a selection of an op moves that op's generation
in the core (``kabi_op_generation``): registering or unregistering one of its kernels, a plugin load that
registered kernels of it, a tuning store for it, and replacing or clearing the tuning cache (every op's). The C hit
path of two-input ops treats a call under a new generation as a miss, and a miss that sees a new generation clears
the cache before storing, so changes made behind Python's back (a C++ caller registering into the same libkabi)
are caught too, and tuning one op leaves every other op's decisions standing. ``invalidate_all()`` clears every op
at once.

In front of each dict sits a ``memo`` (``kabi._core.DecisionMemo``): the C hit path's table keyed by raw tensor
metadata, filled only from dict hits. It is cleared right after its dict, so it never outlives a decision. It also
counts the front's hits and misses (``decision_counts``, reported by ``kabi.stats()``).

Storing is guarded so that a decision selected against an older kernel table is never stored after an
invalidation: ``store`` compares the generation seen before selection with the current one, under the same lock
``invalidate_all`` takes.

Example::

    >>> cache = DecisionCache("matmul")
    >>> generation = cache.begin_miss()
    >>> cache.store(key, implementation, expected_output, generation)
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

from .. import _core

__all__ = ["DecisionCache", "decision_counts", "invalidate_all", "reset_decision_counts"]

# As many decisions as the C memo keeps (csrc/python/decision_memo.hpp): past it a process that sees endlessly many
# shapes starts over instead of growing without bound.
MAX_DECISIONS = 4096

_lock = threading.Lock()
_caches: weakref.WeakSet[DecisionCache] = weakref.WeakSet()


class DecisionCache:
    """Decisions of one op: ``entries`` maps a dispatch key to an implementation, ``expected_outputs`` the same key
    to the (shape, dtype, device) of the result, ``kernels`` the same key to the kernel's name. Reads need no lock.

    The generation the decisions were made under is kept in the memo (``memo.generation``), where the C hit path
    compares it with the op's on every call."""

    __slots__ = ("op", "entries", "expected_outputs", "kernels", "memo", "__weakref__")

    def __init__(self, op: str) -> None:
        self.op = op
        self.entries: dict[Any, Callable[..., Any]] = {}
        self.expected_outputs: dict[Any, Any] = {}
        self.kernels: dict[Any, str] = {}
        self.memo = _core.DecisionMemo()
        self.memo.generation = _core.op_generation(op)
        with _lock:
            _caches.add(self)

    def begin_miss(self) -> int:
        """Call before selecting on a miss: drops stale entries and returns the generation to store against."""
        generation = _core.op_generation(self.op)
        if generation != self.memo.generation:
            with _lock:
                self._reset(generation)
        return generation

    def store(self, key: Any, implementation: Callable[..., Any], expected_output: Any, generation: int,
              kernel: str = "") -> None:
        """Remember a decision made at ``generation``, its problem's output facts and its kernel's name, unless the
        op's kernels or tuning records have changed since."""
        with _lock:
            if _core.op_generation(self.op) == generation == self.memo.generation:
                if len(self.entries) >= MAX_DECISIONS:
                    self._reset(generation)
                # The output facts first: a hit path that finds the entry finds its facts.
                self.expected_outputs[key] = expected_output
                self.kernels[key] = kernel
                self.entries[key] = implementation

    def expected_output(self, key: Any) -> Any | None:
        """The output facts of the decision stored under ``key``, or None once it has been forgotten."""
        return self.expected_outputs.get(key)

    def kernel(self, key: Any) -> str | None:
        """The name of the kernel of the decision stored under ``key``, or None once it has been forgotten."""
        return self.kernels.get(key)

    def clear(self) -> None:
        with _lock:
            self._reset(_core.op_generation(self.op))

    def _reset(self, generation: int) -> None:
        # The dict first: a hit path running in between may still copy a dict entry into the memo, and the memo's
        # clear after it removes that copy too.
        self.entries.clear()
        self.memo.clear()
        self.expected_outputs.clear()
        self.kernels.clear()
        self.memo.generation = generation


def invalidate_all() -> None:
    """Forget every cached decision of every op (after anything that can change a selection)."""
    with _lock:
        for cache in list(_caches):
            cache._reset(_core.op_generation(cache.op))


def decision_counts() -> tuple[int, int]:
    """Calls of every op front answered from its decisions, and calls that went to its miss path."""
    with _lock:
        caches = list(_caches)
    return sum(cache.memo.hits for cache in caches), sum(cache.memo.misses for cache in caches)


def reset_decision_counts() -> None:
    """Zero every op front's hit and miss counts."""
    with _lock:
        for cache in list(_caches):
            cache.memo.reset_counts()
