"""The modules that hold kabi's ``@triton.jit`` kernels, imported (and Triton with them) at their first use.

Declaring a Triton kernel (its name, configs, predicates, priority, fingerprint) needs none of them, so registering
the Triton backend imports no Triton: a process whose picks are native kernels (cuBLASLt, a device binary) never
pays the ~0.15 s of ``import triton``. A launcher reads its kernel through a :class:`KernelModule`, which imports the
module on the first read and keeps each kernel it returns as its own attribute, so later launches read it as
cheaply as a module global.

Example::

    MATMUL_KERNELS.matmul_tiled_kernel[grid](a, b, c, ...)   # imports _jit_kernels (and triton) the first time
    kernels_interpreted()                                     # True under TRITON_INTERPRET=1, without importing
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

# Triton reads TRITON_INTERPRET as true for these words (any case); see kernels_interpreted.
_TRUE_WORDS = ("1", "true", "on", "yes", "y")


class KernelModule:
    """One module of ``@triton.jit`` kernels in this package, by its file's stem; imported at the first read of
    one of its kernels."""

    def __init__(self, stem: str) -> None:
        self.stem = stem
        self.module_name = f"{__package__}.{stem}"
        self.source = Path(__file__).with_name(f"{stem}.py")

    def __getattr__(self, attribute: str):
        # Only missing public names come here: a kernel read before, or stem, module_name and source, never do.
        if attribute.startswith("_"):
            raise AttributeError(attribute)
        value = getattr(importlib.import_module(self.module_name), attribute)
        setattr(self, attribute, value)
        return value


MATMUL_KERNELS = KernelModule("_jit_kernels")
DECODE_KERNELS = KernelModule("_decode_jit_kernels")
LINEAR_KERNELS = KernelModule("_linear_kernels")
SCALED_MM_KERNELS = KernelModule("_scaled_mm_kernels")
GROUPED_KERNELS = KernelModule("_grouped_kernels")
COPY_KERNELS = KernelModule("_copy_kernels")
# Every kernel module: their sources make up the kernels' fingerprint (_names.kernels_fingerprint).
KERNEL_MODULES = (MATMUL_KERNELS, DECODE_KERNELS, LINEAR_KERNELS, SCALED_MM_KERNELS, GROUPED_KERNELS, COPY_KERNELS)


def kernels_interpreted() -> bool:
    """Whether the kernels run in Triton's interpreter: as they were built where the matmul kernels are imported
    already, else as they will be built (``@triton.jit`` reads Triton's ``runtime.interpret`` knob, set by
    TRITON_INTERPRET, when a kernel module is imported). Imports nothing."""
    # Absent also while another thread is still importing the module.
    kernel = getattr(sys.modules.get(MATMUL_KERNELS.module_name), "matmul_tiled_kernel", None)
    if kernel is not None:
        from triton.runtime.interpreter import InterpretedFunction

        return isinstance(kernel, InterpretedFunction)
    knobs = getattr(sys.modules.get("triton"), "knobs", None)
    if knobs is not None:
        return bool(knobs.runtime.interpret)
    return os.environ.get("TRITON_INTERPRET", "").lower() in _TRUE_WORDS
