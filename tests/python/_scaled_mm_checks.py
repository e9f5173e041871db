"""Shared by the scaled_mm tests: fresh FP8 inputs of either scale kind, and the op's own gate check against the
float64 reference with the tolerances of registry/ops/scaled_mm.toml. Not a test module (no ``test_`` prefix)."""

from __future__ import annotations

import torch

from kabi._base.declarations import op_spec
from kabi._selection.correctness import check_output, reference_output
from kabi.ops import _references

TOLERANCE = op_spec("scaled_mm").tolerance
OUT_DTYPES = ("bfloat16", "float16", "float32")
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
# scale_a's and scale_b's kind in turn: per tensor, row-wise, and each mixed with the other.
SCALE_KINDS = (("tensor", "tensor"), ("row", "row"), ("tensor", "row"), ("row", "tensor"))


def make_inputs(m: int, n: int, k: int, *, a_dtype: torch.dtype = torch.float8_e4m3fn,
                b_dtype: torch.dtype = torch.float8_e4m3fn, scales: tuple[str, str] = ("tensor", "tensor"),
                bias_dtype: str | None = None, seed: int = 0, device: str = "cpu"):
    """a [M, K]; b the transposed view of an [N, K] weight; scales in [0.5, 2) of the given kinds; a bias of
    ``bias_dtype`` or None. FP8 data uniform in [-1, 1) before rounding: never all zeros."""
    generator = torch.Generator().manual_seed(seed)
    a = (torch.rand(m, k, generator=generator) * 2 - 1).to(a_dtype)
    b = (torch.rand(n, k, generator=generator) * 2 - 1).to(b_dtype).t()
    scale_a = torch.rand((m, 1) if scales[0] == "row" else (), generator=generator) * 1.5 + 0.5
    scale_b = torch.rand((1, n) if scales[1] == "row" else (), generator=generator) * 1.5 + 0.5
    bias = None if bias_dtype is None else torch.randn(n, generator=generator).to(getattr(torch, bias_dtype))
    return tuple(None if tensor is None else tensor.to(device) for tensor in (a, b, scale_a, scale_b, bias))


def verdict(out: torch.Tensor, a, b, scale_a, scale_b, bias, out_dtype: str) -> str | None:
    """None when ``out`` is the float64 reference within the op's tolerance for ``out_dtype``, else why not."""
    reference = reference_output(_references.scaled_mm, [a, b, scale_a, scale_b, bias])
    return check_output(out, reference, TOLERANCE[out_dtype], expected_dtype=getattr(torch, out_dtype))
