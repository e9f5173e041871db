"""kabi: a portable kernel ABI with a hardware-dispatch registry.

``kabi.ops.matmul(a, b)`` runs the fastest correct implementation registered for the inputs' device; ask why with
``kabi.explain``, force one with ``kabi.use``, add one with ``@kabi.kernel``.

Example::

    >>> import torch, kabi
    >>> c = kabi.ops.matmul(torch.randn(64, 32), torch.randn(32, 16))
    >>> print(kabi.explain(kabi.ops.matmul, torch.randn(64, 32), torch.randn(32, 16)))
"""

import sys
from typing import Any

from . import _bootstrap, _core, ops
from ._base.core_answers import Candidate, KernelInfo, Problem
from ._base.devices import DeviceInfo, device_info, devices
from ._base.errors import (
    AbiMismatchError,
    AlreadyExistsError,
    ArgumentTypeError,
    ConstraintViolatedError,
    InternalError,
    InvalidArgumentError,
    KabiError,
    KabiIOError,
    KernelError,
    KernelFailedError,
    NoEligibleKernelError,
    NotFoundError,
    UnavailableError,
    UnsupportedDtypeError,
)
from ._plugins.loading import PluginRecord, load_binaries, load_plugin, plugins
from ._selection import cache
from ._selection.bench import BenchResult, bench
from ._selection.distributed import set_agreement_group
from ._selection.explain import Explanation, explain
from ._selection.tuner import TuningReport, tune
from ._selection.tuning_policy import tuning
from ._selection.verify import VerifyReport, verify
from .ops._kernel_registration import kernel, kernel_info, kernels, register_kernel, unregister_kernel
from .ops._op_registration import register_op
from .ops._scopes import use
from .ops._stats import Stats, stats

__version__ = _core.library_version()

_bootstrap.bootstrap(sys.modules[__name__])


def __getattr__(name: str) -> Any:
    """The public names whose modules most programs never use, imported on first use: ``kabi.benchmark`` and
    ``kabi.BenchmarkResults`` (the ``kabi bench`` suites) and ``kabi.cuda`` (CUDA C++ through NVRTC). Importing them
    with kabi would add their import time to every ``import kabi``."""
    if name in ("benchmark", "BenchmarkResults"):
        from . import _benchmarking

        value = getattr(_benchmarking, name)
    elif name == "cuda":
        from .backends import cuda as value
    else:
        raise AttributeError(f"module 'kabi' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

__all__ = [
    "AbiMismatchError",
    "AlreadyExistsError",
    "ArgumentTypeError",
    "BenchResult",
    "BenchmarkResults",
    "Candidate",
    "ConstraintViolatedError",
    "DeviceInfo",
    "Explanation",
    "InternalError",
    "InvalidArgumentError",
    "KabiError",
    "KabiIOError",
    "KernelError",
    "KernelFailedError",
    "KernelInfo",
    "NoEligibleKernelError",
    "NotFoundError",
    "PluginRecord",
    "Problem",
    "Stats",
    "TuningReport",
    "UnavailableError",
    "UnsupportedDtypeError",
    "VerifyReport",
    "bench",
    "benchmark",
    "cache",
    "cuda",
    "device_info",
    "devices",
    "explain",
    "kernel",
    "kernel_info",
    "kernels",
    "load_binaries",
    "load_plugin",
    "ops",
    "plugins",
    "register_kernel",
    "register_op",
    "set_agreement_group",
    "stats",
    "tune",
    "tuning",
    "unregister_kernel",
    "use",
    "verify",
]
