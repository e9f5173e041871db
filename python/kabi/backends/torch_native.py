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

from .._base.core_answers import KernelInfo
from .._base.declarations import kernel_specs
from ..ops._kernel_registration import register_declared

__all__ = ["matmul", "register"]

# torch.matmul's own signature, matmul(a, b, *, out=None), is the Python kernel convention: registering the
# builtin itself keeps a wrapper's call off every dispatch.
matmul = torch.matmul


def register() -> tuple[KernelInfo, ...]:
    """Register every kernel declared under ``registry/kernels/torch``; the torch version is in the fingerprint,
    so upgrading torch invalidates its tuning records."""
    registered = []
    for spec in kernel_specs("torch"):
        if not spec.fingerprint:
            spec = type(spec)(**{**spec.__dict__, "fingerprint": f"{spec.implementation}@torch{torch.__version__}"})
        registered.append(register_declared(spec))
    return tuple(registered)
