"""``kabi bench`` for linear: problems from ``registry/ops/linear.toml`` suites (rows of x, N, K), called as Llama's
projections call it, with no bias and no activation, against the peers a model would call instead.

Peers, each where it applies:

- ``F.linear``: torch.nn.functional.linear (cuBLAS on CUDA, ATen's BLAS on the CPU);
- ``F.linear (cuBLASLt)``: the same with ``torch.backends.cuda.preferred_blas_library("cublaslt")``;
- ``torch.compile``: Inductor's max-autotune choice for the same F.linear (CUDA only, as for matmul);
- ``flashinfer.mm_bf16``: FlashInfer's bf16 GEMM on the weight as stored (its column-major b), the rows of x
  flattened into M, where ``flashinfer-python`` is installed.

Example::

    >>> from kabi._benchmarking._problems import BenchProblem
    >>> LINEAR.flops(BenchProblem((16, 24, 40), "float32", "row_major"))
    30720
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..ops._inputs import problem_inputs
from ._peers import Peer, inductor, preferred_blas
from ._problems import BenchProblem, OpBenchmark

__all__ = ["LINEAR"]

# As for matmul: few rows run in microseconds, where host time dominates eager calls; those are also timed as
# CUDA-graph replays.
_HOST_BOUND_MAX_ROWS = 64


def _dimensions(problem: BenchProblem) -> tuple[int, int, int]:
    *rows, n, k = problem.shape
    return math.prod(rows), n, k


def _make_inputs(problem: BenchProblem, device: torch.device) -> tuple[torch.Tensor | None, ...]:
    """x of [rows..., K] and the weight as an nn.Linear stores it, [N, K]; no bias."""
    *rows, n, k = problem.shape
    return problem_inputs("linear", {"N": n, "K": k}, rows, problem.dtype, device=device)


def _flops(problem: BenchProblem) -> int:
    rows, n, k = _dimensions(problem)
    return 2 * rows * n * k


def _bytes_moved(problem: BenchProblem) -> int:
    rows, n, k = _dimensions(problem)
    return (rows * k + n * k + rows * n) * torch.empty((), dtype=getattr(torch, problem.dtype)).element_size()


def _host_bound(problem: BenchProblem) -> bool:
    return _dimensions(problem)[0] <= _HOST_BOUND_MAX_ROWS


def _on_cuda(problem: BenchProblem, device: torch.device) -> bool:
    return device.type == "cuda"


def _flashinfer_applies(problem: BenchProblem, device: torch.device) -> bool:
    return device.type == "cuda" and problem.dtype == "bfloat16"


def _flashinfer_mm(inputs: tuple[torch.Tensor | None, ...]):
    import flashinfer

    x, weight = inputs[0], inputs[1]
    rows = x.reshape(-1, x.shape[-1])
    return lambda: flashinfer.mm_bf16(rows, weight.mT).view(*x.shape[:-1], weight.shape[0])


LINEAR = OpBenchmark(
    op="linear",
    make_inputs=_make_inputs,
    flops=_flops,
    bytes_moved=_bytes_moved,
    host_bound=_host_bound,
    peers=(
        Peer("F.linear", applies=lambda problem, device: True,
             build=lambda inputs: (lambda: F.linear(*inputs)),
             description="torch.nn.functional.linear: cuBLAS on CUDA"),
        Peer("F.linear (cuBLASLt)", applies=_on_cuda, build=lambda inputs: (lambda: F.linear(*inputs)),
             scope=lambda: preferred_blas("cublaslt"),
             description="torch.nn.functional.linear with preferred_blas_library('cublaslt')"),
        Peer("torch.compile", applies=_on_cuda, build=inductor(F.linear),
             description="torch.compile(F.linear, mode='max-autotune-no-cudagraphs')"),
        Peer("flashinfer.mm_bf16", applies=_flashinfer_applies, build=_flashinfer_mm, requires="flashinfer",
             description="FlashInfer's bf16 GEMM on the weight as stored"),
    ),
)
