"""Every public reader of the registry sees the same kernels, whichever comes first: the plugins of
KABI_PLUGIN_PATH are loaded before kabi.kernels, kabi.explain, kabi.tune or any command answers, not only by the
first dispatch; and ``import kabi`` itself stays light."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import _cmake

EXAMPLES = _cmake.REPOSITORY / "examples"
VENDOR_KERNEL = "acme.avx2.small_gemm"  # a CPU float32 matmul kernel of examples/vendor_plugin
PLUGIN_KERNEL = "abi_test_good.double"  # the kernel of tests/abi/good_plugin.c, for an op of its own


@pytest.fixture(scope="module")
def plugin_environment(tmp_path_factory) -> dict[str, str]:
    good = _cmake.build_abi_test_plugins(tmp_path_factory.mktemp("completion_abi_plugins"))["good"]
    vendor_build = tmp_path_factory.mktemp("completion_vendor_plugin")
    _cmake.build(EXAMPLES / "vendor_plugin", vendor_build)
    vendor = str(vendor_build / "libacme_kabi.so")
    return {**os.environ, "KABI_PLUGIN_PATH": f"{good}:{vendor}", "KABI_TUNE": "off"}


def _python(environment: dict[str, str], code: str) -> dict:
    result = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def _kabi(environment: dict[str, str], *arguments: str) -> str:
    result = subprocess.run([sys.executable, "-m", "kabi.cli", *arguments], env={**environment, "COLUMNS": "300"},
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


_BEFORE_AND_AFTER_THE_FIRST_CALL = """
import json, sys, torch, kabi
report = {"triton_imported_by_import": "triton" in sys.modules,
          "plugins_at_import": [record["path"] for record in kabi._core.plugin_records()]}
a, b = torch.randn(16, 8), torch.randn(8, 12)
report["kernels_before"] = sorted(kernel.name for kernel in kabi.kernels())
report["matmul_before"] = len(kabi.kernels("matmul"))
report["explained_before"] = [candidate.name for candidate in kabi.explain(kabi.ops.matmul, a, b).candidates]
kabi.ops.matmul(a, b)
report["kernels_after"] = sorted(kernel.name for kernel in kabi.kernels())
report["matmul_after"] = len(kabi.kernels("matmul"))
print(json.dumps(report))
"""


def test_kernels_and_explain_see_the_plugins_before_the_first_call(plugin_environment):
    report = _python(plugin_environment, _BEFORE_AND_AFTER_THE_FIRST_CALL)
    assert report["kernels_before"] == report["kernels_after"]
    assert report["matmul_before"] == report["matmul_after"]
    assert {VENDOR_KERNEL, PLUGIN_KERNEL} <= set(report["kernels_before"])
    assert VENDOR_KERNEL in report["explained_before"]


def test_import_stays_light(plugin_environment):
    report = _python(plugin_environment, _BEFORE_AND_AFTER_THE_FIRST_CALL)
    assert not report["triton_imported_by_import"]
    assert not any(path.endswith(("libacme_kabi.so", "good.so")) for path in report["plugins_at_import"])


def test_tune_before_any_call_measures_the_plugin_kernels(plugin_environment):
    report = _python(plugin_environment, """
import json, torch, kabi
from kabi._selection.tuning_policy import TuningSettings
report = kabi.tune(kabi.ops.matmul, torch.randn(16, 8), torch.randn(8, 12),
                   settings=TuningSettings(warmup=1, repeat=2, min_time_s=0.0))
print(json.dumps([measurement.kernel for measurement in report.measurements]))
""")
    assert VENDOR_KERNEL in report


@pytest.mark.parametrize("command", [
    ["list"],
    ["explain", "matmul", "--shape", "16x12x8", "--device", "cpu", "--dtype", "float32"],
    ["tune", "matmul", "--shape", "16x12x8", "--warmup", "1", "--repeat", "2", "--min-time-s", "0"],
])
def test_commands_see_the_plugin_kernels(plugin_environment, command):
    assert VENDOR_KERNEL in _kabi(plugin_environment, *command)


def test_list_shows_an_op_that_a_plugin_added(plugin_environment):
    output = _kabi(plugin_environment, "list", "abi_test_good_double")
    assert PLUGIN_KERNEL in output
