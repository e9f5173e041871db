"""The names and fingerprints of kabi's Triton kernels: one place for the Python kernels', the device binaries'
and the tuning cache's view of them.

Example::

    kernel_name("tiled", "bm128_bn128_bk64_w8_s3_g8")           # 'triton.matmul.tiled.bm128_bn128_bk64_w8_s3_g8'
    binary_name("tiled", "bm128_bn128_bk64_w8_s3_g8", "row_major", "bfloat16", 90)
    # 'triton.matmul.tiled.bm128_bn128_bk64_w8_s3_g8.row_major.bfloat16.sm90'
    binary_name("decode", "gemv_nk_bn8_bk512_w4_s3", "row_column", "bfloat16", 90, rows=1)
    # 'triton.matmul.decode.gemv_nk_bn8_bk512_w4_s3.m1.row_column.bfloat16.sm90'
    binary_name("grouped", "bm128_bn128_bk64_w4_s4_g8", "row_column", "bfloat16", 90)
    # 'triton.grouped_mm.bm128_bn128_bk64_w4_s4_g8.row_column.bfloat16.sm90'
    binary_name("linear", "bm16_bn64_bk128_w4_s4_g8", "row_major", "bfloat16", 90)
    # 'triton.linear.bm16_bn64_bk128_w4_s4_g8.row_major.bfloat16.sm90'
    binary_name("scaled_mm_tma", "bm128_bn256_bk128_w8_s3_g8", "row_column", "float16", 90)
    # 'triton.scaled_mm.tma.bm128_bn256_bk128_w8_s3_g8.row_column.float16.sm90' (float16: the output's dtype)
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import os

from ._kernel_modules import KERNEL_MODULES

# The families of grouped_mm's persistent grouped GEMM, of the fused linear kernel and of scaled_mm's FP8 kernels
# (pointer and persistent TMA), whose kernels are named after their op (``grouped_kernel_name``,
# ``linear_kernel_name``, ``scaled_mm_kernel_name``) rather than as a matmul family's.
GROUPED_FAMILY_NAME = "grouped"
LINEAR_FAMILY_NAME = "linear"
SCALED_MM_FAMILY_NAME = "scaled_mm"
SCALED_MM_TMA_FAMILY_NAME = "scaled_mm_tma"
# A device binary's manifest is ``<binary_name(...)><MANIFEST_SUFFIX>`` beside its image (docs/manifest.md).
MANIFEST_SUFFIX = ".kabi-manifest"


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


def aligned_copies_kernel_name(device: str = "cuda") -> str:
    """The kabi name of the matmul over zero-padded copies made by Triton: ``triton.matmul.aligned_copies``."""
    name = "triton.matmul.aligned_copies"
    return name if device == "cuda" else f"{name}.{device}"


def grouped_kernel_name(config_tag: str, device: str = "cuda") -> str:
    """The kabi name of one config of the grouped GEMM, e.g. ``triton.grouped_mm.bm128_bn128_bk64_w8_s3_g8``."""
    name = f"triton.grouped_mm.{config_tag}"
    return name if device == "cuda" else f"{name}.{device}"


@functools.lru_cache(maxsize=1)
def kernels_fingerprint() -> str:
    """Triton's version and a hash of the kernels' sources: a change to either invalidates tuned decisions."""
    digest = hashlib.sha256()
    for module in KERNEL_MODULES:
        digest.update(module.source.read_bytes())
    return f"triton-{_triton_version()}:{digest.hexdigest()[:16]}"


def _triton_version() -> str:
    """The version of the Triton that ``import triton`` would load, read from its distribution's metadata, so that
    fingerprinting imports no Triton. Where no distribution named ``triton`` installed that very package (a source
    checkout, a build under another distribution name), Triton is imported to ask it."""
    spec = importlib.util.find_spec("triton")
    if spec is None or spec.origin is None:
        import triton

        return triton.__version__
    version = _version_beside(spec.origin)
    if version is not None:
        return version
    try:
        distribution = importlib.metadata.distribution("triton")
    except importlib.metadata.PackageNotFoundError:
        distribution = None
    if (distribution is not None
            and os.path.realpath(distribution.locate_file("triton/__init__.py")) == os.path.realpath(spec.origin)):
        return distribution.version
    import triton

    return triton.__version__


def _version_beside(origin: str) -> str | None:
    """The version in the name of the one ``triton-<version>.dist-info`` beside the package whose ``__init__.py`` is
    ``origin`` (a wheel's install names it so), or None where there is none or several. importlib.metadata would
    search every installed package for the distribution and parse its METADATA: 5-10 ms of a warm process's first
    call in a large environment."""
    site = os.path.dirname(os.path.dirname(origin))
    try:
        candidates = [name for name in os.listdir(site)
                      if name.lower().startswith("triton-") and name.lower().endswith(".dist-info")]
    except OSError:
        return None
    if len(candidates) != 1:
        return None
    return candidates[0][len("triton-"):-len(".dist-info")]


def binary_name(family_name: str, config_tag: str, layout: str, dtype_name: str, arch: int, rows: int = 0) -> str:
    """The kabi name of one (family, config) compiled for a layout variant, a dtype and an arch, and for a fixed
    row count per program where the family compiles one binary per count (``rows``; 0: none): its Python kernel's
    name followed by those, e.g. ``triton.matmul.decode.dot_nk_bn16_bk256_w4_s5.m16.row_column.bfloat16.sm90``."""
    rows_part = f".m{rows}" if rows else ""
    if family_name == GROUPED_FAMILY_NAME:
        python_kernel = grouped_kernel_name(config_tag)
    elif family_name == LINEAR_FAMILY_NAME:
        python_kernel = linear_kernel_name(config_tag)
    elif family_name in (SCALED_MM_FAMILY_NAME, SCALED_MM_TMA_FAMILY_NAME):
        python_kernel = scaled_mm_kernel_name(config_tag, tma=family_name == SCALED_MM_TMA_FAMILY_NAME)
    else:
        python_kernel = kernel_name(family_name, config_tag)
    return f"{python_kernel}{rows_part}.{layout}.{dtype_name}.sm{arch}"
