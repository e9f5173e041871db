"""The devices kabi sees, as libkabi probes them (CPU features by cpuid; CUDA through the driver, if any).

Example::

    >>> [(d.name, d.arch, d.features[:3]) for d in kabi.devices()]
    [('Intel(R) Xeon(R) ...', 3, ('sse4_2', 'avx', 'avx2'))]
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import _core
from .core_answers import bit_names
from .errors import KabiError
from .tensors import DEVICE_TYPES, device_type_code, device_type_name

__all__ = ["DeviceInfo", "device_info", "devices"]


@dataclass(frozen=True)
class DeviceInfo:
    """One device: arch is the compute capability (90) on CUDA and the x86-64 level (1-4) on CPUs."""

    device_type: str
    index: int
    name: str
    vendor: str
    arch: int
    compute_units: int
    features: tuple[str, ...]
    driver_version: int
    total_memory_bytes: int
    signature: str

    @property
    def arch_text(self) -> str:
        if self.device_type == "cpu":
            return f"x86-64-v{self.arch}" if self.arch else "unknown"
        return f"sm_{self.arch}"


def device_info(device_type: str = "cpu", index: int = 0) -> DeviceInfo:
    """What libkabi knows of one device (``NotFoundError`` if there is no such device)."""
    code = device_type_code(device_type)
    raw = _core.device_info(code, index)
    return DeviceInfo(
        device_type=device_type_name(raw["device_type"]),
        index=raw["device_index"],
        name=raw["name"],
        vendor=raw["vendor"],
        arch=raw["arch"],
        compute_units=raw["compute_units"],
        features=bit_names(raw["features"], _core.FEATURES),
        driver_version=raw["driver_version"],
        total_memory_bytes=raw["total_memory_bytes"],
        signature=_core.device_signature(code, index),
    )


def devices() -> tuple[DeviceInfo, ...]:
    """Every device of every type kabi knows (device types whose driver is missing have none)."""
    found = []
    for name, code in DEVICE_TYPES.items():
        try:
            count = _core.device_count(code)
        except KabiError:  # the core knows no such device type: nothing to list
            continue
        found.extend(device_info(name, index) for index in range(count))
    return tuple(found)
