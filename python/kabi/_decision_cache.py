"""The per-op decision caches and their invalidation.

Each op front keeps a dict from its dispatch key to a ready-to-call implementation. Anything that can change a
selection — registering or unregistering a kernel, loading a plugin or device binaries, changing the tuning cache —
calls ``invalidate_all()``. Changes made behind Python's back (a C++ caller registering into the same libkabi) are
caught on the next call through ``kabi_registry_generation``: the C hit path of two-input ops treats a call under a
new generation as a miss, and a miss that sees a new generation clears the cache before storing.

In front of each dict sits a ``memo`` (``kabi._core.DecisionMemo``): the C hit path's table keyed by raw tensor
metadata, filled only from dict hits. It is cleared right after its dict, so it never outlives a decision.

Storing is guarded so that a decision selected against an older kernel table is never stored after an
invalidation: ``store`` compares the generation seen before selection with the current one, under the same lock
``invalidate_all`` takes.

Example::

    >>> cache = DecisionCache("matmul")
    >>> generation = cache.begin_miss()
    >>> cache.store(key, implementation, generation)
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

from . import _core

__all__ = ["DecisionCache", "invalidate_all"]

_lock = threading.Lock()
_caches: weakref.WeakSet[DecisionCache] = weakref.WeakSet()


class DecisionCache:
    """Decisions of one op: ``entries`` maps a dispatch key to an implementation. Reads need no lock.

    The generation the decisions were made under is kept in the memo (``memo.generation``), where the C hit path
    compares it with the registry's on every call."""

    __slots__ = ("op", "entries", "memo", "__weakref__")

    def __init__(self, op: str) -> None:
        self.op = op
        self.entries: dict[Any, Callable[..., Any]] = {}
        self.memo = _core.DecisionMemo()
        self.memo.generation = _core.registry_generation()
        with _lock:
            _caches.add(self)

    def begin_miss(self) -> int:
        """Call before selecting on a miss: drops stale entries and returns the generation to store against."""
        generation = _core.registry_generation()
        if generation != self.memo.generation:
            with _lock:
                self._reset(generation)
        return generation

    def store(self, key: Any, implementation: Callable[..., Any], generation: int) -> None:
        """Remember a decision made at ``generation``, unless the kernel table has changed since."""
        with _lock:
            if _core.registry_generation() == generation == self.memo.generation:
                self.entries[key] = implementation

    def clear(self) -> None:
        with _lock:
            self._reset(_core.registry_generation())

    def _reset(self, generation: int) -> None:
        # The dict first: a hit path running in between may still copy a dict entry into the memo, and the memo's
        # clear after it removes that copy too.
        self.entries.clear()
        self.memo.clear()
        self.memo.generation = generation


def invalidate_all() -> None:
    """Forget every cached decision of every op (after anything that can change a selection)."""
    with _lock:
        generation = _core.registry_generation()
        for cache in list(_caches):
            cache._reset(generation)
