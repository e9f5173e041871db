"""CUDA C++ to cubin with NVRTC (the ``cuda-bindings`` package and the ``nvidia-cuda-nvrtc`` library), and an on-disk
cache of the images, keyed by everything that decides the bytes: NVRTC's version, the target arch, the options, the
entry and the source.

No GPU and no driver are needed: NVRTC compiles for a named arch (``sm_90``, ``sm_90a``) on any machine.

Example::

    image = compile_source(SOURCE, "matmul_tiled", "sm_90", options=("-lineinfo",))
    image.cubin[:4], image.entry, image.from_cache      # b'\\x7fELF', 'matmul_tiled', False
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from ..._base.errors import InvalidArgumentError, UnavailableError

# Where cuda_fp16.h, cuda_bf16.h and friends live, searched in this order; NVRTC ships none of them.
_CUDA_ROOT_VARIABLES = ("CUDA_HOME", "CUDA_PATH")
_DEFAULT_CUDA_ROOT = "/usr/local/cuda"
_IMAGE_CACHE_FORMAT = "1"


@dataclass(frozen=True)
class CompiledImage:
    """A cubin NVRTC built: its bytes, the entry's lowered (mangled) name, the PTX types of the entry's parameters
    (``u64``, ``u32``, ...), the compile log (warnings; empty after a cache hit), and whether it came from the disk
    cache."""

    cubin: bytes
    entry: str
    param_types: tuple[str, ...]
    log: str
    from_cache: bool


def _bindings():
    try:
        from cuda.bindings import nvrtc
    except ImportError as error:
        raise UnavailableError("kabi.cuda compiles with NVRTC: install cuda-bindings (cuda-python) and "
                               f"nvidia-cuda-nvrtc (pip install 'kabi[cuda]'); {error}") from error
    return nvrtc


def _check(nvrtc, result, what: str) -> None:
    if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, message = nvrtc.nvrtcGetErrorString(result)
        raise UnavailableError(f"NVRTC {what} failed: {message.decode(errors='replace')}")


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> str:
    """NVRTC's version, ``"13.0"``; UnavailableError when cuda-bindings or the NVRTC library is missing."""
    nvrtc = _bindings()
    try:
        result, major, minor = nvrtc.nvrtcVersion()
    except Exception as error:  # noqa: BLE001 - the bindings raise their own loader errors for a missing library
        raise UnavailableError(f"kabi.cuda compiles with NVRTC, whose library could not be loaded (pip install "
                               f"nvidia-cuda-nvrtc): {type(error).__name__}: {error}") from error
    _check(nvrtc, result, "version query")
    return f"{major}.{minor}"


@functools.lru_cache(maxsize=1)
def default_include_options() -> tuple[str, ...]:
    """``-I`` for the CUDA toolkit's headers (CUDA_HOME, CUDA_PATH, else /usr/local/cuda), when they exist."""
    roots = [os.environ[name] for name in _CUDA_ROOT_VARIABLES if os.environ.get(name)] + [_DEFAULT_CUDA_ROOT]
    for root in roots:
        include = Path(root) / "include"
        if (include / "cuda_fp16.h").is_file():
            return (f"-I{include}",)
    return ()


def _compile(source: str, entry: str, arch_name: str, options: tuple[str, ...]) -> CompiledImage:
    """The image, or InvalidArgumentError carrying NVRTC's log."""
    nvrtc = _bindings()
    nvrtc_version()
    result, program = nvrtc.nvrtcCreateProgram(source.encode(), f"{entry}.cu".encode(), 0, [], [])
    _check(nvrtc, result, "program creation")
    try:
        (result,) = nvrtc.nvrtcAddNameExpression(program, entry.encode())
        _check(nvrtc, result, f"name expression {entry!r}")
        arguments = [f"--gpu-architecture={arch_name}", *options]
        (compile_result,) = nvrtc.nvrtcCompileProgram(program, len(arguments), [a.encode() for a in arguments])
        log = _text(nvrtc, program, nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog, "log")
        if compile_result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise InvalidArgumentError(f"source: NVRTC could not compile it for {arch_name} "
                                       f"(options {' '.join(arguments)}):\n{log}")
        result, lowered = nvrtc.nvrtcGetLoweredName(program, entry.encode())
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise InvalidArgumentError(f"entry: the source defines no __global__ function {entry!r}\n{log}")
        cubin = _bytes(nvrtc, program, nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN, "cubin")
        ptx = _text(nvrtc, program, nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX, "PTX")
        return CompiledImage(cubin, lowered.decode(), tuple(_entry_param_types(ptx, lowered.decode())), log, False)
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def _bytes(nvrtc, program, size_query, query, what: str) -> bytes:
    result, size = size_query(program)
    _check(nvrtc, result, f"{what} size query")
    buffer = b" " * size
    (result,) = query(program, buffer)
    _check(nvrtc, result, f"{what} query")
    return buffer


def _text(nvrtc, program, size_query, query, what: str) -> str:
    return _bytes(nvrtc, program, size_query, query, what).rstrip(b"\0 ").decode(errors="replace")


def _entry_param_types(ptx: str, lowered_entry: str) -> list[str]:
    """The PTX types of ``lowered_entry``'s parameters (a source may define several kernels)."""
    from ..triton._manifest import ptx_entry_params

    start = ptx.find(f".entry {lowered_entry}(")
    if start < 0:
        raise InvalidArgumentError(f"entry: {lowered_entry!r} is not a kernel entry of the compiled PTX")
    return ptx_entry_params(ptx[start:])


def image_key(source: str, entry: str, arch_name: str, options: tuple[str, ...]) -> str:
    """The cache key of one image: a hash of NVRTC's version, the arch, the options, the entry and the source."""
    digest = hashlib.sha256()
    for part in (_IMAGE_CACHE_FORMAT, nvrtc_version(), arch_name, "\0".join(options), entry, source):
        digest.update(part.encode())
        digest.update(b"\0\1")
    return digest.hexdigest()[:32]


def compile_source(source: str, entry: str, arch_name: str, options: tuple[str, ...] = (),
                   cache_directory: str | Path | None = None) -> CompiledImage:
    """Compile ``source`` for ``arch_name`` (``sm_90``, ``sm_90a``) and return the image, from
    ``cache_directory`` when an earlier compile of the same key left it there. The cache holds ``KEY.cubin`` and
    ``KEY.entry`` (the lowered entry name, then its parameter types); both are written atomically, the entry
    first, so a cubin present means a whole pair."""
    options = tuple(options) + default_include_options()
    if cache_directory is None:
        return _compile(source, entry, arch_name, options)
    key = image_key(source, entry, arch_name, options)
    cubin_path = Path(cache_directory) / f"{key}.cubin"
    entry_path = cubin_path.with_suffix(".entry")
    if cubin_path.is_file() and entry_path.is_file():
        lowered, _, types = entry_path.read_text(encoding="utf-8").partition("\n")
        return CompiledImage(cubin_path.read_bytes(), lowered, tuple(types.split()), "", True)
    from ..triton._manifest import write_atomically

    image = _compile(source, entry, arch_name, options)
    write_atomically(entry_path, f"{image.entry}\n{' '.join(image.param_types)}".encode())
    write_atomically(cubin_path, image.cubin)
    return image
