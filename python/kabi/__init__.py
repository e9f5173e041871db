"""kabi: a portable kernel ABI with a hardware-dispatch registry.

``kabi.ops.matmul(a, b)`` runs the fastest correct implementation registered for the inputs' device; ask why with
``kabi.explain``, force one with ``kabi.use``, add one with ``@kabi.kernel``.

Example::

    >>> import torch, kabi
    >>> c = kabi.ops.matmul(torch.randn(64, 32), torch.randn(32, 16))
    >>> print(kabi.explain(kabi.ops.matmul, torch.randn(64, 32), torch.randn(32, 16)))
"""

from . import _core
from . import _startup  # noqa: F401  (loads plugins and registers the torch-native kernels)
from . import ops
from . import _cache_api as cache
from . import _tuner  # noqa: F401  (turns tuning on: installs the op fronts' decision-miss hook)
from . import _torch_ops  # noqa: F401  (torch.ops.kabi.<op>; kabi.ops traceable by torch.compile)
from ._bench import BenchResult, bench
from ._benchmarking import BenchmarkResults, benchmark
from ._devices import DeviceInfo, device_info, devices
from ._distributed import set_agreement_group
from ._errors import (
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
from ._explain import Explanation, explain
from ._kernels import kernel, kernel_info, kernels, register_kernel, unregister_kernel
from ._plugins import PluginRecord, load_binaries, load_plugin, plugins
from ._records import Candidate, KernelInfo, Problem
from ._scopes import use
from ._stats import Stats, stats
from ._tuner import TuningReport, tune
from ._tuning_policy import tuning
from ._verify import VerifyReport, verify

__version__ = _core.library_version()

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
    "set_agreement_group",
    "stats",
    "tune",
    "tuning",
    "unregister_kernel",
    "use",
    "verify",
]
