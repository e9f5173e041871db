"""Shared by the scaled_mm tests: fresh FP8 inputs of either scale kind, the op's own gate check against the
float64 reference with the tolerances of registry/ops/scaled_mm.toml, and the CUDA plugin's FP8 kernels as
selection sees them and forced in turn. Not a test module (no ``test_`` prefix)."""

from __future__ import annotations

import torch

import kabi
from kabi import _core
from kabi._base.declarations import op_spec
from kabi._selection.correctness import check_output, reference_output
from kabi.ops import _references

from _guarded_outputs import guarded_output

TOLERANCE = op_spec("scaled_mm").tolerance
CUDA_PLUGIN = "kabi-cuda"
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


def with_strided_row_scales(inputs: tuple) -> tuple:
    """The inputs with their row-wise scales moved into views whose stride along M (scale_a) or N (scale_b) is 3;
    per-tensor scales as they are."""
    a, b, scale_a, scale_b, bias = inputs
    if scale_a.dim():
        scale_a = torch.empty(scale_a.shape[0], 3, device=scale_a.device)[:, :1].copy_(scale_a)
    if scale_b.dim():
        scale_b = torch.empty(1, 3 * scale_b.shape[1], device=scale_b.device)[:, ::3].copy_(scale_b)
    return a, b, scale_a, scale_b, bias


def verdict(out: torch.Tensor, a, b, scale_a, scale_b, bias, out_dtype: str) -> str | None:
    """None when ``out`` is the float64 reference within the op's tolerance for ``out_dtype``, else why not."""
    reference = reference_output(_references.scaled_mm, [a, b, scale_a, scale_b, bias])
    return check_output(out, reference, TOLERANCE[out_dtype], expected_dtype=getattr(torch, out_dtype))


def cuda_plugin_kernels() -> list[str]:
    """The names of the CUDA plugin's scaled_mm kernels (the plugin loaded first)."""
    _core.plugin_load_builtin()
    return sorted(kernel["name"] for kernel in _core.kernel_list()
                  if kernel["plugin"] == CUDA_PLUGIN and kernel["op"] == "scaled_mm")


def cuda_plugin_candidates(inputs: tuple, out_dtype: str, use_fast_accum: bool = False) -> dict[str, object]:
    """The CUDA plugin's scaled_mm kernels as selection sees the call: name -> Candidate (eligible, or why not)."""
    explained = kabi.explain(kabi.ops.scaled_mm, *inputs, out_dtype=out_dtype, use_fast_accum=use_fast_accum)
    return {candidate.name: candidate for candidate in explained.candidates if candidate.kernel.plugin == CUDA_PLUGIN}


def run_forced(name: str, inputs: tuple, out_dtype: str, use_fast_accum: bool = False):
    """kabi.ops.scaled_mm forced to ``name``, writing into a guarded output; the output and its buffer."""
    m, n = inputs[0].shape[0], inputs[1].shape[1]
    out, buffer = guarded_output((m, n), getattr(torch, out_dtype))
    with kabi.use(scaled_mm=name):
        kabi.ops.scaled_mm(*inputs, out_dtype=out_dtype, use_fast_accum=use_fast_accum, out=out)
    torch.cuda.synchronize()
    return out, buffer
