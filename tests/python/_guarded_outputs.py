"""Outputs inside poisoned buffers, for the GPU tests of native kernels: a kernel that writes past its output shows up
as a changed guard. This is the memory-safety check where compute-sanitizer cannot run. Not a test module."""

from __future__ import annotations

import math

import torch

# Elements of poison on each side of an output.
GUARD = 4096
POISON = -7.0


def guarded_output(shape: tuple, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """An output of ``shape`` inside a poisoned CUDA buffer (16-byte aligned), and the buffer."""
    count = math.prod(shape)
    buffer = torch.full((GUARD + count + GUARD,), POISON, dtype=dtype, device="cuda")
    return buffer[GUARD:GUARD + count].view(shape), buffer


def assert_guards_intact(buffer: torch.Tensor, kernel: str) -> None:
    guards = torch.cat([buffer[:GUARD], buffer[-GUARD:]])
    assert bool((guards == POISON).all()), f"{kernel} wrote outside its output"
