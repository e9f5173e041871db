"""Plugins found at run time: Python entry points in the group ``kabi.plugins``, the ``KABI_PLUGIN_PATH`` list,
and the directories of device binaries (``NAME.kabi-manifest`` files) that ``KABI_BINARY_PATH`` lists; and
:func:`complete_registry`, the one step every public reader of the registry takes first.

Discovery is lazy (``import kabi`` stays fast, without Triton or entry points): every reader of the registry (the
op fronts' selection, hence op calls, ``kabi.explain`` and ``kabi.tune``; ``kabi.kernels``; ``kabi.plugins``; every
command of the CLI through them) calls :func:`complete_registry` first, so all of them see the same kernels whichever
comes first. It runs once per process; later calls cost a flag test.
Both path lists are loaded by libkabi (``kabi_plugin_load_from_environment``, which C and C++ callers call
themselves), plugins first; each binaries directory is recorded like a plugin, with ``kind="binaries"``.

An entry point names a callable. If it takes one argument it is called with the ``kabi`` module and registers
kernels from Python (returning None); if it takes none it returns the path of a plugin shared library, which is
loaded like any other (``kabi_plugin_load``). A vendor package declares, in its pyproject.toml::

    [project.entry-points."kabi.plugins"]
    acme = "acme_kabi:library_path"

A plugin that fails (import error, exception, wrong return value, library refused by the ABI checks) is recorded
with the reason and logged; the failure never reaches the caller of an op.

    >>> from kabi._plugins.discovery import discover_plugins
    >>> [(record.name, record.loaded) for record in discover_plugins()]  # doctest: +SKIP
    [('kabi-cpu', True), ('acme', True)]
"""

from __future__ import annotations

import dataclasses
import importlib.machinery
import importlib.metadata
import inspect
import logging
import os
import pathlib
import re
import sys
import threading
from types import ModuleType
from typing import Callable

__all__ = ["ENTRY_POINT_GROUP", "PluginRecord", "add_cuda_backend", "complete_registry", "discover_plugins",
           "plugin_records", "set_plugin_api"]

ENTRY_POINT_GROUP = "kabi.plugins"

_logger = logging.getLogger("kabi")


@dataclasses.dataclass(frozen=True)
class PluginRecord:
    """One plugin, loaded or refused.

    ``kind`` is ``"library"`` for a shared library loaded through the C ABI, ``"python"`` for an entry point
    that registered kernels from Python, and ``"binaries"`` for a directory of ``KABI_BINARY_PATH`` (``path`` is
    the directory, ``num_kernels`` the device binaries its manifests registered, ``message`` why it was refused:
    a directory loads all or nothing). ``entry_point`` names the entry point it came from, if any.
    ``abi_version`` is the kabi ABI a library was built for, packed as (MAJOR << 16) | MINOR (0 for Python).
    """

    name: str
    kind: str
    loaded: bool
    message: str = ""
    version: str = ""
    path: str = ""
    num_kernels: int = 0
    entry_point: str = ""
    abi_version: int = 0


class _Discovery:
    """The once-per-process discovery state. Re-entrant: a plugin that dispatches an op while registering does
    not deadlock; it just sees discovery as already under way."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.done = False
        self.running = False
        self.cuda_backends_done = False
        # Installed by kabi's bootstrap: what registers the CUDA backends, and the module one-argument entry
        # points are called with (the public ``kabi`` package). This layer sits below both.
        self.cuda_backends: list[Callable[[str], object]] = []
        self.plugin_api: ModuleType | None = None
        self.python_records: list[PluginRecord] = []
        # realpath of a library -> the entry point that named it
        self.library_entry_points: dict[str, str] = {}


_state = _Discovery()


def add_cuda_backend(register: Callable[[str], object]) -> None:
    """Have :func:`complete_registry` call ``register("cuda")`` once, the first time CUDA kernels are asked for on a
    machine with a CUDA device (kabi's bootstrap adds the built-in CUDA plugin's load and the Triton backend's
    registration).

    Example::

        add_cuda_backend(register_triton_kernels)
    """
    _state.cuda_backends.append(register)


def set_plugin_api(module: ModuleType) -> None:
    """Set the module that entry points taking one argument are called with: the public ``kabi`` package (kabi's
    bootstrap sets it)."""
    _state.plugin_api = module


def complete_registry(device_type: str | None = None) -> None:
    """Make the registry hold every kernel this process can have for ``device_type`` (None: every device type):
    the plugins of ``KABI_PLUGIN_PATH``, ``KABI_BINARY_PATH`` and the entry points, and, where CUDA is asked for
    and a CUDA device exists, the CUDA backends. Once per process; never raises for a broken plugin."""
    discover_plugins()
    if device_type in (None, "cuda") and not _state.cuda_backends_done:
        _register_cuda_backends()


def _register_cuda_backends() -> None:
    # Called at the first read of CUDA kernels, not at import: loading the CUDA plugin initialises the driver, which a
    # process that never reads CUDA kernels should not pay (registering the Triton backend imports no Triton).
    import torch

    with _state.lock:
        if _state.cuda_backends_done:
            return
        _state.cuda_backends_done = True
        if torch.cuda.is_available():
            for register in _state.cuda_backends:
                register("cuda")


def discover_plugins() -> list[PluginRecord]:
    """Load the plugins of ``KABI_PLUGIN_PATH`` and of the ``kabi.plugins`` entry points, once; return every
    plugin record (see :func:`plugin_records`). Never raises for a broken plugin."""
    if not _state.done:
        with _state.lock:
            if not _state.done and not _state.running:
                _state.running = True
                try:
                    _load_environment_path()
                    for entry_point in _group_entry_points():
                        _load_entry_point(entry_point)
                except Exception as error:  # noqa: BLE001 - e.g. unreadable package metadata; kabi must keep working
                    _logger.warning("kabi: plugin discovery stopped early: %s: %s", type(error).__name__, error)
                finally:
                    _state.running = False
                    _state.done = True
    return plugin_records()


def _group_entry_points() -> list[importlib.metadata.EntryPoint]:
    """The entry points of ``ENTRY_POINT_GROUP``, as ``importlib.metadata.entry_points(group=...)`` finds them: the
    first distribution on ``sys.path`` of each normalized name, in ``sys.path`` order. importlib.metadata builds a
    Distribution per installed package and parses every ``entry_points.txt`` on the way (25 ms for the GPU host's 202
    packages, a third of what a warm process's first call cost beyond torch's); this reads each file once, and only
    a distribution whose file has the group's section is built and parsed, by importlib.metadata itself. Where the
    standard path finder is not the only source of distributions (another finder on ``sys.meta_path`` has
    ``find_distributions``) or a ``sys.path`` entry is not a plain directory (a zip, an egg), importlib.metadata does
    the whole search."""

    def full_search() -> list[importlib.metadata.EntryPoint]:
        return list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))

    if any(hasattr(finder, "find_distributions") and finder is not importlib.machinery.PathFinder
           for finder in sys.meta_path):
        return full_search()
    header = f"[{ENTRY_POINT_GROUP}]"
    found: list[importlib.metadata.EntryPoint] = []
    seen: set[str] = set()
    for location in sys.path:
        directory = location or "."
        if directory.endswith(".egg"):
            return full_search()
        try:
            children = os.listdir(directory)
        except NotADirectoryError:
            return full_search()
        except OSError:
            continue
        for child in children:
            lowered = child.lower()
            if not lowered.endswith((".dist-info", ".egg-info")):
                continue
            normalized = re.sub(r"[-_.]+", "_", lowered.rpartition(".")[0].partition("-")[0])
            if normalized in seen:
                continue
            seen.add(normalized)
            try:
                with open(os.path.join(directory, child, "entry_points.txt"), encoding="utf-8") as file:
                    text = file.read()
            except OSError:
                continue
            if header in text:
                distribution = importlib.metadata.PathDistribution(pathlib.Path(directory, child))
                found.extend(distribution.entry_points.select(group=ENTRY_POINT_GROUP))
    return found


def plugin_records() -> list[PluginRecord]:
    """Every plugin load so far: shared libraries as libkabi recorded them (built-in, KABI_PLUGIN_PATH, entry
    points, explicit loads), then the Python entry points."""
    from kabi import _core

    records = []
    for raw in _core.plugin_records():
        path = os.path.realpath(raw["path"])
        records.append(
            PluginRecord(
                name=raw["name"],
                kind=raw["kind"],
                loaded=raw["loaded"],
                message=raw["message"],
                version=raw["version"],
                path=raw["path"],
                num_kernels=raw["num_kernels"],
                entry_point=_state.library_entry_points.get(path, ""),
                abi_version=raw["abi_version"],
            )
        )
    return records + list(_state.python_records)


def _load_environment_path() -> None:
    from kabi import _core

    if not os.environ.get("KABI_PLUGIN_PATH") and not os.environ.get("KABI_BINARY_PATH"):
        return
    try:
        # libkabi records each refusal itself; this only fails for a broken environment value.
        _core.plugin_load_from_environment()
    except Exception as error:  # noqa: BLE001 - a bad KABI_PLUGIN_PATH must not break kabi
        _logger.warning("kabi: KABI_PLUGIN_PATH / KABI_BINARY_PATH could not be loaded: %s", error)
    for record in plugin_records():
        if record.kind == "binaries" and not record.loaded:
            _logger.warning("kabi: KABI_BINARY_PATH directory %s refused: %s", record.path, record.message)


def _entry_point_label(entry_point: importlib.metadata.EntryPoint) -> str:
    return f"{entry_point.name} = {entry_point.value}"


def _refuse(entry_point: importlib.metadata.EntryPoint, message: str) -> None:
    _logger.warning("kabi: plugin entry point %s refused: %s", _entry_point_label(entry_point), message)
    _state.python_records.append(
        PluginRecord(
            name=entry_point.name,
            kind="python",
            loaded=False,
            message=message,
            version=_distribution_version(entry_point),
            entry_point=_entry_point_label(entry_point),
        )
    )


def _distribution_version(entry_point: importlib.metadata.EntryPoint) -> str:
    distribution = getattr(entry_point, "dist", None)
    return distribution.version if distribution is not None else ""


def _takes_kabi_module(function: object) -> bool:
    try:
        inspect.signature(function).bind(None)  # type: ignore[arg-type]
    except TypeError:
        return False
    except ValueError:  # no signature (some builtins): assume the documented register(kabi) form
        return True
    return True


def _load_entry_point(entry_point: importlib.metadata.EntryPoint) -> None:
    from kabi import _core

    try:
        target = entry_point.load()
    except Exception as error:  # noqa: BLE001 - a broken plugin package must not break kabi
        _refuse(entry_point, f"import failed: {type(error).__name__}: {error}")
        return
    if not callable(target):
        _refuse(entry_point, f"names {type(target).__name__} object, not a callable")
        return

    takes_kabi = _takes_kabi_module(target)
    kernels_before = len(_core.kernel_list())
    try:
        result = target(_state.plugin_api) if takes_kabi else target()
    except Exception as error:  # noqa: BLE001 - a failing plugin must not break kabi
        _refuse(entry_point, f"raised {type(error).__name__}: {error}")
        return

    if result is None:
        _state.python_records.append(
            PluginRecord(
                name=entry_point.name,
                kind="python",
                loaded=True,
                version=_distribution_version(entry_point),
                num_kernels=len(_core.kernel_list()) - kernels_before,
                entry_point=_entry_point_label(entry_point),
            )
        )
        return
    if not isinstance(result, (str, os.PathLike)):
        _refuse(entry_point, f"returned {type(result).__name__}; expected None (registered in Python) or the "
                             "path of a plugin library")
        return

    path = os.fspath(result)
    _state.library_entry_points[os.path.realpath(path)] = _entry_point_label(entry_point)
    try:
        _core.plugin_load(path)
    except Exception as error:  # noqa: BLE001 - libkabi has recorded the refusal with its reason
        _logger.warning("kabi: plugin library %s from entry point %s refused: %s", path,
                        _entry_point_label(entry_point), error)
