"""``kabi.ops``: one function per op declared in ``registry/ops/*.toml``, generated when kabi is imported, and per
op registered since with ``kabi.register_op``.

The package is also kabi's ops layer: its private modules hold the op front (``_front``), the op schemas, scopes
(``kabi.use``), the registration of Python kernels, DLPack arrays, autograd and the torch custom ops; only the op
functions are public here.

Each ``kabi.ops.<name>(*inputs, *, attributes..., out=None)`` validates its inputs on the first call of a problem, picks the kernel
(forced > tuned > heuristic), remembers the decision, and runs it; later calls of the same problem go straight to
the chosen implementation. The docstring of each function comes from its registry file.

Example::

    >>> import torch, kabi
    >>> kabi.ops.matmul(torch.randn(4, 3), torch.randn(3, 2)).shape
    torch.Size([4, 2])
"""

from __future__ import annotations

from typing import Any

from .._base.declarations import op_specs
from ._front import OpFront

__all__ = sorted(op_specs())

globals().update({name: OpFront(spec).function for name, spec in op_specs().items()})


def __getattr__(name: str) -> Any:
    raise AttributeError(f"kabi.ops has no op {name!r}; the ops are {', '.join(__all__)}")
