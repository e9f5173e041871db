"""The CUDA plugin's registration against its declarations in registry/kernels/cuda: the live one on a GPU
(test_cuda_plugin_gpu.py), and the one a host of the test's own records for GPUs a CPU machine lacks
(test_cuda_plugin.py). Not a test module (no ``test_`` prefix)."""

from __future__ import annotations

from kabi._base.core_answers import KernelInfo
from kabi._base.declarations import KernelSpec, kernel_specs

PLUGIN = "kabi-cuda"


def declared_for(arch: int) -> list[KernelSpec]:
    """The plugin's kernels that registry/kernels/cuda declares for a device of ``arch`` (e.g. 90)."""
    return [spec for spec in kernel_specs("cuda") if spec.plugin == PLUGIN and (
        arch in spec.archs if spec.archs else spec.arch_min <= arch and (spec.arch_max == 0 or arch <= spec.arch_max))]


def _type_constraints(text: str) -> dict[str, tuple[str, ...]]:
    """kabi.h's type_constraints text, "F8A: float8_e4m3fn; F8B: float8_e4m3fn", as a table."""
    table = {}
    for part in filter(str.strip, text.split(";")):
        name, dtypes = part.split(":")
        table[name.strip()] = tuple(dtype.strip() for dtype in dtypes.split(","))
    return table


def mismatches(info: KernelInfo, spec: KernelSpec) -> list[str]:
    """Each field in which a registered kernel differs from its declaration, as "field: registered != declared"."""
    pairs = {
        "backend": (info.backend, spec.backend),
        "device": (info.device, spec.device),
        "archs": (info.archs, spec.archs),
        "arch range": (info.arch_range, (spec.arch_min, spec.arch_max)),
        "features": (set(info.features), set(spec.features)),
        "dtypes": (set(info.dtypes), set(spec.dtypes)),
        "type_constraints": (_type_constraints(info.type_constraints), dict(spec.type_constraints)),
        "layouts": (set(info.layouts), set(spec.layouts)),
        "batch_mode": (info.batch_mode, spec.batch_mode),
        "alignment": (info.alignment, spec.alignment),
        "priority": (info.priority, spec.priority),
        # A native function kernel with a workspace, whose fingerprint names the library its code comes from (the
        # plugin itself for its hand-written kernels).
        "kind": (info.kind, "function"),
        "workspace": (info.has_workspace, True),
        "fingerprint's library": (any(library in info.fingerprint for library in ("cutlass", "cublasLt", "kabi-cuda")),
                                  True),
        # cuBLASLt's slots name the algorithm they run per problem; a CUTLASS kernel's fingerprint names its one.
        "variant": (info.has_variant, info.fingerprint.startswith("cuda.cublaslt")),
    }
    return [f"{spec.name} ({spec.op}) {field}: {registered!r} != {declared!r}"
            for field, (registered, declared) in pairs.items() if registered != declared]
