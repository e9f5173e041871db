"""Loading device binaries (cubin + manifest pairs) into kabi's core, where they become native kernels.

The core's reader (``kabi_binaries_load``, which ``kabi.load_binaries`` calls) parses the manifests and registers the
kernels; each image is read and checked against its manifest's hash at its kernel's first launch. C++ callers use the
same function with no Python involved.

Example::

    compile_to_binary("tiled", TILED_CONFIGS[0], "float16", 90, "binaries/")
    load_binaries("binaries/")          # -> 1: the number of kernels registered
"""

from __future__ import annotations

from pathlib import Path

from ..._plugins import loading


def load_binaries(path: str | Path) -> int:
    """Register every ``*.kabi-manifest`` in the directory ``path`` as a native device-binary kernel; returns
    how many were registered. A corrupt or mismatched manifest raises kabi's error naming the file and field,
    and registers nothing from the directory."""
    directory = Path(path)
    if not directory.is_dir():
        raise ValueError(f"path must be a directory holding *.kabi-manifest files, got {str(path)!r}")
    return loading.load_binaries(directory)
