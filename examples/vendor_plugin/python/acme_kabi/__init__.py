"""acme-kabi: an example vendor plugin for kabi (a small-matrix float32 matmul for AVX2+FMA CPUs).

kabi finds it through the ``kabi.plugins`` entry point, which names :func:`library_path`.
"""

from ._library import library_path

__all__ = ["library_path"]
