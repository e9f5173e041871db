"""Where native kernels' workspaces come from under Python: torch's CUDA caching allocator.

A kernel that declares a workspace gets it from the allocator libkabi holds (kabi.h, ``kabi_allocator``). In a torch
process, CUDA workspaces should come from torch's caching allocator, so that they count in
``torch.cuda.memory_allocated``, reuse torch's cached blocks instead of reserving memory beside them, and follow the
stream they are used on. ``install_torch_allocator`` (called once by ``kabi._bootstrap``) installs it for CUDA.

The CPU keeps libkabi's default, aligned malloc: torch has no public stream-ordered CPU allocator (its CPU allocator
is malloc too, behind ``c10::GetCPUAllocator``, with nothing to cache), and calling into Python for memory libkabi
can take itself would only add the GIL to a launch.

Example::

    install_torch_allocator()   # CUDA workspaces now come from torch.cuda.caching_allocator_alloc
"""

from __future__ import annotations

from .. import _core
from .tensors import DEVICE_TYPES

__all__ = ["install_torch_allocator"]


def _allocate_from_torch(device_type: int, device_index: int, nbytes: int, stream: int) -> int:
    import torch

    return torch.cuda.caching_allocator_alloc(nbytes, device_index, stream)


def _release_to_torch(device_type: int, device_index: int, pointer: int, nbytes: int, stream: int) -> None:
    import torch

    torch.cuda.caching_allocator_delete(pointer)


def install_torch_allocator() -> None:
    """Allocate CUDA workspaces through torch's caching allocator, on the stream of the launch that needs them."""
    _core.set_allocator((DEVICE_TYPES["cuda"],), _allocate_from_torch, _release_to_torch)
