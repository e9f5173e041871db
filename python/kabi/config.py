"""Where an installed kabi keeps its C/C++ files, for builds that use kabi from C or C++.

The paths are found from the compiled module ``kabi._core``, not from this file: an editable install keeps the
Python sources in the checkout and the compiled files (libkabi, headers, CMake package) in site-packages.

Example::

    $ cmake -S app -B build -Dkabi_DIR=$(python -m kabi.config --cmakedir)

    >>> from kabi import config
    >>> (config.cmake_dir() / "kabiConfig.cmake").is_file()
    True
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import sys
from pathlib import Path

__all__ = ["package_dir", "cmake_dir", "include_dir", "library_dir", "version", "main"]


def package_dir() -> Path:
    """The directory holding kabi's compiled files (``_core``, ``lib/``, ``include/``, ``cmake/``)."""
    spec = importlib.util.find_spec("kabi._core")
    if spec is None or spec.origin is None:
        raise RuntimeError("kabi's compiled module kabi._core is not installed; reinstall kabi (pip install kabi)")
    return Path(spec.origin).resolve().parent


def _existing(path: Path, what: str) -> Path:
    if not path.exists():
        raise RuntimeError(f"kabi's {what} is missing: expected {path}; the installation is incomplete")
    return path


def cmake_dir() -> Path:
    """The directory holding ``kabiConfig.cmake``: pass it to CMake as ``-Dkabi_DIR=...``."""
    return _existing(package_dir() / "cmake", "CMake package")


def include_dir() -> Path:
    """The include directory holding ``kabi/kabi.h``, ``kabi/kabi.hpp`` and ``dlpack/dlpack.h``."""
    return _existing(package_dir() / "include", "include directory")


def library_dir() -> Path:
    """The directory holding ``libkabi.so`` and the built-in plugins."""
    return _existing(package_dir() / "lib", "library directory")


def version() -> str:
    """kabi's release version, e.g. ``"0.1.0"``."""
    return importlib.metadata.version("kabi")


def main(argv: list[str] | None = None) -> int:
    """``python -m kabi.config --cmakedir``: print one of kabi's install locations."""
    parser = argparse.ArgumentParser(prog="python -m kabi.config", description=__doc__.split("\n\n")[0])
    choice = parser.add_mutually_exclusive_group(required=True)
    choice.add_argument("--cmakedir", action="store_const", const=cmake_dir, dest="query",
                        help="the directory of kabiConfig.cmake (for -Dkabi_DIR)")
    choice.add_argument("--includedir", action="store_const", const=include_dir, dest="query",
                        help="the include directory (kabi/kabi.h, kabi/kabi.hpp, dlpack/dlpack.h)")
    choice.add_argument("--libdir", action="store_const", const=library_dir, dest="query",
                        help="the directory of libkabi and the built-in plugins")
    choice.add_argument("--version", action="store_const", const=version, dest="query", help="kabi's version")
    arguments = parser.parse_args(argv)
    try:
        print(arguments.query())
    except RuntimeError as error:
        print(f"kabi.config: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
