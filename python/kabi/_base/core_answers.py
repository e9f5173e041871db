"""Frozen records of what the core reports: a problem, a kernel's declaration, a candidate of a selection.

The binding hands these over as dicts with bit masks; here they become small dataclasses with names, so that
``kabi.explain``, ``kabi.kernels()`` and ``supports`` predicates read ``problem.dims["M"]`` or
``kernel.dtypes == ("float32", "float64")``.

Example::

    >>> problem.dims, problem.dtype, problem.layouts
    ({'M': 8, 'K': 8, 'N': 8}, 'float32', ('contiguous', 'contiguous'))
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Mapping

from .. import _core
from .tensors import device_type_name

__all__ = ["Candidate", "KernelInfo", "Problem", "bit_names", "names_to_bits"]

_BATCH_MODE_NAMES = {value: name for name, value in _core.BATCH_MODES.items()}


def bit_names(mask: int, table: Mapping[str, int]) -> tuple[str, ...]:
    """The names of the bits set in ``mask`` (``table`` maps name -> bit)."""
    return tuple(name for name, bit in table.items() if mask & bit)


@functools.lru_cache(maxsize=1024)
def _core_bit_names(table: str, mask: int) -> tuple[str, ...]:
    """``bit_names`` over one of the core's tables (``"FEATURES"``, ``"DTYPES"``, ``"LAYOUTS"``), remembered: every
    selection names the features, dtypes and layouts of each of its candidates, and where a GPU's backends register
    some 260 matmul kernels, naming them took most of a selection's time."""
    return bit_names(mask, getattr(_core, table))


def names_to_bits(names: Any, table: Mapping[str, int], what: str, owner: str) -> int:
    """OR of the bits of ``names``; an unknown name raises ``ValueError`` naming ``what`` and the known ones."""
    mask = 0
    for name in names:
        try:
            mask |= table[name]
        except (KeyError, TypeError):
            raise ValueError(f"{owner}: unknown {what} {name!r}; expected one of {', '.join(table)}") from None
    return mask


def _layout_name(bit: int) -> str:
    names = _core_bit_names("LAYOUTS", bit)
    return names[0] if len(names) == 1 else "|".join(names) or "none"


@dataclass(frozen=True)
class Problem:
    """What the core derived from one call: device, dtypes (the first type variable's, and every variable's), named
    dims, batch, input layouts ("absent" for an optional input not given), output shapes, attributes, key, and which
    declared shape each input has (0: its first; 1 for scaled_mm's row-wise ``scale_a: [] | [M, 1]``)."""

    device: str
    device_type: int
    device_index: int
    dtype: str
    dims: Mapping[str, int]
    batch_shape: tuple[int, ...]
    batch_size: int
    layouts: tuple[str, ...]
    batch_mode: str
    output_shape: tuple[int, ...]
    key: str
    type_bindings: tuple[str, ...] = ()
    output_shapes: tuple[tuple[int, ...], ...] = ()
    attributes: tuple[Any, ...] = ()
    input_shapes: tuple[int, ...] = ()

    @classmethod
    def from_core(cls, raw: Mapping[str, Any]) -> Problem:
        device = device_type_name(raw["device_type"])
        return cls(
            device=device if device == "cpu" else f"{device}:{raw['device_index']}",
            device_type=raw["device_type"],
            device_index=raw["device_index"],
            dtype=raw["dtype"],
            dims=dict(raw["dims"]),
            batch_shape=tuple(raw["batch_shape"]),
            batch_size=raw["batch_size"],
            layouts=tuple(
                _layout_name(bit) if present else "absent"
                for bit, present in zip(raw["layouts"], raw["inputs_present"])
            ),
            batch_mode=_BATCH_MODE_NAMES.get(raw["batch_mode"], str(raw["batch_mode"])),
            output_shape=tuple(raw["output_shape"]),
            key=raw["key"],
            type_bindings=tuple(raw["type_bindings"]),
            output_shapes=tuple(tuple(shape) for shape in raw["output_shapes"]),
            attributes=tuple(raw["attributes"]),
            input_shapes=tuple(raw["input_shapes"]),
        )


@dataclass(frozen=True)
class KernelInfo:
    """A registered kernel's declaration, as the core holds it."""

    op: str
    name: str
    backend: str
    kind: str
    device: str
    archs: tuple[int, ...]
    arch_range: tuple[int, int]
    features: tuple[str, ...]
    dtypes: tuple[str, ...]
    layouts: tuple[str, ...]
    batch_mode: str
    alignment: int
    priority: int
    plugin: str
    fingerprint: str
    type_constraints: str = ""
    has_workspace: bool = False
    has_variant: bool = False
    """Whether it names, per problem, the variant it runs (the variant function of the C ABI)."""
    input_layouts: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """The layouts of the first inputs, as declared per input (kabi_kernel_desc.input_layouts): (input name, layout
    names) in input order; the inputs past them take ``layouts``. ``dict(kernel.input_layouts)["b"] ==
    ("col_strided",)``."""

    @classmethod
    def from_core(cls, raw: Mapping[str, Any]) -> KernelInfo:
        return cls(
            op=raw["op"],
            name=raw["name"],
            backend=raw["backend"],
            kind=raw["kind"],
            device=device_type_name(raw["device_type"]),
            archs=tuple(raw["archs"]),
            arch_range=(raw["arch_min"], raw["arch_max"]),
            features=_core_bit_names("FEATURES", raw["required_features"]),
            dtypes=_core_bit_names("DTYPES", raw["dtypes"]),
            layouts=_core_bit_names("LAYOUTS", raw["layouts"]),
            batch_mode=_BATCH_MODE_NAMES.get(raw["batch_mode"], str(raw["batch_mode"])),
            alignment=raw["alignment"],
            priority=raw["priority"],
            plugin=raw["plugin"],
            fingerprint=raw["fingerprint"],
            type_constraints=raw["type_constraints"],
            has_workspace=raw["has_workspace"],
            has_variant=raw["has_variant"],
            input_layouts=tuple((name, _core_bit_names("LAYOUTS", mask)) for name, mask in raw["input_layouts"]),
        )

    @property
    def layouts_text(self) -> str:
        """``"any"``, ``"contiguous,row_strided"``, or per input: ``"a: contiguous,row_strided; b: col_strided"``."""

        def names(layouts: tuple[str, ...]) -> str:
            return "any" if len(layouts) == len(_core.LAYOUTS) else ",".join(layouts)

        if not self.input_layouts:
            return names(self.layouts)
        text = "; ".join(f"{name}: {names(layouts)}" for name, layouts in self.input_layouts)
        return text if len(self.layouts) == len(_core.LAYOUTS) else f"{text}; others: {names(self.layouts)}"

    @property
    def archs_text(self) -> str:
        """``"90"``, ``"80-89"``, ``"80+"`` or ``"any"``."""
        if self.archs:
            return ",".join(map(str, self.archs))
        low, high = self.arch_range
        if not low and not high:
            return "any"
        if not high:
            return f"{low}+"
        return f"{low or 0}-{high}"


@dataclass(frozen=True)
class Candidate:
    """One kernel as a selection saw it: eligible or the reason it is not, its tuned time, its correctness-gate
    verdict on the problem ("none", "passed, timed", "passed, untimed" or "failed"), whether it won, the
    execution mode its tuned time was measured in ("eager", or "graph": replayed in a CUDA graph), and whether that
    time is a screened one (the tuner's screen cut the kernel; it never wins by it). ``variant`` is what a kernel
    that names its variants runs for the problem (e.g. a cuBLASLt algorithm; "" for other kernels);
    ``stale_variant`` the variant of its tuning record set aside as stale because it differs ("" for a record made
    before the kernel named one), or None when no record was set aside."""

    kernel: KernelInfo
    eligible: bool
    picked: bool
    reason: str
    tuned_time_us: float | None
    gate: str
    tuned_execution_mode: str = "eager"
    tuned_screened: bool = False
    variant: str = ""
    stale_variant: str | None = None

    @property
    def passed_gate(self) -> bool:
        return self.gate.startswith("passed")

    @property
    def name(self) -> str:
        return self.kernel.name

    @classmethod
    def from_core(cls, raw: Mapping[str, Any]) -> Candidate:
        return cls(
            kernel=KernelInfo.from_core(raw),
            eligible=raw["eligible"],
            picked=raw["picked"],
            reason=raw["reason"],
            tuned_time_us=raw["tuned_time_us"],
            gate=raw["gate"],
            tuned_execution_mode=raw["tuned_execution_mode"],
            tuned_screened=raw["tuned_screened"],
            variant=raw["variant"],
            stale_variant=raw["stale_variant"],
        )
