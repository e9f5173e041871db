"""The Triton backend of kabi: matmul kernels for sm_80+ and sm_90 (decode shapes included), the fused linear and the
grouped (MoE) GEMM kernels, their configs, and their device binaries.

Importing this package does not import Triton, and neither does registering its kernels (``_kernel_modules``):
a Python kernel imports Triton at its first launch, and compiling a device binary imports it.
"""

from ._binaries import load_binaries
from ._compile import compile_all, compile_to_binary
from ._configs import HOPPER_CONFIGS, SMALL_M_CONFIGS, TILED_CONFIGS, MatmulConfig
from ._decode_configs import DECODE_CONFIGS, DecodeConfig
from ._manifest import Manifest, ManifestError, ManifestParam, read_manifest
from ._registration import grouped_kernel_name, kernel_name, register_triton_kernels

__all__ = [
    "DECODE_CONFIGS",
    "HOPPER_CONFIGS",
    "SMALL_M_CONFIGS",
    "TILED_CONFIGS",
    "DecodeConfig",
    "Manifest",
    "ManifestError",
    "ManifestParam",
    "MatmulConfig",
    "compile_all",
    "compile_to_binary",
    "grouped_kernel_name",
    "kernel_name",
    "load_binaries",
    "read_manifest",
    "register_triton_kernels",
]
