"""Registering the Triton kernels into kabi: one Python kernel per (family, config) for matmul, the aligned-copies
matmul (cuBLAS's product of operands zero-padded by a Triton copy kernel, ``_aligned_copies``), and one per config
of the fused linear kernel, of the FP8 scaled_mm kernels and of the persistent grouped GEMM (grouped_mm); on a GPU
also the device binaries of the matmul configs, of the grouped GEMM's, of the linear kernel's and of the FP8
kernels' (``_native``), which serve the problems they cover in place of their Python kernels, launched by the core.

kabi's bootstrap hands ``register_triton_kernels`` to plugin discovery, which calls it the first time the registry is
read for CUDA where a CUDA device exists (``kabi._plugins.discovery.complete_registry``), so ``import kabi`` never
pays for importing Triton. Without Triton installed it registers nothing.

Registering imports no Triton either: a kernel's declaration (name, configs, supports predicate, priority,
fingerprint) comes from modules that do not import it, and each Python kernel imports its ``@triton.jit`` module
(and Triton) at its first call (``_kernel_modules``). Device binaries found on disk register as they are; only
compiling missing ones imports Triton. So a process whose picks are native kernels never imports Triton.

On a machine without a GPU, Triton's interpreter (``TRITON_INTERPRET=1``, set before Triton is first imported)
runs the same kernels on CPU tensors; ``register_triton_kernels(device="cpu")`` then registers them for the CPU so
tests can drive them through ``kabi.ops.matmul``::

    os.environ["TRITON_INTERPRET"] = "1"
    import kabi
    from kabi.backends.triton import register_triton_kernels
    register_triton_kernels(device="cpu")
    with kabi.use(matmul="triton.matmul.tiled.bm64_bn64_bk64_w4_s3_g8.cpu"):
        c = kabi.ops.matmul(a, b)
"""

from __future__ import annotations

import abc
import functools
import importlib.util
import logging
import os
import threading
from typing import Any, Callable, Sequence

from ..._base.tensors import DEVICE_TYPES
from ._names import (GROUPED_FAMILY_NAME, LINEAR_FAMILY_NAME, SCALED_MM_FAMILY_NAME, SCALED_MM_TMA_FAMILY_NAME,
                     aligned_copies_kernel_name, grouped_kernel_name, kernel_name, kernels_fingerprint,
                     linear_kernel_name, scaled_mm_kernel_name)

_ELEMENT_SIZES = {"float16": 2, "bfloat16": 2, "float32": 4}
# The interpreter's tl.dot on bfloat16 multiplies raw bit patterns, so on the CPU only float16/float32 register.
_INTERPRETER_DTYPES = ("float16", "float32")
_PYTHON_LAYOUTS = {
    "tiled": ("contiguous", "row_strided", "col_strided", "general"),
    "small_m": ("contiguous", "row_strided", "col_strided", "general"),
    # Other strides would need a copy before TMA can read them.
    "persistent_tma": ("contiguous", "row_strided", "col_strided"),
    # Each config reads one weight layout (its supports predicate says which); any strides are correct.
    "decode": ("contiguous", "row_strided", "col_strided", "general"),
}
# The fused linear kernel's tl.dot needs the tensor cores of sm_80 for bfloat16; on the CPU it runs everywhere (its
# bfloat16 product is taken in float32 there, see _linear.launch_linear).
_LINEAR_ARCHS = (80, None)
_LINEAR_DTYPES = ("float16", "bfloat16", "float32")
# Above torch-native (0), the configs in LINEAR_CONFIGS' order: where nothing is tuned, the first config that fits
# the problem is the heuristic pick.
_LINEAR_PRIORITY = 10
# On the CPU the interpreter runs the FP8 kernels on float8_e4m3fn and float8_e5m2 alike (its FP8 tl.dot is exact,
# unlike its bfloat16 one).
_SCALED_MM_DTYPES = ("bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2")
# wgmma reads FP8 tiles K-major: a row-major (or a view with unit stride along K) and b column-major; other strides
# are correct but slow, and declined so that torch's kernel serves them.
_SCALED_MM_LAYOUTS = ("contiguous", "row_strided", "col_strided")
_SCALED_MM_OUT_SIZES = {"bfloat16": 2, "float16": 2, "float32": 4}
# The aligned-copies matmul: the 2-byte dtypes whose unaligned pitches it mends; the copy kernel runs wherever
# Triton does, the product is cuBLAS's. Below torch.matmul (0), as torch.matmul.aligned_copies.cuda.
_ALIGNED_COPIES_DTYPES = ("float16", "bfloat16")
_ALIGNED_COPIES_ARCH_MIN = 80
_ALIGNED_COPIES_PRIORITY = -1

_logger = logging.getLogger("kabi")
_registered_devices: set[str] = set()
_lock = threading.Lock()


def _covering_layout(a_layout: str, b_layout: str) -> str | None:
    """The native layout variant that serves inputs of these layout classes, if one does."""
    from ._families import LAYOUT_VARIANTS
    from ._native import NATIVE_LAYOUTS

    for variant in NATIVE_LAYOUTS:
        a_classes, b_classes = LAYOUT_VARIANTS[variant]
        if a_layout in a_classes and b_layout in b_classes:
            return variant
    return None


class _Supports:
    """The supports predicate of one (family, config), or of one of its device binaries (``rows``: the row count
    that binary is compiled for, 0 where one binary serves every M; None for the Python kernel): kabi passes a
    ``kabi.Problem`` (dims, dtype, layout names, device); returns True or the reason it declines."""

    def __init__(self, family, config, binaries: dict | None = None, rows: int | None = None) -> None:
        self._family = family
        self._config = config
        # {(arch, dtype, layout variant, rows): device binary name}: the problems this Python kernel leaves to its
        # binaries.
        self._binaries = binaries or {}
        self._rows = rows

    def __call__(self, problem) -> bool | str:
        import torch

        from ._families import MatmulProblem, device_facts

        dims = problem.dims
        arch = None
        if problem.device_type == DEVICE_TYPES["cuda"]:
            arch, _ = device_facts(torch.device("cuda", problem.device_index))
        a_layout, b_layout = problem.layouts[:2]
        matmul_problem = MatmulProblem(
            m=dims["M"], n=dims["N"], k=dims["K"], element_size=_ELEMENT_SIZES[problem.dtype], arch=arch,
            a_column_major=a_layout == "col_strided", b_column_major=b_layout == "col_strided")
        rows = self._family.rows_for(self._config, matmul_problem.m)
        if self._rows is not None and rows != self._rows:
            return f"M={matmul_problem.m} runs {rows} rows per program; this binary is compiled for {self._rows}"
        if self._binaries:
            binary = self._binaries.get((arch, problem.dtype, _covering_layout(a_layout, b_layout), rows))
            if binary and not self._family.binary_unsupported_reason(self._config, matmul_problem):
                return f"runs as its device binary {binary}"
        return self._family.unsupported_reason(self._config, matmul_problem) or True


class _ConfigSupports(abc.ABC):
    """The supports predicate of one config of a kernel with device binaries (linear's, the grouped GEMM's,
    scaled_mm's), or of one of those binaries (no ``binaries``): the config's own rules first; then the Python kernel
    leaves to its binaries (``binaries``: {(arch, dtype, layout variant, 0): device binary name}) the problems they
    serve. Subclasses give the rules (``unsupported_reason``), the family whose binaries serve, and what those
    binaries decline beyond the config's rules (``binary_declines``)."""

    def __init__(self, config, binaries: dict | None = None) -> None:
        self._config = config
        self._binaries = binaries or {}

    def __call__(self, problem) -> bool | str:
        import torch

        from ._families import device_facts

        arch = None
        if problem.device_type == DEVICE_TYPES["cuda"]:
            arch, _ = device_facts(torch.device("cuda", problem.device_index))
        reason = self.unsupported_reason(problem, arch)
        if reason:
            return reason
        family = self.binary_family()
        binary = self._binaries.get((arch, problem.dtype, family.covering_layout(problem.layouts), 0))
        if binary and not self.binary_declines(family, problem):
            return f"runs as its device binary {binary}"
        return True

    @abc.abstractmethod
    def unsupported_reason(self, problem, arch: int | None) -> str | None:
        """Why the config declines the problem on ``arch`` (None off the GPU), or None."""

    @abc.abstractmethod
    def binary_family(self):
        """The family whose device binaries serve the config's problems."""

    def binary_declines(self, family, problem) -> str | None:
        return family.binary_unsupported_reason(problem.dims["N"], problem.dims["K"])


class _LinearSupports(_ConfigSupports):
    """Linear's: the rows are x's leading dimensions flattened (the problem's batch size), N and K the op's
    dimensions."""

    def unsupported_reason(self, problem, arch: int | None) -> str | None:
        from ._linear import linear_unsupported_reason

        dims = problem.dims
        return linear_unsupported_reason(self._config, problem.batch_size, dims["N"], dims["K"],
                                         _ELEMENT_SIZES[problem.dtype], arch)

    def binary_family(self):
        from ._linear import LINEAR_FAMILY

        return LINEAR_FAMILY


class _GroupedSupports(_ConfigSupports):
    """The grouped GEMM's: R is every row in the 2-D form, a group's rows in the 3-D."""

    def unsupported_reason(self, problem, arch: int | None) -> str | None:
        from ._grouped import grouped_unsupported_reason

        dims = problem.dims
        return grouped_unsupported_reason(self._config, dims["R"], dims["N"], dims["K"],
                                          _ELEMENT_SIZES[problem.dtype], arch)

    def binary_family(self):
        from ._grouped import GROUPED_FAMILY

        return GROUPED_FAMILY


class _ScaledMMSupports(_ConfigSupports):
    """scaled_mm's, of the pointer or the persistent TMA kernel (``tma``): a row-major, b column-major on a GPU (the
    FP8 operand layout of wgmma), and the config's fit to M, N, K. The binaries are keyed by the output dtype."""

    def __init__(self, config, tma: bool, binaries: dict | None = None) -> None:
        super().__init__(config, binaries)
        self._tma = tma

    def unsupported_reason(self, problem, arch: int | None) -> str | None:
        from ._scaled_mm import scaled_mm_tma_unsupported_reason, scaled_mm_unsupported_reason

        # TMA reads the tiles K-major on any device; the pointer kernel needs it only for speed.
        if problem.device_type == DEVICE_TYPES["cuda"] or self._tma:
            a_layout, b_layout = problem.layouts[:2]
            if a_layout == "col_strided" or b_layout != "col_strided":
                return (f"the FP8 tiles are read K-major: a row-major and b column-major (a transposed [N, K] "
                        f"weight); a is {a_layout}, b is {b_layout}")
        dims = problem.dims
        if self._tma:
            return scaled_mm_tma_unsupported_reason(self._config, dims["M"], dims["N"], dims["K"],
                                                    _SCALED_MM_OUT_SIZES[problem.dtype], arch)
        return scaled_mm_unsupported_reason(self._config, dims["M"], dims["N"], dims["K"], arch)

    def binary_family(self):
        # Both families declare the same layouts and rules; the pointer family's judge them.
        from ._scaled_mm import SCALED_MM_FAMILY

        return SCALED_MM_FAMILY

    def binary_declines(self, family, problem) -> str | None:
        return family.binary_unsupported_reason(problem.dims["N"], problem.dims["K"], problem.type_bindings[1:])


def register_triton_kernels(device: str = "cuda") -> list[str]:
    """Register every Triton matmul and linear kernel for ``device`` ("cuda", or "cpu" under the interpreter) and return
    their names. Idempotent; returns [] when Triton is not installed or the device's kernels are registered.

    Raises ValueError for device="cpu" when the kernels were not built for the interpreter (TRITON_INTERPRET=1
    must be set before Triton is first imported), and for any other device.
    """
    if device not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'cuda' or 'cpu' (Triton interpreter), got {device!r}")
    # Found, not imported: see the module's docstring.
    if importlib.util.find_spec("triton") is None:
        return []
    with _lock:
        if device in _registered_devices:
            return []
        names = _register(device)
        _registered_devices.add(device)
        return names


def _register(device: str) -> list[str]:
    from ...ops._kernel_registration import register_kernel
    from ._families import DTYPE_NAMES, FAMILIES
    from ._kernel_modules import kernels_interpreted

    interpreted = kernels_interpreted()
    if device == "cpu" and not interpreted:
        raise ValueError("device='cpu' runs the kernels in Triton's interpreter: set TRITON_INTERPRET=1 before "
                         "triton is first imported")
    if device == "cuda" and interpreted:
        raise ValueError("the Triton kernels were built for the interpreter (TRITON_INTERPRET=1); they cannot "
                         "be registered for CUDA in this process")
    binaries = _register_binaries() if device == "cuda" else {}
    names = []
    for family in FAMILIES.values():
        dtypes = tuple(DTYPE_NAMES[dtype] for dtype in family.dtypes)
        if device == "cpu":
            dtypes = tuple(dtype for dtype in dtypes if dtype in _INTERPRETER_DTYPES)
            archs = None
        else:
            archs = set(family.exact_archs) if family.exact_archs else (family.arch_min, None)
        for rank, config in enumerate(family.configs):
            name = kernel_name(family.name, config.tag, device)
            register_kernel(
                "matmul", functools.partial(family.launch, config), name=name, backend="triton", device=device,
                archs=archs, dtypes=dtypes, layouts=_PYTHON_LAYOUTS[family.name], batch="none",
                alignment=family.alignment, priority=family.priority - rank,
                supports=_Supports(family, config, binaries.get((family.name, config.tag))),
                fingerprint=f"{kernels_fingerprint()}:{family.name}:{config.tag}")
            names.append(name)
    binary_names = [name for twins in binaries.values() for name in twins.values()]
    return (names + binary_names + _register_aligned_copies(device) + _register_linear(device, binaries)
            + _register_scaled_mm(device, binaries) + _register_grouped(device, binaries))


def _register_aligned_copies(device: str) -> list[str]:
    """torch_native's aligned-copies matmul with its copies made by the Triton copy kernel: offered where the torch
    one is (the same supports predicate), below torch.matmul where nothing is tuned, as that one is."""
    from ...ops._kernel_registration import register_kernel
    from ..torch_native import matmul_aligned_copies_supports
    from ._aligned_copies import launch_aligned_copies

    name = aligned_copies_kernel_name(device)
    register_kernel("matmul", launch_aligned_copies, name=name, backend="triton", device=device,
                    archs=None if device == "cpu" else (_ALIGNED_COPIES_ARCH_MIN, None),
                    dtypes=_ALIGNED_COPIES_DTYPES, layouts=("contiguous", "row_strided", "col_strided"), batch="none",
                    priority=_ALIGNED_COPIES_PRIORITY, supports=matmul_aligned_copies_supports,
                    fingerprint=f"{kernels_fingerprint()}:matmul:aligned_copies")
    return [name]


def _binary_supports(family_name: str, config, rows: int):
    """The supports predicate of a device binary: its Python twin's shape rules."""
    from ._families import FAMILIES

    if family_name == GROUPED_FAMILY_NAME:
        return _GroupedSupports(config)
    if family_name == LINEAR_FAMILY_NAME:
        return _LinearSupports(config)
    if family_name in (SCALED_MM_FAMILY_NAME, SCALED_MM_TMA_FAMILY_NAME):
        return _ScaledMMSupports(config, tma=family_name == SCALED_MM_TMA_FAMILY_NAME)
    return _Supports(FAMILIES[family_name], config, rows=rows)


def _register_binaries() -> dict[tuple[str, str], dict[tuple[int, str, str, int], str]]:
    """Register the device binaries of every (family, config) for the arch of each CUDA device libkabi sees
    (compiled at first use, cached on disk: see _native); return, per (family, config tag), the binary serving
    each (arch, dtype, layout variant, rows). Empty, leaving every problem to the Python kernels, with
    KABI_TRITON_BINARIES=0 or where the core sees no CUDA device; an arch whose binaries cannot be built is
    logged and left to them too."""
    from ..._base.devices import devices
    from ._native import register_native_binaries

    if os.environ.get("KABI_TRITON_BINARIES", "1") == "0":
        return {}
    binaries: dict[tuple[str, str], dict[tuple[int, str, str, int], str]] = {}
    gpus = {(device.arch, device.compute_units) for device in devices() if device.device_type == "cuda"}
    for arch, multiprocessors in sorted(gpus):
        try:
            registered = register_native_binaries(arch, multiprocessors, _binary_supports)
        except Exception as error:  # noqa: BLE001 - the Python kernels still serve every problem
            _logger.warning("kabi: Triton device binaries for sm_%d are unavailable, the Python kernels serve: "
                            "%s: %s", arch, type(error).__name__, error)
            continue
        for (family, tag, dtype, layout, rows), name in registered.items():
            binaries.setdefault((family, tag), {})[(arch, dtype, layout, rows)] = name
    return binaries


def _register_configs(op: str, device: str, configs: Sequence[Any], launch: Callable[..., Any],
                      name_of: Callable[[Any], str], supports_of: Callable[[Any], Callable[..., Any]],
                      fingerprint_tag: str, archs: Any, priority: int, **declaration: Any) -> list[str]:
    """Register one Python kernel per config of a Triton kernel of ``op``, in the configs' order of preference
    (priority falling by one per config), each with its own supports predicate; on the CPU (the interpreter) for
    any arch. ``declaration`` holds the rest of register_kernel's declaration (dtypes, layouts, batch, ...)."""
    from ...ops._kernel_registration import register_kernel

    names = []
    for rank, config in enumerate(configs):
        name = name_of(config)
        register_kernel(op, functools.partial(launch, config), name=name, backend="triton", device=device,
                        archs=None if device == "cpu" else archs, priority=priority - rank,
                        supports=supports_of(config),
                        fingerprint=f"{kernels_fingerprint()}:{op}:{fingerprint_tag}{config.tag}", **declaration)
        names.append(name)
    return names


def _register_linear(device: str, binaries: dict) -> list[str]:
    from ._linear import LINEAR_CONFIGS, LINEAR_FAMILY, launch_linear

    return _register_configs("linear", device, LINEAR_CONFIGS, launch_linear,
                             lambda config: linear_kernel_name(config.tag, device),
                             lambda config: _LinearSupports(config, binaries.get((LINEAR_FAMILY.name, config.tag))),
                             "", _LINEAR_ARCHS, _LINEAR_PRIORITY, dtypes=_LINEAR_DTYPES, layouts="any", batch="any")


def _register_grouped(device: str, binaries: dict) -> list[str]:
    from ._grouped import GROUPED_CONFIGS, GROUPED_FAMILY, launch_grouped_mm

    # The pointer path runs on sm_80 and later (bfloat16 tensor cores); sm_90 reads through TMA.
    return _register_configs("grouped_mm", device, GROUPED_CONFIGS, launch_grouped_mm,
                             lambda config: grouped_kernel_name(config.tag, device),
                             lambda config: _GroupedSupports(config, binaries.get((GROUPED_FAMILY.name, config.tag))),
                             "", (GROUPED_FAMILY.arch_min, None), GROUPED_FAMILY.priority, dtypes=_LINEAR_DTYPES,
                             layouts="any", batch="none")


def _register_scaled_mm(device: str, binaries: dict) -> list[str]:
    from ._scaled_mm import SCALED_MM_FAMILY, SCALED_MM_TMA_FAMILY, launch_scaled_mm, launch_scaled_mm_tma

    declaration = {"dtypes": _SCALED_MM_DTYPES, "layouts": _SCALED_MM_LAYOUTS, "batch": "none",
                   "alignment": 0 if device == "cpu" else SCALED_MM_FAMILY.alignment}
    names = []
    # The pointer kernel on every arch with FP8 tensor cores (sm_89 and later), the persistent one on sm_90 only,
    # ranked above it where both fit.
    for family, launch, archs in ((SCALED_MM_FAMILY, launch_scaled_mm, (SCALED_MM_FAMILY.arch_min, None)),
                                  (SCALED_MM_TMA_FAMILY, launch_scaled_mm_tma, set(SCALED_MM_TMA_FAMILY.exact_archs))):
        tma = family is SCALED_MM_TMA_FAMILY
        names += _register_configs(
            "scaled_mm", device, family.configs, launch,
            lambda config, tma=tma: scaled_mm_kernel_name(config.tag, device, tma),
            lambda config, tma=tma, family=family: _ScaledMMSupports(config, tma,
                                                                     binaries.get((family.name, config.tag))),
            "tma." if tma else "", archs, family.priority, **declaration)
    return names
