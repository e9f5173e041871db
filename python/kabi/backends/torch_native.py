"""The torch-native backend: each op through torch itself, on every device torch runs on.

Its kernels are declared in ``registry/kernels/torch/<op>.toml`` (one per device type, all dtypes, layouts and
batch broadcasts) and registered when kabi is imported, below native kernels in the heuristic order. torch is
also every op's reference, so this backend is the one that always works.

Example::

    >>> with kabi.use(matmul="torch"):
    ...     kabi.ops.matmul(a, b)  # torch.matmul, chosen through kabi
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .._base.core_answers import KernelInfo, Problem
from .._base.declarations import kernel_specs
from ..ops._kernel_registration import register_declared
from ..ops._references import activation_named

__all__ = ["linear", "matmul", "register", "scaled_mm", "scaled_mm_cuda_supports"]

# torch.matmul's own signature, matmul(a, b, *, out=None), is the Python kernel convention: registering the
# builtin itself keeps a wrapper's call off every dispatch.
matmul = torch.matmul


def linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None, activation: str = "none", *,
           out: torch.Tensor | None = None) -> torch.Tensor:
    """``activation(x @ w^T + bias)`` for x [..., K], w [N, K], bias [N] or None, on any device and dtype torch's
    ``F.linear`` takes; written into ``out`` ([..., N], x's dtype) and returned when it is given.

    The activation runs in place on the product, which this kernel owns; out of place where autograd records the
    product, so that the recorded graph is the reference's own (F.linear, then the activation).
    """
    apply = activation_named(activation)
    if out is None:
        product = F.linear(x, w, bias)
        return apply.function(product) if product.requires_grad else apply.in_place(product)
    # The bias rides in the product's accumulator (addmv, addmm) where torch has one: one pass over out, not two.
    if x.dim() == 1:
        # torch.matmul would want a vector's out as a [1, N] row; mv writes the [N] vector itself.
        if bias is None:
            torch.mv(w, x, out=out)
        else:
            torch.addmv(bias, w, x, out=out)
    elif x.dim() == 2 and bias is not None:
        torch.addmm(bias, x, w.mT, out=out)
    else:
        torch.matmul(x, w.mT, out=out)
        if bias is not None:
            out.add_(bias)
    return apply.in_place(out)


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
              bias: torch.Tensor | None = None, out_dtype: str = "bfloat16", *,
              out: torch.Tensor | None = None) -> torch.Tensor:
    """``torch._scaled_mm``: (scale_a * a) @ (scale_b * b) + bias in ``out_dtype``. torch takes the two scales of one
    kind, both per tensor or both row-wise; a mix (kabi's op allows one) has its per-tensor scale broadcast to the
    row-wise shape, a vector of M or N floats."""
    if scale_a.dim() != scale_b.dim():
        m, n = a.shape[0], b.shape[1]
        scale_a = scale_a.expand(m, 1).contiguous() if scale_a.dim() == 0 else scale_a
        scale_b = scale_b.expand(1, n).contiguous() if scale_b.dim() == 0 else scale_b
    result = torch._scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=getattr(torch, out_dtype))
    if out is None:
        return result
    return out.copy_(result)


def scaled_mm_cuda_supports(problem: Problem) -> bool | str:
    """What torch._scaled_mm on CUDA refuses, as the supports predicate of ``torch.scaled_mm.cuda``: a not
    row-major, b not column-major, K and N not multiples of 16 (cuBLASLt's FP8 alignment), a float32 output with a
    bias, and row-wise scales (a mix is served as row-wise) with an output other than bfloat16."""
    a_layout, b_layout = problem.layouts[:2]
    if any(problem.input_shapes[2:4]) and problem.dtype != "bfloat16":
        return f"torch._scaled_mm on CUDA takes row-wise scales with a bfloat16 output only; out is {problem.dtype}"
    if a_layout not in ("contiguous", "row_strided"):
        return f"torch._scaled_mm on CUDA needs a row-major; a is {a_layout}"
    if b_layout != "col_strided":
        return f"torch._scaled_mm on CUDA needs b column-major (a transposed [N, K] weight); b is {b_layout}"
    dims = problem.dims
    if dims["K"] % 16 or dims["N"] % 16:
        return f"torch._scaled_mm on CUDA needs K and N multiples of 16; K={dims['K']}, N={dims['N']}"
    if problem.dtype == "float32" and problem.layouts[4] != "absent":
        return "torch._scaled_mm on CUDA takes no bias with a float32 output"
    return True


def register() -> tuple[KernelInfo, ...]:
    """Register every kernel declared under ``registry/kernels/torch``; the torch version is in the fingerprint,
    so upgrading torch invalidates its tuning records."""
    registered = []
    for spec in kernel_specs("torch"):
        if not spec.fingerprint:
            spec = type(spec)(**{**spec.__dict__, "fingerprint": f"{spec.implementation}@torch{torch.__version__}"})
        registered.append(register_declared(spec))
    return tuple(registered)
