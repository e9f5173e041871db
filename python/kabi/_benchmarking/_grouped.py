"""``kabi bench`` for grouped_mm: problems from ``registry/ops/grouped_mm.toml`` suites (E experts, R routed rows,
N, K) in the 2-D x 3-D form a mixture-of-experts layer calls, with the rows spread over the experts by the suite's
routing, against the peers such a layer would call instead.

Routing (``BenchProblem.routing``): every row's expert drawn at random, uniformly ("balanced", also for a suite
without routings) or with probability proportional to 1 / rank over a random order of the experts ("zipf": a few hot
experts, many cold or empty). The draw is seeded by the problem's key through a stable hash (Python's own ``hash`` of a
string changes from process to process), so the inputs, the traffic counted for the roof and every implementation see
the same routing, in every run.

Peers:

- ``F.grouped_mm``: torch's own grouped GEMM;
- ``torch.mm loop``: one ``torch.mm`` per expert that received rows. It reads the offsets to the host on every call,
  as an MoE layer must when its router runs on the GPU: a routing changes from one call to the next, so no host copy
  of it outlives a call. (Runs before 2026-12-01's second session copied it once, outside the timing, so that the
  loop's launches overlapped the GPU's work as no serving loop's can; kabi's own loop candidate, which differs from
  that peer in this read alone, measured 0.1-4% slower than it on the H200.)
- ``flashinfer.SegmentGEMMWrapper``: FlashInfer's CUTLASS segment GEMM (its sm_90 kernel on Hopper), bf16 and fp16 on
  CUDA, where ``flashinfer-python`` is installed. It takes the weights as stored, column-major for the nn.Linear
  layout, and the segments as int64 ``[0, *offs]``, built once with the peer: FlashInfer's caller keeps its routing
  on the device in that form.

Traffic counts x, the weights of the experts that received rows only, the offsets and out.

Example::

    >>> from kabi._benchmarking._problems import BenchProblem
    >>> GROUPED_MM.flops(BenchProblem((8, 128, 64, 32), "float32", "transposed_b", "balanced"))
    524288
"""

from __future__ import annotations

import zlib

import torch
import torch.nn.functional as F

from ..ops._references import group_bounds
from ._peers import Peer
from ._problems import BenchProblem, OpBenchmark

__all__ = ["GROUPED_MM", "routed_offsets"]

_SEED = 0x6B616269


def routed_offsets(problem: BenchProblem) -> torch.Tensor:
    """The int32 cumulative end rows of the problem's routing (CPU), the same on every call."""
    experts, rows, _, _ = problem.shape
    generator = torch.Generator().manual_seed(_SEED + zlib.crc32(problem.key.encode()))
    if problem.routing == "zipf":
        order = torch.randperm(experts, generator=generator)
        weights = 1.0 / torch.arange(1, experts + 1, dtype=torch.float64)[order]
    else:
        weights = torch.ones(experts, dtype=torch.float64)
    chosen = torch.multinomial(weights, rows, replacement=True, generator=generator)
    return torch.bincount(chosen, minlength=experts).cumsum(0).to(torch.int32)


def _make_inputs(problem: BenchProblem, device: torch.device) -> tuple[torch.Tensor, ...]:
    """x [R, K]; w [E, K, N], or the transposed view of an nn.Linear [E, N, K] weight (``transposed_b``); offs."""
    experts, rows, n, k = problem.shape
    dtype = getattr(torch, problem.dtype)
    generator = torch.Generator(device=device).manual_seed(_SEED)
    x = torch.randn(rows, k, generator=generator, device=device).to(dtype)
    if problem.layout == "transposed_b":
        w = torch.randn(experts, n, k, generator=generator, device=device).to(dtype).mT
    else:
        w = torch.randn(experts, k, n, generator=generator, device=device).to(dtype)
    return x, w, routed_offsets(problem).to(device)


def _flops(problem: BenchProblem) -> int:
    _, rows, n, k = problem.shape
    return 2 * rows * n * k


def _bytes_moved(problem: BenchProblem) -> int:
    experts, rows, n, k = problem.shape
    offsets = routed_offsets(problem)
    counts = torch.diff(offsets, prepend=offsets.new_zeros(1))
    active = int((counts > 0).sum())
    element = torch.empty((), dtype=getattr(torch, problem.dtype)).element_size()
    return (rows * k + active * k * n + rows * n) * element + experts * offsets.element_size()


def _expert_loop(inputs: tuple[torch.Tensor, ...]):
    x, w, offs = inputs
    out = x.new_empty(x.shape[0], w.shape[-1])

    def run() -> torch.Tensor:
        for group, (start, end) in enumerate(group_bounds(offs.cpu(), x.shape[0])):
            if end > start:
                torch.mm(x[start:end], w[group], out=out[start:end])
        return out

    return run


# FlashInfer's advice for the segment GEMM's float workspace (its CUTLASS sm_90 kernels keep their arguments there).
_FLASHINFER_WORKSPACE_BYTES = 128 << 20


def _flashinfer_applies(problem: BenchProblem, device: torch.device) -> bool:
    return device.type == "cuda" and problem.dtype in ("bfloat16", "float16")


def _flashinfer_segment_gemm(inputs: tuple[torch.Tensor, ...]):
    import flashinfer

    x, w, offs = inputs
    column_major = w.mT.is_contiguous()
    weights = w.mT if column_major else w
    segments = torch.cat([offs.new_zeros(1), offs]).to(torch.int64)
    workspace = torch.empty(_FLASHINFER_WORKSPACE_BYTES, dtype=torch.int8, device=x.device)
    segment_gemm = flashinfer.SegmentGEMMWrapper(workspace)
    out = x.new_empty(x.shape[0], w.shape[-1])
    return lambda: segment_gemm.run(x, weights, w.shape[0], column_major, out=out, seg_indptr=segments)


GROUPED_MM = OpBenchmark(
    op="grouped_mm",
    make_inputs=_make_inputs,
    flops=_flops,
    bytes_moved=_bytes_moved,
    host_bound=lambda problem: False,
    # The goals: >= 1.15x F.grouped_mm as a geometric mean, never slower than it or the loop; its roof
    # goals (>= 0.8 of the roof at decode, 0.75 at prefill) are each problem's roof_fraction in the results.
    targets=(
        ("auto/oracle", "geomean", 0.98),
        ("auto/oracle", "min", 0.95),
        ("auto/F.grouped_mm", "geomean", 1.15),
        ("auto/F.grouped_mm", "min", 1.0),
        ("auto/torch.mm loop", "min", 1.0),
    ),
    peers=(
        Peer("F.grouped_mm", applies=lambda problem, device: True,
             build=lambda inputs: (lambda: F.grouped_mm(inputs[0], inputs[1], offs=inputs[2])),
             description="torch.nn.functional.grouped_mm: torch's grouped GEMM"),
        Peer("torch.mm loop", applies=lambda problem, device: True, build=_expert_loop,
             description="one torch.mm per expert that received rows, the offsets read to the host each call"),
        Peer("flashinfer.SegmentGEMMWrapper", applies=_flashinfer_applies, build=_flashinfer_segment_gemm,
             requires="flashinfer", description="FlashInfer's CUTLASS segment GEMM, weights as stored"),
    ),
)
