"""``kabi.cuda.register_source``: CUDA C++ registered from Python as a device binary that the core launches.

The source is compiled with NVRTC for the arch of each CUDA device kabi sees (or the archs asked for), written as a
cubin plus a manifest (docs/manifest.md) into kabi's cache directory, and loaded by the core's manifest reader: the
kernel is then native, exactly like a Triton-compiled binary. It is gated and tuned like any other candidate,
``kabi.use`` can force it, and a C or C++ program reaches it by loading the same directory (``kabi_binaries_load``
or ``KABI_BINARY_PATH``).

Example (a matmul kernel taking c = a @ b for row-major float32 a[M, K], b[K, N])::

    kabi.cuda.register_source(
        "matmul", name="my.tiled", source=SOURCE, entry="matmul_tiled", dtypes="float32",
        params=["tensor index=0", "tensor index=1", "tensor index=2",
                "dim name=M size=4", "dim name=N size=4", "dim name=K size=4"],
        grid=("cdiv(N, 16)", "cdiv(M, 16)"), block=(16, 16))
    with kabi.use(matmul="my.tiled.sm90"):
        c = kabi.ops.matmul(a, b)
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ... import _core
from ..._base.devices import devices
from ..._base.errors import InvalidArgumentError
from ..._plugins import loading
from ...ops._kernel_registration import arch_bounds
from ._nvrtc import compile_source, nvrtc_version

if TYPE_CHECKING:
    from ..triton._manifest_params import ManifestParam

# Under kabi's default cache directory (KABI_CACHE_DIR, else $XDG_CACHE_HOME/kabi, else ~/.cache/kabi), which
# kabi.cache.set_directory does not move: compiled images stay valid whatever tuning cache is in use.
_IMAGES = Path("binaries", "nvrtc", "images")
_KERNELS = Path("binaries", "nvrtc", "kernels")
_BATCH_MODES = ("none", "uniform", "any")


@dataclass(frozen=True)
class SourceKernel:
    """One registered device binary: its kernel name (the given name + ``.sm<arch>``), the arch it was compiled
    for, the directory holding its cubin and manifest (give it to ``kabi_binaries_load`` or ``KABI_BINARY_PATH``),
    the entry's lowered name, NVRTC's log, and whether the image came from the disk cache."""

    name: str
    arch: int
    directory: Path
    entry: str
    log: str
    from_cache: bool


def _names(value: str | Iterable[str], argument: str) -> tuple[str, ...]:
    names = (value,) if isinstance(value, str) else tuple(value)
    if not names or not all(isinstance(name, str) and name for name in names):
        raise InvalidArgumentError(f"{argument} must be a name or a non-empty list of names, got {value!r}")
    return names


def _axes(value, argument: str, kind: type, fill) -> tuple:
    axes = (value,) if isinstance(value, (str, int)) else tuple(value)
    if not 1 <= len(axes) <= 3 or not all(isinstance(axis, kind) and not isinstance(axis, bool) for axis in axes):
        raise InvalidArgumentError(f"{argument} must be one to three {kind.__name__} values (x, y, z), got {value!r}")
    return axes + (fill,) * (3 - len(axes))


def _params(params: Sequence[str | ManifestParam]) -> tuple[ManifestParam, ...]:
    # The manifest writer lives with the Triton backend, whose package costs import time: read it on first use.
    from ..triton._manifest import ManifestError, parse_param
    from ..triton._manifest_params import ManifestParam

    if isinstance(params, str) or not params:
        raise InvalidArgumentError("params must be a non-empty list of the entry's parameters, each a "
                                   "ManifestParam or text such as 'tensor index=0' (docs/manifest.md)")
    parsed = []
    for position, param in enumerate(params):
        if isinstance(param, ManifestParam):
            parsed.append(param)
            continue
        try:
            parsed.append(parse_param(str(param), where=f"params[{position}]"))
        except ManifestError as error:
            raise InvalidArgumentError(str(error)) from None
    return tuple(parsed)


def _target_archs(target_archs: Iterable[int] | None, archs) -> list[int]:
    """The archs to compile for: those asked, else each distinct arch of the CUDA devices kabi sees, kept where
    the kernel's ``archs`` allow them."""
    if target_archs is None:
        wanted = sorted({device.arch for device in devices() if device.device_type == "cuda"})
    else:
        wanted = sorted(set(target_archs))
        if not all(isinstance(arch, int) and arch >= 50 for arch in wanted):
            raise InvalidArgumentError(f"target_archs must be compute capabilities such as 90, got {target_archs!r}")
    arch_min, arch_max, exact = arch_bounds(archs, "kabi.cuda.register_source")
    if exact:
        return [arch for arch in wanted if arch in exact]
    return [arch for arch in wanted if arch >= arch_min and (not arch_max or arch <= arch_max)]


def register_source(op: str, *, source: str, entry: str, dtypes: str | Iterable[str],
                    params: Sequence[str | ManifestParam], grid: str | Sequence[str], block: int | Sequence[int],
                    name: str | None = None, backend: str = "cuda", archs=None,
                    layouts: str | Iterable[str] = "contiguous", alignment: int = 16, batch: str = "none",
                    priority: int = 0, features: Iterable[str] = (), type_constraints: str = "",
                    shared_memory_bytes: int = 0, cluster_size: int = 1, options: Iterable[str] = (),
                    arch_specific: bool = False, target_archs: Iterable[int] | None = None) -> tuple[SourceKernel, ...]:
    """Compile CUDA C++ ``source`` with NVRTC and register its ``__global__`` function ``entry`` as a native
    kernel of ``op``, one per target arch, named ``<name>.sm<arch>`` (``name`` defaults to ``cuda.<op>.<entry>``).

    The launch spec is a device binary's (docs/manifest.md): ``params`` lists the entry's parameters in order
    (``"tensor index=I"``, ``"dim name=M size=4"``, ``"stride index=I dim=D size=4"``, ``"constant value=V
    size=4"``, ``"attribute index=I size=4"``, ...), checked against the compiled entry's parameter list; ``grid``
    holds one to three expressions over the op's dimensions (``"cdiv(M, 64) * cdiv(N, 64)"``), ``block`` one to
    three thread counts. ``dtypes``, ``layouts``, ``alignment``, ``batch``, ``priority``, ``features`` and
    ``type_constraints`` declare what the kernel accepts, as for any kernel; ``archs`` (None, an int, a set, or a
    (min, max) range) which archs its source supports. ``options`` go to NVRTC (the CUDA headers' ``-I`` is
    added); ``arch_specific`` compiles for ``sm_XYa`` (wgmma, setmaxnreg).

    Compiles for ``target_archs``, by default the arch of each CUDA device kabi sees: without a CUDA driver or
    GPU nothing is compiled and ``()`` is returned. Images are cached on disk, keyed by source, options, entry,
    arch and NVRTC's version, so a second registration (in any process) does not compile. A source NVRTC refuses
    raises InvalidArgumentError with its log; a name already registered with another image or launch spec raises
    AlreadyExistsError.
    """
    if not isinstance(source, str) or not source.strip():
        raise InvalidArgumentError("source must be the CUDA C++ text of the kernel")
    if not isinstance(entry, str) or not entry.strip():
        raise InvalidArgumentError("entry must name the __global__ function to launch (or a template instance)")
    _core.op_schema(op)
    # A default name keeps the entry's letters and digits: "tiled<__half>" names the kernel "cuda.matmul.tiled___half_".
    name = name if name is not None else f"cuda.{op}.{re.sub(r'[^A-Za-z0-9_.]', '_', entry)}"
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
        raise InvalidArgumentError(f"name must be letters, digits, '_', '.' or '-' (it names files), got {name!r}")
    if batch not in _BATCH_MODES:
        raise InvalidArgumentError(f"batch must be one of {', '.join(_BATCH_MODES)}, got {batch!r}")
    launch = dict(params=_params(params), grid=_axes(grid, "grid", str, "1"), block=_axes(block, "block", int, 1))
    declaration = dict(op=op, backend=backend, device="cuda", priority=priority, dtypes=_names(dtypes, "dtypes"),
                       layouts=_names(layouts, "layouts"), alignment=alignment, batch_mode=batch,
                       features=tuple(features), type_constraints=type_constraints,
                       shared_memory_bytes=shared_memory_bytes, cluster_size=cluster_size)
    return tuple(_register_for_arch(arch, source, entry, name, tuple(options), arch_specific, launch, declaration)
                 for arch in _target_archs(target_archs, archs))


def _register_for_arch(arch: int, source: str, entry: str, name: str, options: tuple, arch_specific: bool,
                       launch: dict, declaration: dict) -> SourceKernel:
    from ..triton._manifest import Manifest, check_against_ptx, fnv1a64, write_binary

    cache = Path(_core.cache_default_directory())
    arch_name = f"sm_{arch}{'a' if arch_specific else ''}"
    image = compile_source(source, entry, arch_name, options, cache_directory=cache / _IMAGES)
    kernel_name = f"{name}.sm{arch}{'a' if arch_specific else ''}"
    try:
        check_against_ptx(list(launch["params"]), list(image.param_types), kernel_name)
    except RuntimeError as error:
        raise InvalidArgumentError(f"params: {error}") from None
    manifest = Manifest(
        name=kernel_name, image=f"{kernel_name}.cubin", image_format="cubin", image_fnv1a64=fnv1a64(image.cubin),
        arch=arch, archs=(arch,), entry=image.entry, **launch, **declaration,
        extra_comments=(f"compiled by kabi.cuda.register_source with NVRTC {nvrtc_version()} for {arch_name}",))
    # One directory per manifest, so that loading it registers this kernel and nothing else.
    directory = cache / _KERNELS / hashlib.sha256(manifest.text().encode()).hexdigest()[:24]
    write_binary(manifest, image.cubin, directory)
    loading.load_binaries(directory)
    return SourceKernel(kernel_name, arch, directory, image.entry, image.log, image.from_cache)
