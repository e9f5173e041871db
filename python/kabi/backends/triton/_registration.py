"""Registering the Triton kernels into kabi: one Python kernel per (family, config).

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

_KABI_DEVICE_TYPE_CUDA = 2  # DLPack's kDLCUDA
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
_KERNEL_SOURCES = ("_jit_kernels.py", "_decode_jit_kernels.py")

_registered_devices: set[str] = set()
_lock = threading.Lock()


def kernel_name(family_name: str, config_tag: str, device: str = "cuda") -> str:
    """The kabi name of one (family, config), e.g. ``triton.matmul.tiled.bm128_bn128_bk64_w8_s3_g8``."""
    name = f"triton.matmul.{family_name}.{config_tag}"
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
        if problem.device_type == _KABI_DEVICE_TYPE_CUDA:
            arch, _ = device_facts(torch.device("cuda", problem.device_index))
        a_layout, b_layout = problem.layouts[:2]
        matmul_problem = MatmulProblem(
            m=dims["M"], n=dims["N"], k=dims["K"], element_size=_ELEMENT_SIZES[problem.dtype], arch=arch,
            a_column_major=a_layout == "col_strided", b_column_major=b_layout == "col_strided")
        return self._family.unsupported_reason(self._config, matmul_problem) or True


def register_triton_kernels(device: str = "cuda") -> list[str]:
    """Register every Triton matmul kernel for ``device`` ("cuda", or "cpu" under the interpreter) and return
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
    return names
