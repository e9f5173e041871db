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

from .._base.core_answers import KernelInfo
from .._base.declarations import kernel_specs
from ..ops._kernel_registration import register_declared
from ..ops._references import activation_named

__all__ = ["linear", "matmul", "register"]

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


def register() -> tuple[KernelInfo, ...]:
    """Register every kernel declared under ``registry/kernels/torch``; the torch version is in the fingerprint,
    so upgrading torch invalidates its tuning records."""
    registered = []
    for spec in kernel_specs("torch"):
        if not spec.fingerprint:
            spec = type(spec)(**{**spec.__dict__, "fingerprint": f"{spec.implementation}@torch{torch.__version__}"})
        registered.append(register_declared(spec))
    return tuple(registered)
