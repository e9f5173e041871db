"""kabi as its users get it: installed from a wheel, found by CMake through ``python -m kabi.config --cmakedir``, with
the two out-of-tree examples (a C++ application and a vendor plugin) built against it and run.

Where this environment can build kabi without build isolation (scikit-build-core, pybind11 and apache-tvm-ffi
importable), a wheel is built into a temporary directory and installed into a fresh virtual environment that
borrows this one's packages (torch, numpy, ...) but not its kabi. Otherwise the kabi installed here is used.
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib.util
import json
import os
import re
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

import _cmake

pytestmark = pytest.mark.slow

REPOSITORY = _cmake.REPOSITORY
EXAMPLES = REPOSITORY / "examples"
# Kept between runs (build/ is ignored by git) so that only the first wheel build compiles everything.
WHEEL_BUILD_DIR = REPOSITORY / "build" / "test-installed-package"


@dataclasses.dataclass(frozen=True)
class Installation:
    python: str  # an interpreter whose `import kabi` is the installation under test
    fresh: bool  # True: a wheel installed into a new virtual environment
    root: Path  # scratch space of this test module
    cmake_dir: Path
    environment: dict[str, str]


def _run(command: list, environment: dict[str, str] | None = None, expect_success: bool = True,
         timeout: int = 600) -> subprocess.CompletedProcess:
    result = subprocess.run([str(part) for part in command], capture_output=True, text=True, env=environment,
                            timeout=timeout)
    if expect_success and result.returncode != 0:
        pytest.fail(f"{' '.join(map(str, command))} exited with {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def _can_build_without_isolation() -> bool:
    return all(importlib.util.find_spec(name) for name in ("scikit_build_core", "pybind11", "tvm_ffi"))


def _fresh_installation(root: Path) -> str:
    """Build kabi's wheel, install it into a new venv; return that venv's interpreter."""
    wheels = root / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q", REPOSITORY,
          "-w", wheels, "-C", f"build-dir={WHEEL_BUILD_DIR}",
          # The CUDA plugin's kernels take minutes to compile and do not change what this test checks.
          "-C", "cmake.define.KABI_ENABLE_CUDA=OFF"])
    (wheel,) = wheels.glob("kabi-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv])
    python = venv / "bin" / "python"
    venv_site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).stdout.strip())
    # This environment may itself be a venv: let the new one import its packages too (after its own).
    (venv_site / "_kabi_test_parent_environment.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", "--no-index", wheel])
    return str(python)


@pytest.fixture(scope="module")
def installation(tmp_path_factory: pytest.TempPathFactory) -> Installation:
    root = tmp_path_factory.mktemp("installed_package")
    environment = {name: value for name, value in os.environ.items() if not name.startswith("KABI_")}
    environment["KABI_CACHE_DIR"] = str(root / "tuning-cache")
    fresh = _can_build_without_isolation()
    python = _fresh_installation(root) if fresh else sys.executable
    cmake_dir = Path(_run([python, "-m", "kabi.config", "--cmakedir"], environment).stdout.strip())
    return Installation(python, fresh, root, cmake_dir, environment)


@pytest.fixture(scope="module")
def app(installation: Installation) -> Path:
    build_dir = installation.root / "cpp_app"
    _cmake.build(EXAMPLES / "cpp_app", build_dir, {"kabi_DIR": str(installation.cmake_dir)})
    return build_dir / "kabi_matmul_app"


@pytest.fixture(scope="module")
def vendor_plugin(installation: Installation) -> Path:
    build_dir = installation.root / "vendor_plugin"
    _cmake.build(EXAMPLES / "vendor_plugin", build_dir, {"kabi_DIR": str(installation.cmake_dir)})
    return build_dir / "libacme_kabi.so"


def _python(installation: Installation, script: str, **variables: str) -> dict:
    """Run a script with the installation's interpreter; it prints one JSON line last."""
    result = _run([installation.python, "-c", script], {**installation.environment, **variables})
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_config_locates_the_installed_files(installation: Installation) -> None:
    def ask(flag: str) -> str:
        return _run([installation.python, "-m", "kabi.config", flag], installation.environment).stdout.strip()

    assert (installation.cmake_dir / "kabiConfig.cmake").is_file()
    assert (installation.cmake_dir / "kabiConfigVersion.cmake").is_file()
    include = Path(ask("--includedir"))
    for header in ("kabi/kabi.h", "kabi/kabi.hpp", "dlpack/dlpack.h"):
        assert (include / header).is_file(), header
    library = Path(ask("--libdir"))
    assert (library / "libkabi.so").is_file() and (library / "libkabi_cpu.so").is_file()
    assert ask("--version") == _python(installation, "import json, kabi; print(json.dumps(kabi.__version__))")
    if installation.fresh:
        assert installation.cmake_dir.is_relative_to(installation.root / "venv"), "found another kabi"


def test_cpp_app_runs_on_the_builtin_plugin(installation: Installation, app: Path) -> None:
    refused = _run([app, "--shape", "33x17x9", "--iterations", "20"], installation.environment, expect_success=False)
    assert refused.returncode == 1 and "no eligible kernel has passed the correctness gate" in refused.stderr
    assert "kabi verify matmul" in refused.stderr
    output = _run([app, "--shape", "33x17x9", "--iterations", "20", "--allow-unverified"],
                  installation.environment).stdout
    assert "plugin kabi-cpu" in output and ": loaded" in output
    assert "pick: cpu.openblas.gemm" in output and "unverified (allowed by --allow-unverified)" in output
    assert "): ok" in output


def test_cpp_app_loads_the_vendor_plugin(installation: Installation, app: Path, vendor_plugin: Path) -> None:
    output = _run([app, "--shape", "16x16x16", "--iterations", "20", "--plugin", vendor_plugin, "--force", "acme",
                   "--allow-unverified"], installation.environment).stdout
    assert "plugin acme-small-gemm 1.0.0: loaded, 1 kernel(s)" in output
    assert "pick: acme.avx2.small_gemm [forced]" in output
    assert "): ok" in output
    # Beyond 64 the vendor kernel declines, so forcing it is a clear error rather than a wrong answer.
    refused = _run([app, "--shape", "100x16x16", "--plugin", vendor_plugin, "--force", "acme", "--allow-unverified"],
                   installation.environment, expect_success=False)
    assert refused.returncode == 1 and "exceeds 64" in refused.stderr



# The app's documented status for "skipped: no CUDA driver or device" (examples/cpp_app/README.md).
_SKIPPED = 77


def _cuda_driver_loads() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def test_cpp_app_on_cuda_without_a_driver_says_so_in_one_line(installation: Installation, app: Path) -> None:
    if _cuda_driver_loads():
        pytest.skip("this machine has a CUDA driver")
    result = _run([app, "--device", "cuda"], installation.environment, expect_success=False)
    assert result.returncode == _SKIPPED, result.stdout + result.stderr
    assert result.stdout.startswith("no CUDA driver: libcuda.so.1") and result.stdout.count("\n") == 1, result.stdout
    assert result.stderr == ""


def test_cpp_app_on_cuda_without_a_device_says_so_in_one_line(installation: Installation, app: Path,
                                                              tmp_path: Path) -> None:
    """A driver whose cuInit answers CUDA_ERROR_NO_DEVICE (100), as a real one does on a machine without GPUs."""
    compiler = shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler to build a stand-in libcuda.so.1")
    # The stand-in exports every entry point the app resolves (read from its source), so that only cuInit decides.
    entry_points = re.findall(r'\{"(cu\w+)"', (EXAMPLES / "cpp_app" / "cuda_device.cpp").read_text())
    assert "cuInit" in entry_points
    source = tmp_path / "stand_in_cuda.c"
    source.write_text("int cuInit(unsigned flags) { (void)flags; return 100; }\n" + "".join(
        f"int {name}(void) {{ return 999; }}\n" for name in entry_points if name != "cuInit"))
    _run([compiler, "-shared", "-fPIC", "-o", tmp_path / "libcuda.so.1", source])
    environment = {**installation.environment, "LD_LIBRARY_PATH": str(tmp_path)}
    result = _run([app, "--device", "cuda"], environment, expect_success=False)
    assert result.returncode == _SKIPPED, result.stdout + result.stderr
    assert result.stdout == "no CUDA device\n"


_COMPILE_TRITON_BINARIES = r"""
import json, os
from kabi.backends.triton import compile_all
paths = compile_all(90, os.environ["BINARIES"], dtypes=["bfloat16"], families=["small_m"])
print(json.dumps({"manifests": len(paths)}))
"""


def test_cpp_app_loads_triton_binaries_without_a_gpu(installation: Installation, app: Path, tmp_path: Path) -> None:
    """compile_all's directory is what --binaries takes; reading manifests needs no GPU (the images go to the driver
    at the first launch), and the CUDA kernels are no candidates for a CPU problem."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("compiling Triton kernels needs triton")
    binaries = tmp_path / "binaries"
    compiled = _python(installation, _COMPILE_TRITON_BINARIES, BINARIES=str(binaries))
    assert compiled["manifests"] == 12  # small_m's configs, the split-K ones included
    output = _run([app, "--shape", "16x24x40", "--iterations", "5", "--binaries", binaries, "--allow-unverified"],
                  installation.environment).stdout
    assert f"binaries {binaries}: 12 kernel(s) registered" in output
    assert "pick: cpu.openblas.gemm" in output and "candidate triton." not in output
    assert "): ok" in output

_VENDOR_FROM_PYTHON = r"""
import json, torch, kabi
a, b = torch.randn(16, 24), torch.randn(24, 9)
with kabi.use(matmul="acme"):
    out = kabi.ops.matmul(a, b)
error = ((out.double() - a.double() @ b.double()).abs().max() / (a.double() @ b.double()).abs().max()).item()
records = [r for r in kabi.plugins() if r.name == "acme-small-gemm"]
print(json.dumps({"error": error, "loaded": bool(records) and records[0].loaded}))
"""


def test_python_loads_the_vendor_plugin_from_the_plugin_path(installation: Installation, vendor_plugin: Path) -> None:
    report = _python(installation, _VENDOR_FROM_PYTHON, KABI_PLUGIN_PATH=str(vendor_plugin))
    assert report["loaded"]
    assert report["error"] <= 1e-4


_TUNE_IN_PYTHON = r"""
import json, torch, kabi
a, b = torch.randn(16, 16), torch.randn(16, 16)
out = kabi.ops.matmul(a, b)  # the first call of a problem tunes it (KABI_TUNE=first-call)
print(json.dumps({"ok": bool(torch.allclose(out, a @ b, atol=1e-5))}))
"""


def test_cpp_app_uses_the_decision_python_tuned(installation: Installation, app: Path, vendor_plugin: Path) -> None:
    environment = {**installation.environment, "KABI_CACHE_DIR": str(installation.root / "shared-cache")}
    # Every measurement persisted, however loaded this machine is: the C++ app must find them in the file.
    tuned = _python(installation, _TUNE_IN_PYTHON, KABI_PLUGIN_PATH=str(vendor_plugin), KABI_TUNE="first-call",
            KABI_CACHE_DIR=environment["KABI_CACHE_DIR"], KABI_TUNE_MAX_SPREAD="inf")
    assert tuned["ok"]
    output = _run([app, "--shape", "16x16x16", "--iterations", "20", "--plugin", vendor_plugin], environment).stdout
    # The app has two native kernels for this problem; Python measured both (and torch, which C++ cannot run), in
    # full or cut by the screen: tuned either way.
    assert "[tuned] tuned: fastest of " in output, output
    assert "): ok" in output


_ENTRY_POINT_PLUGIN = r"""
import json, torch, kabi
from kabi._plugins.discovery import discover_plugins
records = [r for r in discover_plugins() if r.entry_point.startswith("acme =")]
a, b = torch.randn(7, 33), torch.randn(33, 20)
with kabi.use(matmul="acme.avx2.small_gemm"):
    out = kabi.ops.matmul(a, b)
error = ((out.double() - a.double() @ b.double()).abs().max() / (a.double() @ b.double()).abs().max()).item()
print(json.dumps({"records": [r.name for r in records if r.loaded], "error": error}))
"""


def test_vendor_package_is_found_through_its_entry_point(installation: Installation) -> None:
    if not installation.fresh:
        pytest.skip("installing the vendor package would change this environment; needs a fresh installation")
    wheels = installation.root / "vendor-wheels"
    # Built by scikit-build-core; its CMakeLists asks the installation's `python -m kabi.config` for kabi's package.
    _run([sys.executable, "-m", "pip", "--python", installation.python, "wheel", "-q", "--no-build-isolation",
          "--no-deps", EXAMPLES / "vendor_plugin" / "python", "-w", wheels], installation.environment)
    (wheel,) = wheels.glob("acme_kabi-*.whl")
    _run([sys.executable, "-m", "pip", "--python", installation.python, "install", "-q", "--no-deps",
          "--no-index", wheel], installation.environment)
    report = _python(installation, _ENTRY_POINT_PLUGIN)
    assert report["records"] == ["acme-small-gemm"]
    assert report["error"] <= 1e-4
