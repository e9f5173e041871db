"""The C++ example (examples/cpp_app) on a CUDA GPU: it launches Triton kernels compiled to device binaries through
libkabi, with no Python in its process (binaries compiled here, and those kabi's registration caches as its CUDA
candidates), and a CUDA C++ kernel registered from Python with kabi.cuda.register_source; each result matches the
app's host reference.

Built against the kabi this interpreter imports (an editable install will do), unlike test_installed_package.py,
which builds a wheel first: on the GPU machine that would cost minutes of the GPU tests' time.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import _cmake
import kabi
from kabi import config

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not any(device.device_type == "cuda" for device in kabi.devices()),
                       reason="needs a CUDA GPU that libkabi sees"),
]


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Path:
    build_dir = tmp_path_factory.mktemp("cpp_app")
    _cmake.build(_cmake.REPOSITORY / "examples" / "cpp_app", build_dir, {"kabi_DIR": str(config.cmake_dir())})
    return build_dir / "kabi_matmul_app"


@pytest.fixture(scope="module")
def binaries(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One config per dtype, compiled for this GPU (run_gpu_example.sh compiles them all): the persistent TMA kernel
    on sm_90 (208 KiB of shared memory, past the 48 KiB default, and a scratch buffer: both set up by libkabi), the
    tiled one elsewhere."""
    pytest.importorskip("triton")
    from kabi.backends.triton import HOPPER_CONFIGS, TILED_CONFIGS, compile_to_binary

    gpu = kabi.device_info("cuda", 0)
    family, matmul_config = ("persistent_tma", HOPPER_CONFIGS[0]) if gpu.arch == 90 else ("tiled", TILED_CONFIGS[0])
    directory = tmp_path_factory.mktemp("binaries")
    for dtype in ("float16", "bfloat16"):
        compile_to_binary(family, matmul_config, dtype, gpu.arch, directory, multiprocessors=gpu.compute_units)
    return directory


# Partial tiles in every dimension (rows still 16-byte multiples, as TMA needs), and a decode shape.
@pytest.mark.parametrize("dtype, shape", [("bfloat16", "200x264x136"), ("float16", "16x4096x4096")])
def test_cpp_app_launches_a_triton_binary_on_cuda(app: Path, binaries: Path, dtype: str, shape: str) -> None:
    result = subprocess.run([str(app), "--device", "cuda", "--dtype", dtype, "--shape", shape, "--iterations", "50",
                             "--binaries", str(binaries), "--force", "triton", "--allow-unverified"],
                            capture_output=True, text=True, timeout=300)
    output = result.stdout
    assert result.returncode == 0, output + result.stderr
    assert "pick: triton.matmul." in output and f".{dtype}.sm" in output, output
    assert "kind: device binary, backend triton" in output
    assert f"over {shape} {dtype}" in output and output.rstrip().endswith("): ok"), output


def _run_app(app: Path, directory: Path, dtype: str, shape: str, force: str) -> str:
    result = subprocess.run([str(app), "--device", "cuda", "--dtype", dtype, "--shape", shape, "--iterations", "20",
                             "--binaries", str(directory), "--force", force, "--allow-unverified"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.rstrip().endswith("): ok"), result.stdout
    return result.stdout


def test_cpp_app_launches_the_triton_binaries_kabi_caches(app: Path) -> None:
    pytest.importorskip("triton")
    from kabi.backends.triton import TILED_CONFIGS, _native

    gpu = kabi.device_info("cuda", 0)
    # This test's own cache directory: the config's binaries (one per layout variant) are compiled into it, where
    # registration would put them.
    variants = _native.binary_variants(gpu.arch, ["tiled"], ["bfloat16"], [TILED_CONFIGS[0].tag])
    directory = _native.ensure_binaries(variants, gpu.arch, gpu.compute_units)
    assert len(list(directory.glob("*.kabi-manifest"))) == len(_native.NATIVE_LAYOUTS)
    output = _run_app(app, directory, "bfloat16", "200x264x136", "triton")
    assert "kind: device binary, backend triton" in output, output


def test_cpp_app_launches_a_kernel_registered_from_cuda_source(app: Path) -> None:
    pytest.importorskip("cuda.bindings.nvrtc", reason="kabi.cuda needs cuda-bindings and nvidia-cuda-nvrtc")
    from _cuda_sources import tiled_matmul_declaration

    (kernel,) = kabi.cuda.register_source("matmul", **tiled_matmul_declaration("float32"), name="test.cpp_app.tiled")
    try:
        output = _run_app(app, kernel.directory, "float32", "77x45x33", kernel.name)
    finally:
        kabi.unregister_kernel("matmul", kernel.name)
    assert f"pick: {kernel.name}" in output and "kind: device binary, backend cuda" in output, output
