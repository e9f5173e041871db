"""``kabi.register_op``: an op declared at run time, from the same TOML as ``registry/ops/<op>.toml``.

Adding an op takes no code outside its declaration and its kernels: the declaration is read and checked by the
one reader of op files (:func:`kabi._base.declarations.read_op_declaration`), the core registers and parses its
schema (``kabi_op_register``), and the op gets what every declared op has: its function ``kabi.ops.<name>`` (the op
front, built from the parsed schema) and its torch custom op ``torch.ops.kabi.<name>``. Kernels are then registered
as for any op (``kabi.register_kernel`` / ``@kabi.kernel``). An op lives as long as the process; a name already taken
raises ``AlreadyExistsError``.

Example::

    >>> kabi.register_op('''
    ... name = "axpby"
    ... summary = "alpha * x + beta * y"
    ... schema = "x: [..., N] T, y: [..., N] T, alpha: float = 1.0, beta: float = 1.0 -> out: [..., N] T"
    ... reference = "my_package.references:axpby"
    ... [types]
    ... T = ["float32", "float64"]
    ... [tolerance.float32]
    ... norm = 1e-6
    ... extreme = 1e-5
    ... [tolerance.float64]
    ... norm = 1e-12
    ... extreme = 1e-10
    ... [tuning]
    ... key = "dtype,layout,batch,N"
    ... ''')
    >>> kabi.ops.axpby(torch.ones(3), torch.ones(3), alpha=2.0)
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Callable

from .. import _core
from .._base.declarations import read_op_declaration
from .._base.errors import AlreadyExistsError
from . import _front, _torch_ops

__all__ = ["register_op"]

_lock = threading.Lock()


def register_op(declaration: str | Path) -> Callable[..., Any]:
    """Register the op an op declaration describes (its TOML text, or the path of its ``.toml`` file) and return
    its function, which is also ``kabi.ops.<name>``; ``torch.ops.kabi.<name>`` is defined with it.

    ``AlreadyExistsError`` when an op of that name exists; a ``RegistryError`` (an ``InvalidArgumentError``)
    naming the field for a declaration that does not follow the op file format, and the core's error for a schema it
    cannot parse.
    """
    from .. import ops

    spec = read_op_declaration(declaration)
    with _lock:
        if spec.name in _core.op_list():
            raise AlreadyExistsError(f"op {spec.name!r} is already registered")
        _core.register_op(spec.name, spec.schema, spec.type_variables_text, spec.tuning_key)
        front = _front.OpFront(spec)
        setattr(ops, spec.name, front.function)
        ops.__all__ = sorted({*ops.__all__, spec.name})
    _torch_ops.define_ops([front])
    return front.function
