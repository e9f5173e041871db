"""``kabi bench`` for matmul: problems from ``registry/ops/matmul.toml`` suites, and the peers a user would call.

Peers, each where it applies:

- ``torch.matmul``: cuBLAS on CUDA (torch's default library), MKL/OpenBLAS-backed ATen on the CPU;
- ``F.linear``: where b is an nn.Linear weight (layout ``transposed_b``, no batch), as a model calls it;
- ``torch.matmul (cuBLASLt)``: torch.matmul with ``torch.backends.cuda.preferred_blas_library("cublaslt")``;
- ``torch.compile``: Inductor's max-autotune choice for the same product (CUDA only: on the CPU it needs a C++
  toolchain and minutes per shape, and the targets it serves are GPU targets);
- ``flashinfer.mm_bf16`` / ``flashinfer.bmm_bf16``: FlashInfer's bf16 GEMMs, which take b column-major (layout
  ``transposed_b``), where ``flashinfer-python`` is installed.

Example::

    >>> from kabi._benchmarking._problems import BenchProblem
    >>> MATMUL.flops(BenchProblem((2, 16, 24, 40), "float32", "row_major"))
    61440
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from ..ops._inputs import problem_inputs
from ._peers import Peer, inductor, preferred_blas
from ._problems import BenchProblem, OpBenchmark

__all__ = ["MATMUL"]

# Decode-like problems (few rows) run in microseconds: host time dominates eager calls, so they are also timed as
# CUDA-graph replays, as a served model runs them.
_HOST_BOUND_MAX_M = 64


def _dimensions(problem: BenchProblem) -> tuple[int, int, int, int]:
    *batch, m, n, k = problem.shape
    return math.prod(batch), m, n, k


def _make_inputs(problem: BenchProblem, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The op's generated inputs; for ``transposed_b``, b as the transposed view of a contiguous [..., N, K]."""
    *batch, m, n, k = problem.shape
    a, b = problem_inputs("matmul", {"M": m, "N": n, "K": k}, batch, problem.dtype, device=device)
    return a, b.mT.contiguous().mT if problem.layout == "transposed_b" else b


def _flops(problem: BenchProblem) -> int:
    batch, m, n, k = _dimensions(problem)
    return 2 * batch * m * n * k


def _bytes_moved(problem: BenchProblem) -> int:
    batch, m, n, k = _dimensions(problem)
    return batch * (m * k + k * n + m * n) * torch.empty((), dtype=getattr(torch, problem.dtype)).element_size()


def _host_bound(problem: BenchProblem) -> bool:
    return _dimensions(problem)[1] <= _HOST_BOUND_MAX_M


def _on_cuda(problem: BenchProblem, device: torch.device) -> bool:
    return device.type == "cuda"


def _linear_weight(problem: BenchProblem, device: torch.device) -> bool:
    return problem.layout == "transposed_b" and len(problem.shape) == 3


def _flashinfer_applies(batched: bool):
    def applies(problem: BenchProblem, device: torch.device) -> bool:
        return (device.type == "cuda" and problem.dtype == "bfloat16" and problem.layout == "transposed_b"
                and (len(problem.shape) == 4) == batched)

    return applies


def _flashinfer_mm(inputs: tuple[Any, ...]):
    import flashinfer

    a, b = inputs
    return lambda: flashinfer.mm_bf16(a, b)


def _flashinfer_bmm(inputs: tuple[Any, ...]):
    import flashinfer

    a, b = inputs
    return lambda: flashinfer.bmm_bf16(a, b)


MATMUL = OpBenchmark(
    op="matmul",
    make_inputs=_make_inputs,
    flops=_flops,
    bytes_moved=_bytes_moved,
    host_bound=_host_bound,
    peers=(
        Peer("torch.matmul", applies=lambda problem, device: True,
             build=lambda inputs: (lambda: torch.matmul(*inputs)),
             description="torch.matmul: cuBLAS on CUDA"),
        Peer("F.linear", applies=_linear_weight,
             build=lambda inputs: (lambda a=inputs[0], weight=inputs[1].mT: F.linear(a, weight)),
             description="torch.nn.functional.linear on the nn.Linear weight"),
        Peer("torch.matmul (cuBLASLt)", applies=_on_cuda,
             build=lambda inputs: (lambda: torch.matmul(*inputs)), scope=lambda: preferred_blas("cublaslt"),
             description="torch.matmul with preferred_blas_library('cublaslt')"),
        Peer("torch.compile", applies=_on_cuda, build=inductor(torch.matmul),
             description="torch.compile(torch.matmul, mode='max-autotune-no-cudagraphs')"),
        Peer("flashinfer.mm_bf16", applies=_flashinfer_applies(batched=False), build=_flashinfer_mm,
             requires="flashinfer", description="FlashInfer's bf16 GEMM (b column-major)"),
        Peer("flashinfer.bmm_bf16", applies=_flashinfer_applies(batched=True), build=_flashinfer_bmm,
             requires="flashinfer", description="FlashInfer's batched bf16 GEMM (b column-major)"),
    ),
)
