"""What a benchmarked op declares: how a suite's entries become problems, their inputs, their work and traffic,
and the peers to compare with. One :class:`OpBenchmark` per op; adding an op to ``kabi bench`` is one entry in
:data:`kabi._benchmarking._ops.OP_BENCHMARKS`, adding a peer is one entry in its ``peers``.

Example::

    >>> problem = BenchProblem((64, 48, 32), "float32", "row_major")
    >>> problem.key
    '64x48x32 float32 row_major'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch

from ._peers import Peer

__all__ = ["BenchProblem", "OpBenchmark"]


@dataclass(frozen=True)
class BenchProblem:
    """One measured problem: a suite shape, a dtype, a layout of the suite and, for a grouped op, a routing of the
    suite ("" for ops without groups)."""

    shape: tuple[int, ...]
    dtype: str
    layout: str
    routing: str = ""

    @property
    def key(self) -> str:
        """The problem's name in results and on plots; also what a resumed run matches on."""
        key = f"{'x'.join(map(str, self.shape))} {self.dtype} {self.layout}"
        return f"{key} {self.routing}" if self.routing else key


@dataclass(frozen=True)
class OpBenchmark:
    """How ``kabi bench`` measures one op.

    - ``make_inputs(problem, device)``: the positional inputs of one call, the same values on every call;
    - ``flops(problem)``: floating-point operations of one call;
    - ``bytes_moved(problem)``: bytes of one call if every input is read once and the output written once;
    - ``host_bound(problem)``: True where the call is so short that host time dominates eager calls (decode):
      such problems are also timed as CUDA-graph replays, and that figure is the one compared;
    - ``peers``: what a user would call instead, each applying where its predicate says;
    - ``output_dtype(problem)``: the dtype of the output, which picks the gate's tolerance (default: the problem's
      dtype; scaled_mm's FP8 inputs give a bfloat16 output);
    - ``attributes(problem)``: the op's attributes kabi's calls pass, as keywords (default none: the schema's
      defaults; scaled_mm's ``*_fast_accum`` layouts pass use_fast_accum=True);
    - ``targets``: (ratio, statistic, goal) the results are judged by (default: matmul's, ``_results.TARGETS``).
    """

    op: str
    make_inputs: Callable[[BenchProblem, torch.device], tuple[Any, ...]]
    flops: Callable[[BenchProblem], int]
    bytes_moved: Callable[[BenchProblem], int]
    host_bound: Callable[[BenchProblem], bool]
    peers: tuple[Peer, ...]
    output_dtype: Callable[[BenchProblem], str] = lambda problem: problem.dtype
    attributes: Callable[[BenchProblem], dict[str, Any]] = lambda problem: {}
    targets: tuple[tuple[str, str, float], ...] | None = None
