"""The Triton backend of kabi: matmul kernels for sm_80+ and sm_90 (decode shapes included), the fused linear and the
grouped (MoE) GEMM kernels, their configs, and their device binaries.

Importing this package does not import Triton, and neither does registering its kernels (``_kernel_modules``):
a Python kernel imports Triton at its first launch, and compiling a device binary imports it.

The names below are resolved at first use (PEP 562), each from its own module: a process's first CUDA dispatch
imports this package to register the kernels (``_registration``), and should not pay for building the compiler's and
the manifest reader's types as well.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._binaries import load_binaries
    from ._compile import compile_all, compile_to_binary
    from ._configs import HOPPER_CONFIGS, SMALL_M_CONFIGS, TILED_CONFIGS, MatmulConfig
    from ._decode_configs import DECODE_CONFIGS, DecodeConfig
    from ._manifest import Manifest, ManifestError, read_manifest
    from ._manifest_params import ManifestParam
    from ._registration import grouped_kernel_name, kernel_name, register_triton_kernels

_MODULE_OF = {
    "load_binaries": "._binaries",
    "compile_all": "._compile",
    "compile_to_binary": "._compile",
    "HOPPER_CONFIGS": "._configs",
    "SMALL_M_CONFIGS": "._configs",
    "TILED_CONFIGS": "._configs",
    "MatmulConfig": "._configs",
    "DECODE_CONFIGS": "._decode_configs",
    "DecodeConfig": "._decode_configs",
    "Manifest": "._manifest",
    "ManifestError": "._manifest",
    "read_manifest": "._manifest",
    "ManifestParam": "._manifest_params",
    "grouped_kernel_name": "._registration",
    "kernel_name": "._registration",
    "register_triton_kernels": "._registration",
}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
