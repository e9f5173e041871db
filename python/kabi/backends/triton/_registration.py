"""Registering the Triton kernels into kabi: one Python kernel per (family, config) for matmul, and one per config
of the fused linear kernel and of the persistent grouped GEMM (grouped_mm).

kabi's bootstrap hands ``register_triton_kernels`` to plugin discovery, which calls it the first time the registry is
read for CUDA where a CUDA device exists (``kabi._plugins.discovery.complete_registry``), so ``import kabi`` never
pays for importing Triton. Without Triton installed it registers nothing.

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

import functools
import hashlib
import importlib.util
import threading
from pathlib import Path

from ..._base.tensors import DEVICE_TYPES

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
# The grouped GEMM's pointer path runs on sm_80 and later (bfloat16 tensor cores); sm_90 reads through TMA.
_GROUPED_ARCHS = (80, None)
_GROUPED_PRIORITY = 10
_KERNEL_SOURCES = ("_jit_kernels.py", "_decode_jit_kernels.py", "_linear_kernels.py", "_grouped_kernels.py")

_registered_devices: set[str] = set()
_lock = threading.Lock()


def kernel_name(family_name: str, config_tag: str, device: str = "cuda") -> str:
    """The kabi name of one (family, config), e.g. ``triton.matmul.tiled.bm128_bn128_bk64_w8_s3_g8``."""
    name = f"triton.matmul.{family_name}.{config_tag}"
    return name if device == "cuda" else f"{name}.{device}"


def linear_kernel_name(config_tag: str, device: str = "cuda") -> str:
    """The kabi name of one config of the fused linear kernel, e.g. ``triton.linear.bm16_bn64_bk128_w4_s4_g8``."""
    name = f"triton.linear.{config_tag}"
    return name if device == "cuda" else f"{name}.{device}"


@functools.lru_cache(maxsize=1)
def kernels_fingerprint() -> str:
    """Triton's version and a hash of the kernels' sources: a change to either invalidates tuned decisions."""
    import triton

    digest = hashlib.sha256()
    for source in _KERNEL_SOURCES:
        digest.update(Path(__file__).with_name(source).read_bytes())
    return f"triton-{triton.__version__}:{digest.hexdigest()[:16]}"


class _Supports:
    """The supports predicate of one (family, config): kabi passes a ``kabi.Problem`` (dims, dtype, layout names,
    device); returns True or the reason it declines."""

    def __init__(self, family, config) -> None:
        self._family = family
        self._config = config

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
        return self._family.unsupported_reason(self._config, matmul_problem) or True


class _LinearSupports:
    """The supports predicate of one linear config: the rows are x's leading dimensions flattened (the problem's
    batch size), N and K the op's dimensions."""

    def __init__(self, config) -> None:
        self._config = config

    def __call__(self, problem) -> bool | str:
        import torch

        from ._families import device_facts
        from ._linear import linear_unsupported_reason

        arch = None
        if problem.device_type == DEVICE_TYPES["cuda"]:
            arch, _ = device_facts(torch.device("cuda", problem.device_index))
        dims = problem.dims
        return linear_unsupported_reason(self._config, problem.batch_size, dims["N"], dims["K"],
                                         _ELEMENT_SIZES[problem.dtype], arch) or True


def grouped_kernel_name(config_tag: str, device: str = "cuda") -> str:
    """The kabi name of one config of the grouped GEMM, e.g. ``triton.grouped_mm.bm128_bn128_bk64_w8_s3_g8``."""
    name = f"triton.grouped_mm.{config_tag}"
    return name if device == "cuda" else f"{name}.{device}"


class _GroupedSupports:
    """The supports predicate of one grouped config: R is every row in the 2-D form, a group's rows in the 3-D."""

    def __init__(self, config) -> None:
        self._config = config

    def __call__(self, problem) -> bool | str:
        import torch

        from ._families import device_facts
        from ._grouped import grouped_unsupported_reason

        arch = None
        if problem.device_type == DEVICE_TYPES["cuda"]:
            arch, _ = device_facts(torch.device("cuda", problem.device_index))
        dims = problem.dims
        return grouped_unsupported_reason(self._config, dims["R"], dims["N"], dims["K"],
                                          _ELEMENT_SIZES[problem.dtype], arch) or True


def register_triton_kernels(device: str = "cuda") -> list[str]:
    """Register every Triton matmul and linear kernel for ``device`` ("cuda", or "cpu" under the interpreter) and return
    their names. Idempotent; returns [] when Triton is not installed or the device's kernels are registered.

    Raises ValueError for device="cpu" when the kernels were not built for the interpreter (TRITON_INTERPRET=1
    must be set before Triton is first imported), and for any other device.
    """
    if device not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'cuda' or 'cpu' (Triton interpreter), got {device!r}")
    if importlib.util.find_spec("triton") is None:
        return []
    with _lock:
        if device in _registered_devices:
            return []
        names = _register(device)
        _registered_devices.add(device)
        return names


def _register(device: str) -> list[str]:
    from triton.runtime.interpreter import InterpretedFunction

    from ...ops._kernel_registration import register_kernel
    from . import _jit_kernels
    from ._families import DTYPE_NAMES, FAMILIES

    interpreted = isinstance(_jit_kernels.matmul_tiled_kernel, InterpretedFunction)
    if device == "cpu" and not interpreted:
        raise ValueError("device='cpu' runs the kernels in Triton's interpreter: set TRITON_INTERPRET=1 before "
                         "triton is first imported")
    if device == "cuda" and interpreted:
        raise ValueError("the Triton kernels were built for the interpreter (TRITON_INTERPRET=1); they cannot "
                         "be registered for CUDA in this process")
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
                alignment=family.alignment, priority=family.priority - rank, supports=_Supports(family, config),
                fingerprint=f"{kernels_fingerprint()}:{family.name}:{config.tag}")
            names.append(name)
    return names + _register_linear(device) + _register_grouped(device)


def _register_linear(device: str) -> list[str]:
    from ...ops._kernel_registration import register_kernel
    from ._linear import LINEAR_CONFIGS, launch_linear

    names = []
    for rank, config in enumerate(LINEAR_CONFIGS):
        name = linear_kernel_name(config.tag, device)
        register_kernel(
            "linear", functools.partial(launch_linear, config), name=name, backend="triton", device=device,
            archs=None if device == "cpu" else _LINEAR_ARCHS, dtypes=_LINEAR_DTYPES, layouts="any", batch="any",
            priority=_LINEAR_PRIORITY - rank, supports=_LinearSupports(config),
            fingerprint=f"{kernels_fingerprint()}:linear:{config.tag}")
        names.append(name)
    return names


def _register_grouped(device: str) -> list[str]:
    from ...ops._kernel_registration import register_kernel
    from ._grouped import GROUPED_CONFIGS, launch_grouped_mm

    names = []
    for rank, config in enumerate(GROUPED_CONFIGS):
        name = grouped_kernel_name(config.tag, device)
        register_kernel(
            "grouped_mm", functools.partial(launch_grouped_mm, config), name=name, backend="triton", device=device,
            archs=None if device == "cpu" else _GROUPED_ARCHS, dtypes=_LINEAR_DTYPES, layouts="any", batch="none",
            priority=_GROUPED_PRIORITY - rank, supports=_GroupedSupports(config),
            fingerprint=f"{kernels_fingerprint()}:grouped_mm:{config.tag}")
        names.append(name)
    return names
