"""The hardware's limit, measured in the same run as the problems: the matrix rate per dtype and the copy
bandwidth. A problem's roof time is ``max(flops / rate, bytes / bandwidth)``; its fraction of the roof is that time
over the measured one.

The matrix rate is the best of torch.matmul and torch.matmul under cuBLASLt (CUDA) on a large square GEMM (8192 on
a GPU; 1024 on the CPU, which finishes in about a second); for an FP8 dtype, torch._scaled_mm's (per-tensor scales,
a bfloat16 output, b column-major as cuBLASLt wants it). The copy bandwidth is that of a large device-to-device
copy, counting the bytes read and the bytes written.

Example::

    >>> roof = Roof(matrix_tflops={"float32": 0.1}, copy_gbps=10.0, matrix_size=1024, copy_bytes=2**27)
    >>> roof.time_us("float32", flops=2 * 1024**3, bytes_moved=3 * 4 * 1024**2)
    21474.83648
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import torch

from .._selection.bench import bench
from ._peers import preferred_blas

__all__ = ["Roof", "measure_roof"]

_MATRIX_SIZE = {"cuda": 8192, "cpu": 1024}
_COPY_BYTES = {"cuda": 2 * 1024**3, "cpu": 128 * 1024**2}


@dataclass(frozen=True)
class Roof:
    """Measured limits: TFLOP/s of a large GEMM per dtype, GB/s of a large copy (read + written)."""

    matrix_tflops: Mapping[str, float]
    copy_gbps: float
    matrix_size: int
    copy_bytes: int

    def time_us(self, dtype: str, flops: int, bytes_moved: int) -> float:
        """The least time a problem of this work and traffic can take on the measured machine."""
        return max(flops / (self.matrix_tflops[dtype] * 1e6), bytes_moved / (self.copy_gbps * 1e3))

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "matrix_tflops": dict(self.matrix_tflops)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Roof:
        return cls(dict(data["matrix_tflops"]), data["copy_gbps"], data["matrix_size"], data["copy_bytes"])


def _matrix_tflops(dtype: str, device: torch.device, size: int) -> float:
    generator = torch.Generator(device=device).manual_seed(0)
    a, b = (torch.randn(size, size, generator=generator, device=device).to(getattr(torch, dtype)) for _ in range(2))
    if dtype.startswith("float8"):
        one = torch.ones((), device=device)
        b = b.mT.contiguous().mT
        timing = bench(lambda: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16), repeat=5, min_time_s=0.2,
                       device=device)
        return 2 * size**3 / (timing.median_us * 1e6)
    libraries = [None, "cublaslt"] if device.type == "cuda" else [None]
    best_us = float("inf")
    for library in libraries:
        if library is None:
            timing = bench(lambda: torch.matmul(a, b), repeat=5, min_time_s=0.2, device=device)
        else:
            with preferred_blas(library):
                timing = bench(lambda: torch.matmul(a, b), repeat=5, min_time_s=0.2, device=device)
        best_us = min(best_us, timing.median_us)
    return 2 * size**3 / (best_us * 1e6)


def _copy_gbps(device: torch.device, copy_bytes: int) -> float:
    source = torch.empty(copy_bytes // 2, dtype=torch.uint8, device=device).fill_(1)
    target = torch.empty_like(source)
    timing = bench(lambda: target.copy_(source), repeat=7, min_time_s=0.2, device=device)
    return copy_bytes / (timing.median_us * 1e3)


def measure_roof(device: torch.device, dtypes: Sequence[str]) -> Roof:
    """Measure the matrix rate of each dtype and the copy bandwidth on ``device``."""
    size, copy_bytes = _MATRIX_SIZE[device.type], _COPY_BYTES[device.type]
    return Roof(
        matrix_tflops={dtype: _matrix_tflops(dtype, device, size) for dtype in dtypes},
        copy_gbps=_copy_gbps(device, copy_bytes),
        matrix_size=size,
        copy_bytes=copy_bytes,
    )
