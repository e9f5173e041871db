"""``import kabi`` stays cheap: it adds at most 0.1 s to ``import torch`` (issue 14). A wall-time bound would be flaky
on a loaded CI machine, so these tests guard what the time is made of instead: the modules that most programs never
use are not imported with kabi, and neither is the metadata scan of every installed distribution. What ``import
kabi`` must still do (its ops defined for torch, its plugins loaded) is checked here too, in the same fresh process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# Imported with kabi, each of these would cost every process its import time, and none is needed before it is used.
DEFERRED_MODULES = (
    "kabi._benchmarking",  # kabi.benchmark, kabi.BenchmarkResults, `kabi bench`
    "kabi.cli",
    "kabi.backends.cuda",  # kabi.cuda: CUDA C++ through NVRTC
    "kabi.backends.triton",  # registered when CUDA kernels are first asked for
    "triton",
    "torch._dynamo",  # seconds; kabi's ops become traceable when the program imports it
    "cuda.bindings",
    "scipy_openblas32",  # found, not imported: its __init__ scans the installed distributions' metadata
    "matplotlib",
    "rich",
)

_CHILD = """
import importlib.metadata, json, sys
import torch

scans = []
discover = importlib.metadata.Distribution.discover.__func__


def recording_discover(cls, **context):
    scans.append(context)
    return discover(cls, **context)


importlib.metadata.Distribution.discover = classmethod(recording_discover)
before = set(sys.modules)
import kabi
imported = sorted(set(sys.modules) - before)
print(json.dumps({
    "imported": imported,
    "metadata_scans": len(scans),
    "torch_ops": sorted(name for name in kabi.ops.__all__ if hasattr(torch.ops.kabi, name)),
    "ops": sorted(kabi.ops.__all__),
    "builtin_plugins_loaded": sorted(r.name for r in kabi._plugins.discovery.plugin_records() if r.loaded),
}))
"""


@pytest.fixture(scope="module")
def fresh_import() -> dict:
    """What a fresh process imports with ``import kabi`` after ``import torch``, and what kabi set up. The process
    finds OpenBLAS itself, as a user's would."""
    environment = {name: value for name, value in os.environ.items() if name != "KABI_OPENBLAS_LIBRARY"}
    result = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, env=environment,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("module", DEFERRED_MODULES)
def test_import_kabi_leaves_module_unimported(fresh_import, module):
    imported = [name for name in fresh_import["imported"] if name == module or name.startswith(module + ".")]
    assert not imported, f"`import kabi` imported {imported}; import them where they are first used"


def test_import_kabi_does_not_scan_distribution_metadata(fresh_import):
    # Each scan reads every installed distribution's metadata (entry points and versions alike); kabi reads its
    # plugins' entry points when the registry is first completed, not at import.
    assert fresh_import["metadata_scans"] == 0


def test_import_kabi_still_defines_every_torch_op_and_loads_builtin_plugins(fresh_import):
    assert fresh_import["ops"], "kabi.ops declares no op"
    assert fresh_import["torch_ops"] == fresh_import["ops"]
    assert "kabi-cpu" in fresh_import["builtin_plugins_loaded"]


def test_deferred_public_names_still_resolve():
    """The names kabi imports on first use (kabi.benchmark, kabi.BenchmarkResults, kabi.cuda) resolve to the real
    objects, are listed by dir(), and an unknown name still raises AttributeError naming it."""
    import kabi
    from kabi import _benchmarking
    from kabi.backends import cuda

    assert kabi.benchmark is _benchmarking.benchmark
    assert kabi.BenchmarkResults is _benchmarking.BenchmarkResults
    assert kabi.cuda is cuda
    assert {"benchmark", "BenchmarkResults", "cuda"} <= set(dir(kabi))
    with pytest.raises(AttributeError, match="no_such_name"):
        kabi.no_such_name  # noqa: B018
