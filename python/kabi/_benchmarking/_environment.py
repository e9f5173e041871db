"""Where and how a run was made: device, driver, versions, date and the exact command, for the results file.

Example::

    >>> sorted(environment(torch.device("cpu"), ["kabi", "bench"]))  # doctest: +SKIP
    ['command', 'date', 'device', 'machine', 'versions']
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import shlex
from pathlib import Path
from typing import Any, Sequence

import torch

from .._base.devices import device_info

__all__ = ["environment"]

# Variables that set how many threads CPU kernels use: a CPU figure means little without them.
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
_PACKAGES = ("kabi", "torch", "triton", "numpy", "scipy-openblas32", "flashinfer-python", "nvidia-cublas")


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for package in _PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    if torch.version.cuda:
        versions["cuda_runtime"] = torch.version.cuda
    return versions


def _processor_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _device(device: torch.device) -> dict[str, Any]:
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        properties = torch.cuda.get_device_properties(index)
        info = device_info("cuda", index)
        return {"type": "cuda", "name": properties.name, "arch": f"sm_{properties.major}{properties.minor}",
                "compute_units": properties.multi_processor_count, "memory_bytes": properties.total_memory,
                "driver_version": info.driver_version}
    return {"type": "cpu", "name": _processor_name(), "arch": device_info("cpu").arch_text,
            "compute_units": os.cpu_count(), "torch_threads": torch.get_num_threads()}


def environment(device: torch.device, command: Sequence[str]) -> dict[str, Any]:
    """The device, versions, machine, UTC date and the command line (quoted so it can be pasted back)."""
    return {
        "device": _device(device),
        "versions": _versions(),
        "machine": {"platform": platform.platform(), "load_average": list(os.getloadavg()),
                    "thread_environment": {name: os.environ[name] for name in _THREAD_VARIABLES if name in os.environ}},
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(command),
    }
