"""The names and fingerprints of kabi's Triton kernels: one place for the Python kernels', the device binaries'
and the tuning cache's view of them.

Example::

    kernel_name("tiled", "bm128_bn128_bk64_w8_s3_g8")           # 'triton.matmul.tiled.bm128_bn128_bk64_w8_s3_g8'
    binary_name("tiled", "bm128_bn128_bk64_w8_s3_g8", "row_major", "bfloat16", 90)
    # 'triton.matmul.tiled.bm128_bn128_bk64_w8_s3_g8.row_major.bfloat16.sm90'
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

_KERNEL_SOURCES = ("_jit_kernels.py", "_decode_jit_kernels.py", "_linear_kernels.py", "_scaled_mm_kernels.py",
                  "_grouped_kernels.py")


def kernel_name(family_name: str, config_tag: str, device: str = "cuda") -> str:
    """The kabi name of one (family, config), e.g. ``triton.matmul.tiled.bm128_bn128_bk64_w8_s3_g8``."""
    name = f"triton.matmul.{family_name}.{config_tag}"
    return name if device == "cuda" else f"{name}.{device}"


def linear_kernel_name(config_tag: str, device: str = "cuda") -> str:
    """The kabi name of one config of the fused linear kernel, e.g. ``triton.linear.bm16_bn64_bk128_w4_s4_g8``."""
    name = f"triton.linear.{config_tag}"
    return name if device == "cuda" else f"{name}.{device}"


def scaled_mm_kernel_name(config_tag: str, device: str = "cuda", tma: bool = False) -> str:
    """The kabi name of one config of an FP8 kernel, e.g. ``triton.scaled_mm.bm128_bn128_bk128_w8_s4_g8`` (the
    pointer kernel) or ``triton.scaled_mm.tma.bm128_bn256_bk128_w8_s3_g8`` (Hopper's persistent TMA kernel)."""
    name = f"triton.scaled_mm.{'tma.' if tma else ''}{config_tag}"
    return name if device == "cuda" else f"{name}.{device}"


def grouped_kernel_name(config_tag: str, device: str = "cuda") -> str:
    """The kabi name of one config of the grouped GEMM, e.g. ``triton.grouped_mm.bm128_bn128_bk64_w8_s3_g8``."""
    name = f"triton.grouped_mm.{config_tag}"
    return name if device == "cuda" else f"{name}.{device}"


@functools.lru_cache(maxsize=1)
def kernels_fingerprint() -> str:
    """Triton's version and a hash of the kernels' sources: a change to either invalidates tuned decisions."""
    import triton

    digest = hashlib.sha256()
    for source in _KERNEL_SOURCES:
        digest.update(Path(__file__).with_name(source).read_bytes())
    return f"triton-{triton.__version__}:{digest.hexdigest()[:16]}"


def binary_name(family_name: str, config_tag: str, layout: str, dtype_name: str, arch: int) -> str:
    """The kabi name of one (family, config) compiled for a layout variant, a dtype and an arch."""
    return f"{kernel_name(family_name, config_tag)}.{layout}.{dtype_name}.sm{arch}"
