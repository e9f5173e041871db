"""Checking plugin libraries without risking this process: each candidate is loaded in a child process of its own.

A plugin runs in-process: its ``kabi_plugin_init`` can crash or hang the process that loads it, and libkabi cannot
catch that. :func:`check_plugins` (``kabi plugins check PATH...``) loads each path in a fresh child
(``python -m kabi._plugins.check PATH``) and reports what happened to it: loaded (its name, version and kernels),
refused by libkabi (with the reason), crashed (with the signal or exit status), or timed out.

Example::

    >>> for verdict in check_plugins(["build/libacme_kabi.so"]):   # doctest: +SKIP
    ...     print(verdict.path, verdict.state, verdict.name, verdict.message)
    build/libacme_kabi.so loaded acme-small-gemm
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from typing import Sequence

__all__ = ["PluginVerdict", "check_plugins"]

STATES = ("loaded", "refused", "crashed", "timed out")
# The environment's plugin lists would load other plugins in the child and blur whose verdict it is.
_OTHER_PLUGIN_VARIABLES = ("KABI_PLUGIN_PATH", "KABI_BINARY_PATH")


@dataclasses.dataclass(frozen=True)
class PluginVerdict:
    """What loading one plugin library did. ``state`` is one of ``STATES``; ``kernels`` are ``op/kernel`` names
    of a loaded plugin; ``message`` says why a plugin was refused, how it crashed, or how long it was given."""

    path: str
    state: str
    name: str = ""
    version: str = ""
    kernels: tuple[str, ...] = ()
    message: str = ""


def check_plugins(paths: Sequence[str | os.PathLike[str]], timeout_s: float = 60.0) -> list[PluginVerdict]:
    """Load each path in a child process of its own and return one verdict per path, in order."""
    return [_check_one(os.fspath(path), timeout_s) for path in paths]


def _check_one(path: str, timeout_s: float) -> PluginVerdict:
    environment = {name: value for name, value in os.environ.items() if name not in _OTHER_PLUGIN_VARIABLES}
    try:
        child = subprocess.run([sys.executable, "-m", "kabi._plugins.check", path], env=environment,
                               capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return PluginVerdict(path, "timed out", message=f"loading did not finish within {timeout_s:g} s")
    if child.returncode < 0:
        return PluginVerdict(path, "crashed", message=f"killed by {signal.Signals(-child.returncode).name}")
    lines = child.stdout.strip().splitlines()
    if child.returncode != 0 or not lines:
        last_error = child.stderr.strip().splitlines()[-1:] or ["no output"]
        return PluginVerdict(path, "crashed", message=f"exited with status {child.returncode}: {last_error[0]}")
    report = json.loads(lines[-1])
    return PluginVerdict(path, report["state"], report["name"], report["version"], tuple(report["kernels"]),
                         report["message"])


def _load_here(path: str) -> dict[str, object]:
    """Load ``path`` into this process; the report the parent reads back as one JSON line."""
    from kabi import _core
    from kabi._base.errors import KabiError

    try:
        _core.plugin_load(path)
        error = ""
    except KabiError as refusal:
        error = str(refusal)
    resolved = os.path.realpath(path)
    records = [raw for raw in _core.plugin_records() if os.path.realpath(raw["path"]) == resolved]
    if not records:
        return {"state": "refused", "name": "", "version": "", "kernels": [], "message": error}
    record = records[-1]
    kernels = [f"{raw['op']}/{raw['name']}" for raw in _core.kernel_list(None)
               if record["loaded"] and raw["plugin"] == record["name"]]
    return {"state": "loaded" if record["loaded"] else "refused", "name": record["name"],
            "version": record["version"], "kernels": kernels, "message": record["message"] or error}


if __name__ == "__main__":
    print(json.dumps(_load_here(sys.argv[1])))
