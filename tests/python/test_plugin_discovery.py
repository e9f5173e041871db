"""Plugins found through entry points (group ``kabi.plugins``) and KABI_PLUGIN_PATH: loaded lazily, once, and a
broken one is recorded with its reason instead of breaking kabi.

A fake installed distribution (``acme_fake-1.0.dist-info`` with an ``entry_points.txt``) and its module live in a
temporary directory put on the child process's path, so discovery sees them exactly as a pip install.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import _cmake

_FAKE_MODULE = '''
import os
import torch

CALLS = []


def register(kabi):
    CALLS.append("register")
    kabi.register_kernel("matmul", torch.matmul, name="fake.python_matmul", backend="fake",
                         dtypes=["float64"], priority=-100)


def library_path():
    CALLS.append("library_path")
    return os.environ["FAKE_PLUGIN_LIBRARY"]


def refused_library_path():
    return os.environ["FAKE_REFUSED_LIBRARY"]


def explode(kabi):
    raise RuntimeError("the fake accelerator caught fire")


def wrong_return():
    return 42


NOT_CALLABLE = "just a string"
'''

_ENTRY_POINTS = """\
[kabi.plugins]
python_plugin = fake_kabi_plugins:register
library_plugin = fake_kabi_plugins:library_path
refused_library = fake_kabi_plugins:refused_library_path
raising = fake_kabi_plugins:explode
wrong_return = fake_kabi_plugins:wrong_return
not_callable = fake_kabi_plugins:NOT_CALLABLE
missing_module = fake_kabi_no_such_module:register
"""

_PROBE = r"""
import dataclasses, json, sys
import torch
import kabi
from kabi._plugins.discovery import discover_plugins, plugin_records

report = {"imported_at_import": "fake_kabi_plugins" in sys.modules}
records = discover_plugins()
discover_plugins()  # a second call must not run the entry points again
import fake_kabi_plugins
report["calls"] = fake_kabi_plugins.CALLS
report["records"] = [dataclasses.asdict(record) for record in plugin_records()]
report["same_records"] = [dataclasses.asdict(r) for r in records] == report["records"]
a, b = torch.randn(6, 5, dtype=torch.float64), torch.randn(5, 4, dtype=torch.float64)
with kabi.use(matmul="fake.python_matmul"):
    report["python_kernel_ok"] = bool(torch.allclose(kabi.ops.matmul(a, b), a @ b))
report["matmul_ok"] = bool(torch.allclose(kabi.ops.matmul(a, b), a @ b))
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    plugins = _cmake.build_abi_test_plugins(tmp_path_factory.mktemp("discovery_plugins"))
    site = tmp_path_factory.mktemp("fake_site")
    (site / "fake_kabi_plugins.py").write_text(_FAKE_MODULE)
    dist_info = site / "acme_fake-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-fake\nVersion: 1.0\n")
    (dist_info / "entry_points.txt").write_text(_ENTRY_POINTS)
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
        "FAKE_PLUGIN_LIBRARY": plugins["good"],
        "FAKE_REFUSED_LIBRARY": plugins["next_major"],
        "KABI_PLUGIN_PATH": plugins["older_minor"],
    }
    result = subprocess.run([sys.executable, "-c", _PROBE], env=environment, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, f"the probe process failed:\n{result.stdout}\n{result.stderr}"
    report = json.loads(result.stdout.strip().splitlines()[-1])
    report["plugins"] = plugins
    return report


def _by_entry_point(report: dict, name: str) -> dict:
    matches = [record for record in report["records"] if record["entry_point"].split(" = ")[0] == name]
    assert len(matches) == 1, f"expected one record from entry point {name}: {report['records']}"
    return matches[0]


def test_entry_points_are_not_loaded_at_import(report: dict) -> None:
    assert not report["imported_at_import"]


def test_discovery_runs_each_entry_point_once(report: dict) -> None:
    assert sorted(report["calls"]) == ["library_path", "register"]
    assert report["same_records"]


def test_python_entry_point_registers_kernels(report: dict) -> None:
    record = _by_entry_point(report, "python_plugin")
    assert (record["kind"], record["loaded"], record["num_kernels"]) == ("python", True, 1)
    assert record["version"] == "1.0"
    assert report["python_kernel_ok"]


def test_library_entry_point_is_loaded_through_the_abi(report: dict) -> None:
    record = _by_entry_point(report, "library_plugin")
    assert (record["kind"], record["loaded"], record["name"]) == ("library", True, "abi-test-good")
    assert record["path"] == report["plugins"]["good"]


def test_refused_library_from_an_entry_point_is_recorded(report: dict) -> None:
    record = _by_entry_point(report, "refused_library")
    assert record["kind"] == "library" and not record["loaded"]
    assert "major" in record["message"]


@pytest.mark.parametrize(
    "name,expected",
    [
        ("raising", "the fake accelerator caught fire"),
        ("wrong_return", "returned int"),
        ("not_callable", "not a callable"),
        ("missing_module", "import failed: ModuleNotFoundError"),
    ],
)
def test_broken_entry_points_are_recorded_with_the_reason(report: dict, name: str, expected: str) -> None:
    record = _by_entry_point(report, name)
    assert not record["loaded"]
    assert expected in record["message"]


def test_plugin_path_libraries_are_loaded(report: dict) -> None:
    records = [record for record in report["records"] if record["path"] == report["plugins"]["older_minor"]]
    assert len(records) == 1 and records[0]["loaded"] and records[0]["entry_point"] == ""


def test_kabi_works_after_broken_plugins(report: dict) -> None:
    assert report["matmul_ok"]


def _write_distribution(site, directory: str, name: str, version: str, entry_points: str | None) -> None:
    info = site / directory
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    if entry_points is not None:
        (info / "entry_points.txt").write_text(entry_points)


def test_entry_point_scan_finds_what_importlib_metadata_finds(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    # discovery reads entry_points.txt files itself (importlib.metadata parses every installed package's); it must
    # find the same entry points with the same distributions: the first of a name on sys.path wins, whatever its
    # spelling, egg-info counts, other groups and comments do not.
    from importlib import metadata

    from kabi._plugins import discovery

    first, second = tmp_path / "first", tmp_path / "second"
    group = discovery.ENTRY_POINT_GROUP
    _write_distribution(first, "Acme.Vendor-2.0.dist-info", "Acme.Vendor", "2.0",
                        f"# [{group}]\n[console_scripts]\nacme = acme:cli\n[{group}]\nacme = acme_kabi:library_path\n")
    _write_distribution(first, "quiet-1.0.dist-info", "quiet", "1.0", "[console_scripts]\nquiet = quiet:main\n")
    _write_distribution(first, "no_entry_points-1.0.dist-info", "no-entry-points", "1.0", None)
    _write_distribution(second, "acme_vendor-1.0.dist-info", "acme-vendor", "1.0",
                        f"[{group}]\nshadowed = acme_old:library_path\n")
    _write_distribution(second, "legacy-0.5.egg-info", "legacy", "0.5", f"[{group}]\nlegacy=legacy_kabi:register\n")
    monkeypatch.setattr(sys, "path", [str(first), str(second), str(tmp_path / "missing")])

    def described(entry_points) -> list[tuple[str, str, str]]:
        return sorted((entry_point.name, entry_point.value, entry_point.dist.version) for entry_point in entry_points)

    expected = described(metadata.entry_points(group=group))
    assert expected == [("acme", "acme_kabi:library_path", "2.0"), ("legacy", "legacy_kabi:register", "0.5")]

    def full_search(**_):
        raise AssertionError("the scan fell back to importlib.metadata's full search")

    monkeypatch.setattr(metadata, "entry_points", full_search)
    assert described(discovery._group_entry_points()) == expected
