"""The kernel families that compile to device binaries: one list for the compiler, the registration and the CLI.

Below both ``_compile`` and ``_native``: the compile worker reaches the compiler through ``_native``, so neither can
own the list the other reads."""

from __future__ import annotations

import functools


@functools.cache
def binary_families() -> dict:
    """Every family that compiles to device binaries, by name: matmul's (``FAMILIES``), grouped_mm's, linear's and
    scaled_mm's two (the pointer and the persistent TMA kernel)."""
    from ._families import FAMILIES
    from ._grouped import GROUPED_FAMILY
    from ._linear import LINEAR_FAMILY
    from ._scaled_mm import SCALED_MM_FAMILY, SCALED_MM_TMA_FAMILY

    return {**FAMILIES, **{family.name: family for family in (GROUPED_FAMILY, LINEAR_FAMILY, SCALED_MM_FAMILY,
                                                               SCALED_MM_TMA_FAMILY)}}
