"""The ops ``kabi bench`` can measure, by name: one :class:`OpBenchmark` entry per op.

Example::

    >>> op_benchmark("matmul").peers[0].name
    'torch.matmul'
"""

from __future__ import annotations

from .._base.errors import NotFoundError
from ._grouped import GROUPED_MM
from ._linear import LINEAR
from ._matmul import MATMUL
from ._problems import OpBenchmark
from ._scaled_mm import SCALED_MM

__all__ = ["OP_BENCHMARKS", "op_benchmark"]

OP_BENCHMARKS: dict[str, OpBenchmark] = {benchmark.op: benchmark for benchmark in (MATMUL, LINEAR, SCALED_MM,
                                                                                   GROUPED_MM)}


def op_benchmark(op: str) -> OpBenchmark:
    """How to benchmark ``op``; ``NotFoundError`` naming the ops kabi bench knows otherwise."""
    try:
        return OP_BENCHMARKS[op]
    except KeyError:
        raise NotFoundError(f"kabi bench: op must be one of {', '.join(OP_BENCHMARKS)}, got {op!r}") from None
