"""Native plugins and device binaries: loading them into libkabi and reporting what happened.

``import kabi`` loads the built-in CPU plugin (OpenBLAS) that ships beside libkabi; the built-in CUDA plugin, where
built, loads with the other CUDA backends when CUDA kernels are first asked for, since enumerating the devices
initialises the CUDA driver (0.35 s on an H200), which a process that never uses CUDA should not pay. The first
reader of the registry also loads the plugins of ``KABI_PLUGIN_PATH`` and of entry points
(``kabi._plugins.discovery.complete_registry``). The CPU plugin finds OpenBLAS through
``KABI_OPENBLAS_LIBRARY``; when that is unset, kabi points it at the library of the ``scipy-openblas32`` package.
Every load, successful or refused, is recorded with its reason.

Example::

    >>> for record in kabi.plugins():
    ...     print(record.name, record.kind, record.loaded, record.num_kernels, record.message)
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from .. import _core
from .._base.tensors import DEVICE_TYPES
from .discovery import PluginRecord, complete_registry, plugin_records

__all__ = ["PluginRecord", "load_binaries", "load_binaries_with", "load_builtin_plugin", "load_plugin", "plugins"]


def _point_at_scipy_openblas() -> None:
    """Set KABI_OPENBLAS_LIBRARY to scipy-openblas32's library unless the user chose one.

    The package is found, not imported: its ``__init__`` reads its version from the installed distributions'
    metadata, which cost more than the rest of kabi's plugin loading. Its library is ``lib/libscipy_openblas.so``
    beside that ``__init__`` (what its ``get_lib_dir()`` and ``get_library()`` name)."""
    if os.environ.get("KABI_OPENBLAS_LIBRARY"):
        return
    package = importlib.util.find_spec("scipy_openblas32")
    if package is None or not package.submodule_search_locations:
        return
    suffix = {"darwin": ".dylib", "win32": ".dll"}.get(sys.platform, ".so")
    library = Path(package.submodule_search_locations[0]) / "lib" / f"libscipy_openblas{suffix}"
    if library.exists():
        os.environ["KABI_OPENBLAS_LIBRARY"] = str(library)


def load_builtin_plugin(device_type: str) -> None:
    """Load the plugin shipped beside libkabi for ``device_type`` ("cpu" or "cuda"; refusals are recorded, not
    raised). Those of KABI_PLUGIN_PATH and of entry points load when the registry is first read
    (``kabi._plugins.discovery.complete_registry``)."""
    if device_type == "cpu":
        _point_at_scipy_openblas()
    _core.plugin_load_builtin_device(DEVICE_TYPES[device_type])


def load_plugin(path: str | os.PathLike[str]) -> PluginRecord:
    """Load a plugin shared library and return its record; a refusal raises (e.g. ``AbiMismatchError``) with
    the plugin's name and why, and leaves kabi working."""
    _core.plugin_load(os.fspath(path))
    resolved = os.path.realpath(path)
    records = plugin_records()
    matching = [r for r in records if os.path.realpath(r.path) == resolved]
    return matching[-1] if matching else records[-1]


def plugins() -> list[PluginRecord]:
    """Every plugin of this process, loaded and refused, after completing the registry (the plugins of
    KABI_PLUGIN_PATH and of the ``kabi.plugins`` entry points among them)."""
    complete_registry()
    return plugin_records()


def load_binaries(directory: str | os.PathLike[str]) -> int:
    """Register every device binary (``NAME.kabi-manifest``) in ``directory``; returns how many were registered."""
    return _core.binaries_load(os.fspath(directory))


def load_binaries_with(loads: list[tuple[str, str, object]]) -> list[str]:
    """Register the device binaries that manifest files describe, all or nothing, each ``(manifest path, op,
    supports or None)`` with an optional supports predicate (called with the problem, returning True or why the kernel
    declines); return the kernels' names in order. A kernel already registered with the same fingerprint is kept, and
    its name returned."""
    return _core.binary_load_many(loads)
