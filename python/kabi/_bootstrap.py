"""What ``import kabi`` does once, in one place: ``kabi/__init__.py`` calls :func:`bootstrap` after importing every
layer. Importing a module of kabi has no effect on another; the wiring between layers is done here, from the top:

1. load libkabi's built-in CPU plugin, and give native kernels their CUDA workspaces from torch's caching allocator;
2. register the torch-native kernels declared in the registry;
3. give plugin discovery what it cannot import from below: the CUDA backends, loaded the first time CUDA kernels are
   asked for (the built-in CUDA plugin, whose device enumeration initialises the driver, and the Triton kernels,
   whose registration imports no Triton), and the ``kabi`` module that entry-point plugins are called with;
4. install the tuner as the op fronts' decision-miss handler, and the gate as the verifier of the selections they
   take afresh with a call's data pointers;
5. define ``torch.ops.kabi.<op>`` for every ``kabi.ops`` function (and make them traceable by torch.compile).
"""

from __future__ import annotations

import functools
from types import ModuleType

from . import ops
from ._base.workspaces import install_torch_allocator
from ._plugins import discovery
from ._plugins.loading import load_builtin_plugin
from ._selection import gate, tuner
from .backends import torch_native
from .ops import _front, _torch_ops

__all__ = ["bootstrap"]

_done = False


def _register_triton_kernels(device_type: str) -> list[str]:
    # Imported here: kabi.backends.triton is imported only by a process that reads CUDA kernels.
    from .backends.triton import register_triton_kernels

    return register_triton_kernels(device_type)


def bootstrap(kabi_module: ModuleType) -> None:
    """Start kabi (once; later calls do nothing). ``kabi_module`` is the public ``kabi`` package, handed to the
    entry-point plugins that take it.

    Example::

        _bootstrap.bootstrap(sys.modules[__name__])  # the last line of kabi/__init__.py
    """
    global _done
    if _done:
        return
    _done = True
    load_builtin_plugin("cpu")
    install_torch_allocator()
    torch_native.register()
    discovery.add_cuda_backend(load_builtin_plugin)
    discovery.add_cuda_backend(_register_triton_kernels)
    discovery.set_plugin_api(kabi_module)
    _front.set_selection_miss_handler(tuner.on_selection_miss)
    _front.set_fresh_selection_verifier(functools.partial(gate.gate_until_verified, with_data=True))
    _torch_ops.define_ops([_front.front_of(name) for name in ops.__all__])
