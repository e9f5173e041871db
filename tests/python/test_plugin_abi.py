"""The plugin ABI's version and failure handling, with real plugin libraries built from tests/abi.

Each plugin is loaded through the Python binding in one child process (the loads change process-wide state), which
reports what happened as JSON: accepted plugins work, refused ones name the plugin and the reason, nothing a
refused plugin registered stays, and kabi keeps working afterwards.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import _cmake

_PROBE = r"""
import json, sys
import torch
import kabi
from kabi import _core
from kabi._base.tensors import descriptor

paths = json.loads(sys.argv[1])
report = {"loads": {}, "reloads": {}}
for variant, path in paths.items():
    for key in ("loads", "reloads"):  # a second load of the same path repeats the first outcome
        try:
            _core.plugin_load(path)
            report[key][variant] = None
        except Exception as error:
            report[key][variant] = {"type": type(error).__name__, "message": str(error)}

report["records"] = _core.plugin_records()
report["ops"] = list(_core.op_list())
report["kernels"] = {kernel["name"]: kernel for kernel in _core.kernel_list()}
report["abi_version"] = _core.abi_version()

report["doubled"] = {}
for prefix in ("abi_test_good", "abi_test_older_minor"):
    x = torch.randn(37)
    out = torch.full_like(x, float("nan"))
    _core.launch(f"{prefix}_double", f"{prefix}.double", [descriptor(x)], [descriptor(out)])
    report["doubled"][prefix] = torch.equal(out, 2 * x)

a = torch.randn(33, 17, dtype=torch.float64)
b = torch.randn(17, 9, dtype=torch.float64)
report["matmul_after"] = bool(torch.allclose(kabi.ops.matmul(a, b), a @ b, rtol=1e-12, atol=1e-12))
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def plugin_paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Every ABI test plugin that a process survives loading, built against the source tree's headers; name ->
    library path. (crashing_init kills its loader: test_plugin_check.py loads it in a child.)"""
    built = _cmake.build_abi_test_plugins(tmp_path_factory.mktemp("abi_plugins"))
    return {name: path for name, path in built.items() if name != "crashing_init"}


@pytest.fixture(scope="module")
def report(plugin_paths: dict[str, str]) -> dict:
    result = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(plugin_paths)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, f"the probe process failed:\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def _record(report: dict, path: str) -> dict:
    matches = [record for record in report["records"] if record["path"] == path]
    assert len(matches) == 1, f"expected one record for {path}, got {report['records']}"
    return matches[0]


def test_current_plugin_is_accepted_and_its_kernel_runs(report: dict, plugin_paths: dict[str, str]) -> None:
    assert report["loads"]["good"] is None
    record = _record(report, plugin_paths["good"])
    assert record["loaded"] and record["message"] == ""
    assert (record["name"], record["version"], record["num_kernels"]) == ("abi-test-good", "1.2.3", 1)
    assert record["abi_version"] == report["abi_version"]
    assert report["kernels"]["abi_test_good.double"]["plugin"] == "abi-test-good"
    assert report["doubled"]["abi_test_good"]


def test_next_major_is_refused_before_init(report: dict, plugin_paths: dict[str, str]) -> None:
    error = report["loads"]["next_major"]
    assert error is not None and error["type"] == "AbiMismatchError"
    assert plugin_paths["next_major"] in error["message"]
    assert "3.0" in error["message"] and "major" in error["message"]
    record = _record(report, plugin_paths["next_major"])
    assert not record["loaded"] and record["message"] == error["message"]
    assert record["abi_version"] == 3 << 16
    assert "abi_test_next_major_double" not in report["ops"], "init ran although the major differs"


def test_abi1_plugin_is_refused_with_the_rebuild_message(report: dict, plugin_paths: dict[str, str]) -> None:
    error = report["loads"]["abi1"]
    assert error is not None and error["type"] == "AbiMismatchError"
    assert error["message"] == (
        f"plugin {plugin_paths['abi1']} was built for kabi ABI 1.2; this kabi implements ABI "
        f"{report['abi_version'] >> 16}.{report['abi_version'] & 0xFFFF} (major versions must match): rebuild the plugin "
        "against this kabi's headers"
    )
    record = _record(report, plugin_paths["abi1"])
    assert not record["loaded"] and record["abi_version"] == (1 << 16) | 2
    assert "abi_test_abi1_double" not in report["ops"], "init ran although the plugin was built for ABI 1.x"


def test_older_minor_struct_sizes_are_accepted(report: dict, plugin_paths: dict[str, str]) -> None:
    assert report["loads"]["older_minor"] is None
    assert _record(report, plugin_paths["older_minor"])["loaded"]
    kernel = report["kernels"]["abi_test_older_minor.double"]
    # The fingerprint field lies beyond the plugin's struct_size: the host derived one instead of reading past it.
    assert kernel["fingerprint"] != ""
    assert report["doubled"]["abi_test_older_minor"]


def test_missing_init_symbol_is_refused(report: dict, plugin_paths: dict[str, str]) -> None:
    error = report["loads"]["no_init"]
    assert error is not None and error["type"] == "NotFoundError"
    assert plugin_paths["no_init"] in error["message"] and "kabi_plugin_init" in error["message"]
    assert not _record(report, plugin_paths["no_init"])["loaded"]


def test_failing_init_is_refused_and_its_kernel_removed(report: dict, plugin_paths: dict[str, str]) -> None:
    error = report["loads"]["failing_init"]
    assert error is not None
    assert plugin_paths["failing_init"] in error["message"]
    assert "the accelerator did not answer" in error["message"]
    record = _record(report, plugin_paths["failing_init"])
    assert not record["loaded"] and record["num_kernels"] == 0
    assert "abi_test_failing_init.double" not in report["kernels"]


def test_reloading_repeats_the_outcome(report: dict) -> None:
    assert report["reloads"] == report["loads"]


def test_kabi_keeps_working_after_refusals(report: dict) -> None:
    assert report["matmul_after"]
