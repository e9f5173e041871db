"""Configure and build a CMake project from a test, the way a user of kabi would (Ninja when present, -j2)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
ABI_TEST_PLUGINS = ("good", "next_major", "older_minor", "abi1", "no_init", "failing_init", "crashing_init")

_ABI_TEST_PROJECT = """\
cmake_minimum_required(VERSION 3.24)
project(kabi_abi_test_plugins LANGUAGES C)
add_library(kabi::kabi INTERFACE IMPORTED)
set_target_properties(kabi::kabi PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "{include_dirs}")
include("{plugins_cmake}")
"""


def require_cmake() -> str:
    """The cmake executable, or skip the test when there is none."""
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.skip("cmake is not installed")
    return cmake


def build(source: Path, build_dir: Path, definitions: dict[str, str] | None = None) -> None:
    """Configure ``source`` into ``build_dir`` (Release) and build it; on failure, fail with CMake's output."""
    cmake = require_cmake()
    configure = [cmake, "-S", str(source), "-B", str(build_dir), "-DCMAKE_BUILD_TYPE=Release",
                 f"-DPython_EXECUTABLE={sys.executable}"]
    if shutil.which("ninja"):
        configure += ["-G", "Ninja"]
    configure += [f"-D{name}={value}" for name, value in (definitions or {}).items()]
    for command in (configure, [cmake, "--build", str(build_dir), "-j", "2"]):
        result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "CMAKE_BUILD_PARALLEL_LEVEL": "2"})
        if result.returncode != 0:
            pytest.fail(f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}")


def dlpack_include_dir() -> str:
    try:
        import tvm_ffi
    except ImportError:
        from kabi import config

        return str(config.include_dir())
    return str(Path(tvm_ffi.__file__).parent / "include")


def build_abi_test_plugins(root: Path) -> dict[str, str]:
    """Build the plugins of tests/abi against the source tree's headers in ``root``; name -> library path."""
    include_dirs = f"{REPOSITORY / 'csrc' / 'include'};{dlpack_include_dir()}"
    (root / "CMakeLists.txt").write_text(
        _ABI_TEST_PROJECT.format(include_dirs=include_dirs, plugins_cmake=REPOSITORY / "tests" / "abi" / "plugins.cmake")
    )
    build(root, root / "build")
    paths = {name: root / "build" / f"libkabi_abi_test_{name}.so" for name in ABI_TEST_PLUGINS}
    paths["crashing_init"] = root / "build" / "crashing" / "libkabi_abi_test_crashing_init.so"  # plugins.cmake
    missing = [str(path) for path in paths.values() if not path.is_file()]
    assert not missing, f"the build did not produce {missing}"
    return {name: str(path.resolve()) for name, path in paths.items()}


_SINGLE_PLUGIN_PROJECT = """\
cmake_minimum_required(VERSION 3.24)
project({target} LANGUAGES C)
add_library(kabi::kabi INTERFACE IMPORTED)
set_target_properties(kabi::kabi PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "{include_dirs}")
include("{plugin_cmake}")
kabi_add_plugin({target} SOURCES "{source}")
set_target_properties({target} PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON)
if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options({target} PRIVATE -Wall -Wextra -Werror -pedantic)
endif()
"""


def _build_single_test_plugin(root: Path, source: str, target: str) -> str:
    """Build the plugin tests/abi/``source`` as library ``target`` in ``root``; its library's path."""
    include_dirs = f"{REPOSITORY / 'csrc' / 'include'};{dlpack_include_dir()}"
    (root / "CMakeLists.txt").write_text(_SINGLE_PLUGIN_PROJECT.format(
        target=target, include_dirs=include_dirs, plugin_cmake=REPOSITORY / "cmake" / "kabiPlugin.cmake",
        source=REPOSITORY / "tests" / "abi" / source))
    build(root, root / "build")
    path = root / "build" / f"lib{target}.so"
    assert path.is_file(), f"the build did not produce {path}"
    return str(path.resolve())


def build_workspace_test_plugin(root: Path) -> str:
    """Build tests/abi/workspace_plugin.c (a kernel that declares a workspace) in ``root``; its library's path."""
    return _build_single_test_plugin(root, "workspace_plugin.c", "kabi_abi_test_workspace")


def build_variant_test_plugin(root: Path) -> str:
    """Build tests/abi/variant_plugin.c (a matmul kernel that names its variant per problem) in ``root``; its
    library's path."""
    return _build_single_test_plugin(root, "variant_plugin.c", "kabi_abi_test_variant")
