"""KABI_BINARY_PATH: directories of device binaries load without code, lazily, on the first dispatch.

Each case runs in a fresh process, so the lazy load happens there: ``import kabi`` alone must not load the
binaries, the first dispatch registers them as device-binary kernels for CUDA (no GPU needed to register), and
``kabi info`` lists each directory with its kernel count or why it was refused. A corrupt directory is refused on
its own and does not stop the next one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

from kabi.backends.triton import SMALL_M_CONFIGS, compile_to_binary, read_manifest  # noqa: E402

_PROBE = r"""
import dataclasses, json, sys
import torch
import kabi
from kabi._plugins.discovery import plugin_records

names = sys.argv[1:]

def registered():
    found = {}
    for name in names:
        try:
            info = kabi.kernel_info("matmul", name)
        except kabi.NotFoundError:
            continue
        found[name] = {"kind": info.kind, "device": info.device, "backend": info.backend}
    return found

report = {"binaries_at_import": [r.path for r in plugin_records() if r.kind == "binaries"]}
report["before_dispatch"] = registered()
kabi.ops.matmul(torch.ones(2, 3), torch.ones(3, 4))
report["after_dispatch"] = registered()
report["records"] = [dataclasses.asdict(r) for r in plugin_records() if r.kind == "binaries"]
report["plugin_names"] = [r.name for r in kabi.plugins()]
print(json.dumps(report))
"""


def _run(arguments: list[str], binary_path: str) -> subprocess.CompletedProcess:
    environment = {**os.environ, "KABI_BINARY_PATH": binary_path, "COLUMNS": "400"}
    environment.pop("KABI_PLUGIN_PATH", None)
    return subprocess.run([sys.executable, *arguments], env=environment, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def directories(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A good directory (one small config for sm_90 and sm_80, bfloat16) and a corrupt one (a manifest without
    its entry line)."""
    root = tmp_path_factory.mktemp("binary_path")
    good = root / "good"
    manifests = [compile_to_binary("small_m", SMALL_M_CONFIGS[0], "bfloat16", arch, good) for arch in (90, 80)]
    corrupt = root / "corrupt"
    corrupt.mkdir()
    source = manifests[1]
    manifest = read_manifest(source)
    (corrupt / manifest.image).write_bytes((good / manifest.image).read_bytes())
    kept = [line for line in source.read_text().splitlines() if not line.startswith("entry =")]
    (corrupt / source.name).write_text("\n".join(kept) + "\n")
    return {"good": good, "corrupt": corrupt, "names": [read_manifest(path).name for path in manifests],
            "missing": root / "missing"}


@pytest.fixture(scope="module")
def report(directories: dict) -> dict:
    binary_path = f"{directories['corrupt']}:{directories['good']}"
    result = _run(["-c", _PROBE, *directories["names"]], binary_path)
    assert result.returncode == 0, f"the probe process failed:\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def _record(report: dict, directory: Path) -> dict:
    matches = [record for record in report["records"] if record["path"] == str(directory.resolve())]
    assert len(matches) == 1, report["records"]
    return matches[0]


def test_import_alone_does_not_load_the_binaries(report: dict) -> None:
    assert report["binaries_at_import"] == []


def test_kernel_info_sees_the_binaries_before_the_first_dispatch(report: dict) -> None:
    assert report["before_dispatch"] == report["after_dispatch"] != {}


def test_first_dispatch_registers_device_binaries_for_cuda(report: dict, directories: dict) -> None:
    assert sorted(report["after_dispatch"]) == sorted(directories["names"])
    for facts in report["after_dispatch"].values():
        assert facts == {"kind": "device_binary", "device": "cuda", "backend": "triton"}
    good = _record(report, directories["good"])
    assert (good["loaded"], good["num_kernels"], good["message"]) == (True, 2, "")


def test_corrupt_directory_is_recorded_with_its_error(report: dict, directories: dict) -> None:
    corrupt = _record(report, directories["corrupt"])
    assert not corrupt["loaded"] and corrupt["num_kernels"] == 0
    assert "missing required key entry" in corrupt["message"]
    assert str(directories["corrupt"].resolve()) in corrupt["message"]


def test_binaries_are_listed_as_their_own_kind(report: dict) -> None:
    assert [record["kind"] for record in report["records"]] == ["binaries", "binaries"]
    assert "kabi-cpu" in report["plugin_names"]


def test_info_lists_each_directory(directories: dict) -> None:
    binary_path = f"{directories['corrupt']}:{directories['good']}:{directories['missing']}"
    result = _run(["-m", "kabi.cli", "info"], binary_path)
    assert result.returncode == 0, result.stderr
    binaries = result.stdout[result.stdout.index("binaries (KABI_BINARY_PATH)"):]
    lines = {name: next(line for line in binaries.splitlines() if str(directories[name].resolve()) in line)
             for name in ("good", "corrupt", "missing")}
    assert "loaded" in lines["good"] and "2 kernels" in lines["good"]
    assert "refused" in lines["corrupt"] and "missing required key entry" in lines["corrupt"]
    assert "refused" in lines["missing"] and "is not a directory" in lines["missing"]


def test_info_without_the_variable_says_so() -> None:
    result = _run(["-m", "kabi.cli", "info"], "")
    assert result.returncode == 0, result.stderr
    assert "binaries: none" in result.stdout
