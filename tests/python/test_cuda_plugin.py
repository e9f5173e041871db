"""The built-in CUDA plugin (kabi-cuda, libkabi_cuda.so) on a machine without a GPU: it is built where nvcc and
CUTLASS's headers are found, its sm_90a code really uses wgmma and TMA, it loads and registers nothing when there is
no CUDA device, and a build with CUDA disabled still configures and says what it lacks. Its kernels are checked on a
GPU by test_cuda_plugin_gpu.py."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kabi import _core

import _cmake
from _c_caller import SKIPPED, compile_c_caller

PLUGIN_NAME = "kabi-cuda"


def _nvcc() -> str | None:
    return shutil.which("nvcc") or next(
        (path for path in ("/usr/local/cuda/bin/nvcc",) if os.access(path, os.X_OK)), None)


def _cuobjdump() -> str | None:
    found = shutil.which("cuobjdump") or next(
        (path for path in ("/usr/local/cuda/bin/cuobjdump",) if os.access(path, os.X_OK)), None)
    if found is None and importlib.util.find_spec("triton") is not None:
        # The Triton wheel ships one (without importing triton, which takes seconds).
        triton_dir = Path(importlib.util.find_spec("triton").origin).parent
        bundled = triton_dir / "backends" / "nvidia" / "bin" / "cuobjdump"
        found = str(bundled) if bundled.is_file() else None
    return found


def _cuda_plugin_expected() -> bool:
    """The build's conditions for the plugin (cmake/kabiCuda.cmake): a CUDA compiler and CUTLASS's headers."""
    return _nvcc() is not None and importlib.util.find_spec("cutlass_library") is not None


@pytest.fixture(scope="module")
def plugin_record() -> dict:
    _core.plugin_load_builtin()
    records = [record for record in _core.plugin_records() if record["name"] == PLUGIN_NAME]
    if not records:
        if _cuda_plugin_expected():
            pytest.fail("nvcc and nvidia-cutlass are present, but libkabi_cuda.so was not built beside libkabi")
        pytest.skip("this build has no CUDA plugin: no nvcc or no nvidia-cutlass at build time")
    return records[0]


def test_plugin_is_built_and_loads(plugin_record: dict) -> None:
    assert plugin_record["loaded"], plugin_record["message"]
    assert plugin_record["message"] == ""
    assert Path(plugin_record["path"]).name == "libkabi_cuda.so"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a CUDA device")
def test_without_a_device_it_registers_nothing(plugin_record: dict) -> None:
    assert plugin_record["num_kernels"] == 0
    assert not [kernel for kernel in _core.kernel_list() if kernel["plugin"] == PLUGIN_NAME]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a CUDA device")
def test_from_c_without_a_device_it_loads_and_registers_nothing(plugin_record: dict, tmp_path: Path) -> None:
    program = compile_c_caller(tmp_path)
    result = subprocess.run([str(program), plugin_record["path"]], capture_output=True, text=True, timeout=120)
    assert result.returncode == SKIPPED, result.stdout + result.stderr
    assert "the plugin loaded and registered nothing" in result.stdout


def test_it_links_no_cuda_library_a_cpu_machine_lacks(plugin_record: dict) -> None:
    # The CUDA runtime is static and cuBLASLt is opened at run time; libcuda is the driver's, opened by the runtime.
    needed = subprocess.run(["readelf", "-d", plugin_record["path"]], capture_output=True, text=True, check=True)
    libraries = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", needed.stdout)
    assert not [name for name in libraries if re.match(r"lib(cuda|cudart|cublas|cublasLt|kabi)\b", name)], libraries


@pytest.fixture(scope="module")
def sass(plugin_record: dict) -> dict[str, str]:
    """The plugin's SASS per architecture, from cuobjdump."""
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump is not installed (CUDA toolkit or the triton wheel)")
    result = subprocess.run([tool, "--dump-sass", plugin_record["path"]], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    per_arch: dict[str, list[str]] = {}
    arch = None
    for line in result.stdout.splitlines():
        match = re.search(r"arch = (sm_\w+)", line)
        if match:
            arch = match.group(1)
        elif arch is not None:
            per_arch.setdefault(arch, []).append(line)
    return {name: "\n".join(lines) for name, lines in per_arch.items()}


def test_sm90a_code_uses_wgmma_and_tma(sass: dict[str, str]) -> None:
    assert "sm_90a" in sass, f"no sm_90a code in the plugin; architectures: {sorted(sass)}"
    code = sass["sm_90a"]
    assert "HGMMA" in code, "the sm_90a kernels issue no warpgroup MMA (HGMMA)"
    assert "UTMALDG" in code, "the sm_90a kernels issue no TMA loads (UTMALDG)"


def test_sm80_code_uses_mma_sync(sass: dict[str, str]) -> None:
    assert "sm_80" in sass, f"no sm_80 code in the plugin; architectures: {sorted(sass)}"
    assert "HMMA" in sass["sm_80"] and "LDGSTS" in sass["sm_80"], "expected mma.sync fed by cp.async"


def test_a_build_with_cuda_disabled_says_what_it_lacks(tmp_path: Path) -> None:
    cmake = _cmake.require_cmake()
    result = subprocess.run(
        [cmake, "-S", str(_cmake.REPOSITORY), "-B", str(tmp_path / "build"), "-DKABI_ENABLE_CUDA=OFF",
         "-DKABI_BUILD_PYTHON=OFF", "-DKABI_BUILD_TESTS=OFF", f"-DPython_EXECUTABLE={sys.executable}"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "the CUDA plugin (CUTLASS and cuBLASLt kernels) is not built" in result.stdout
    targets = subprocess.run([cmake, "--build", str(tmp_path / "build"), "--target", "help"], capture_output=True,
                             text=True, timeout=120)
    assert "kabi_cpu" in targets.stdout and "kabi_cuda" not in targets.stdout
