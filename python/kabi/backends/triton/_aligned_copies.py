"""``triton.matmul.aligned_copies``: torch.matmul.aligned_copies.cuda's composition (zero-padded copies of a and b,
cuBLAS's product of them, the product's first N columns copied out; ``torch_native.aligned_product``) with each
copy one pass of the Triton copy kernel instead of torch's strided copies and zero fills.

On the H200 torch's copies took 57 + 57 + 45 us of the 310 us that the torch composition takes at 4093x4099x4091
bfloat16, whose product of the padded copies takes 179 us (benchmarks/results/debug-aligned-copies-nvidia-h200.txt).
Importing this module imports no Triton; the first copy does.

Example::

    c = launch_aligned_copies(a, b)   # a @ b, a [M, K] and b [K, N] of a 2-byte dtype, K or N not a multiple of 8
"""

from __future__ import annotations

import torch

from ..torch_native import aligned_product
from ._configs import ceil_div
from ._kernel_modules import COPY_KERNELS

__all__ = ["copy_into", "launch_aligned_copies"]

# 2048 elements a program, a row's 256 columns read by the 128 threads of four warps.
_BLOCK_ROWS = 8
_BLOCK_COLUMNS = 256
_NUM_WARPS = 4


def copy_into(source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """One pass of the Triton copy kernel: target holds source where the two overlap and zeros in the rest of it
    (``torch_native.CopyInto``); returns target."""
    rows, columns = source.shape
    target_rows, target_columns = target.shape
    if target.numel() == 0:
        return target
    grid = (ceil_div(target_rows, _BLOCK_ROWS) * ceil_div(target_columns, _BLOCK_COLUMNS),)
    COPY_KERNELS.padded_copy_kernel[grid](
        source, target, rows, columns, *source.stride(), target_rows, target_columns, *target.stride(),
        BLOCK_ROWS=_BLOCK_ROWS, BLOCK_COLUMNS=_BLOCK_COLUMNS, num_warps=_NUM_WARPS)
    return target


def launch_aligned_copies(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """``a @ b`` for 2-D a and b (float16 or bfloat16) through zero-padded copies made by the Triton copy kernel;
    written into ``out`` and returned when it is given."""
    return aligned_product(a, b, out, copy_into)
