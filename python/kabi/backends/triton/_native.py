"""Triton candidates on the native launch path: every (family, config) that a manifest can describe is compiled to a
device binary for the GPU's arch, once, cached on disk, and registered as a native kernel that the core launches, so
a Triton pick costs what a device binary costs, from Python or C++.

The binaries come from the first directory that holds them all, keyed by the kernels' fingerprint (Triton's
version and the kernels' sources), the arch and the SM count the persistent grid bakes in:
1. ``kabi/binaries/triton/<fingerprint>/sm<arch>_sms<N>`` inside the installed package, where a wheel ships them
   (``kabi binaries compile --native --arch 90 --out python/kabi/binaries/triton`` before building it: no compiling
   at run time);
2. ``<kabi's default cache directory>/binaries/triton/<fingerprint>/sm<arch>_sms<N>`` (``KABI_CACHE_DIR``, else
   ``$XDG_CACHE_HOME/kabi``, else ``~/.cache/kabi``: not moved by ``kabi.cache.set_directory``, which kabi bench uses
   for a throwaway tuning cache, since compiled images stay valid whatever is tuned), where the ones missing are compiled
   at the first CUDA dispatch of a process (in parallel, one process per core), each written atomically, so
   concurrent processes and a crash mid-write leave only whole files.
Binaries found complete on disk register without importing Triton (a warm process whose pick is a binary never
imports it); only compiling the missing ones does.
Each registers with its Python twin's supports predicate (the same shape rules), and the Python kernel declines
the problems its binary serves; it keeps what no binary covers (general strides, float32, sizes a binary's declared
divisibility rules out). grouped_mm's persistent grouped GEMM, linear's fused kernel and scaled_mm's FP8 kernels
compile and register the same way.

Example::

    names = register_native_binaries(90, 132, supports_for)   # {(family, tag, dtype, layout, rows): kernel name}
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import NamedTuple

from ... import _core
from ...ops._kernel_registration import register_binaries
from ._binary_families import binary_families
from ._names import MANIFEST_SUFFIX, binary_name, kernels_fingerprint

# The layout variants a binary serves here: both inputs row-major, both column-major, and a row-major a with a
# column-major b (``x @ w.T``, the nn.Linear call). "strided" binaries run slower than the JIT kernel (docs/triton.md,
# "Limits of device binaries"), so strided problems stay with the Python kernels.
NATIVE_LAYOUTS = ("row_major", "column_major", "row_column")
_PACKAGED_ROOT = Path(__file__).resolve().parents[2] / "binaries" / "triton"
_CACHE_SUBDIRECTORY = Path("binaries", "triton")
_logger = logging.getLogger("kabi")


class BinaryVariant(NamedTuple):
    """One device binary of a (family, config): the dtype, the layout variant and, for a family that compiles one
    binary per row count of a program (decode), that count (``rows``; 0 for one binary serving every M)."""

    family: str
    config: object
    dtype: str
    layout: str
    rows: int = 0

    def name(self, arch: int) -> str:
        return binary_name(self.family, self.config.tag, self.layout, self.dtype, arch, self.rows)

    def request(self) -> list:
        """The variant as a compile worker reads it (``_compile_worker``)."""
        return [self.family, self.config.tag, self.dtype, self.layout, self.rows]


def binary_variants(arch: int, families: Iterable[str] | None = None, dtypes: Iterable[str] | None = None,
                    tags: Iterable[str] | None = None) -> list[BinaryVariant]:
    """Every (family, config) that compiles for ``arch``, per native dtype of its family, layout and row count
    (split-K configs too: they add their slices in the same launch; grouped_mm's grouped GEMM, linear's kernel and
    scaled_mm's FP8 kernels too); or those of the named ``families``, ``dtypes`` and config ``tags``."""
    from ._families import DTYPE_NAMES

    wanted_families = set(binary_families() if families is None else families)
    variants = []
    for family in binary_families().values():
        if (family.name not in wanted_families or arch < family.arch_min
                or (family.exact_archs and arch not in family.exact_archs)):
            continue
        family_dtypes = [dtype for dtype in family.dtypes
                         if (dtype in family.native_dtypes if dtypes is None else DTYPE_NAMES[dtype] in dtypes)]
        for config in (config for config in family.configs if tags is None or config.tag in tags):
            layouts = [layout for layout in NATIVE_LAYOUTS if layout in family.binary_layouts(config)]
            for dtype in family_dtypes:
                variants.extend(BinaryVariant(family.name, config, DTYPE_NAMES[dtype], layout, rows)
                                for layout in layouts for rows in family.binary_rows(config, dtype, arch))
    return variants


def _directory_name(arch: int, multiprocessors: int) -> Path:
    fingerprint = hashlib.sha256(kernels_fingerprint().encode()).hexdigest()[:16]
    return Path(fingerprint, f"sm{arch}_sms{multiprocessors}")


def _present_manifests(directory: Path) -> frozenset[str]:
    """The manifest file names in ``directory`` (none where it does not exist): one listing, where a check per binary
    costs a process's start a stat for each of hundreds."""
    try:
        return frozenset(name for name in os.listdir(directory) if name.endswith(MANIFEST_SUFFIX))
    except (FileNotFoundError, NotADirectoryError):
        return frozenset()


def _manifest_names(variants: list[BinaryVariant], arch: int) -> list[str]:
    return [f"{variant.name(arch)}{MANIFEST_SUFFIX}" for variant in variants]


def _compile_request(variants: list[BinaryVariant], arch: int, multiprocessors: int, directory: Path) -> list[str]:
    """Compile the variants in this process; return why each failure failed."""
    from ._compile_worker import compile_request

    return compile_request({"arch": arch, "multiprocessors": multiprocessors, "directory": str(directory),
                            "variants": [variant.request() for variant in variants]})


def _compile_in_processes(variants: list[BinaryVariant], arch: int, multiprocessors: int, directory: Path,
                          workers: int) -> list[str]:
    """Compile the variants in ``workers`` worker processes (``_compile_worker``); return why each failure failed."""
    chunks = [variants[start::workers] for start in range(workers)]
    processes = []
    for chunk in chunks:
        request = {"arch": arch, "multiprocessors": multiprocessors, "directory": str(directory),
                   "variants": [variant.request() for variant in chunk]}
        processes.append(subprocess.Popen([sys.executable, "-m", "kabi.backends.triton._compile_worker",
                                           json.dumps(request)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True))
    failures = []
    for chunk, process in zip(chunks, processes):
        output, errors = process.communicate()
        if process.returncode != 0:
            tail = errors.strip().splitlines()[-1:] or [f"exit status {process.returncode}"]
            failures += [f"{variant.name(arch)}: the compiling process failed: {tail[0]}" for variant in chunk]
        else:
            failures += output.splitlines()
    return failures


def compile_binaries(variants: list[BinaryVariant], arch: int, multiprocessors: int, root: str | Path,
                     workers: int | None = None) -> Path:
    """Compile the variants missing from ``root``'s directory for (kernels' fingerprint, arch, SM count), the
    layout registration reads, and return that directory (``workers`` processes; default one per core, at most
    one per binary). A variant that fails to compile is logged and left out.

    ``kabi binaries compile --native --arch 90 --out <package>/kabi/binaries/triton`` calls it to ship them in a
    wheel."""
    directory = Path(root) / _directory_name(arch, multiprocessors)
    present = _present_manifests(directory)
    missing = [variant for variant, manifest in zip(variants, _manifest_names(variants, arch))
               if manifest not in present]
    if not missing:
        return directory
    workers = max(1, min(workers or os.cpu_count() or 1, len(missing)))
    if workers == 1:
        failures = _compile_request(missing, arch, multiprocessors, directory)
    else:
        failures = _compile_in_processes(missing, arch, multiprocessors, directory, workers)
    for failure in failures:
        _logger.warning("kabi: a Triton device binary could not be compiled; its Python kernel serves: %s", failure)
    return directory


def ensure_binaries(variants: list[BinaryVariant], arch: int, multiprocessors: int,
                    workers: int | None = None) -> Path:
    """The directory holding the binaries of the variants: the packaged one when complete, else the cache's, where
    the missing ones are compiled first."""
    return _ensure(variants, _manifest_names(variants, arch), arch, multiprocessors, workers)[0]


def _ensure(variants: list[BinaryVariant], manifests: list[str], arch: int, multiprocessors: int,
            workers: int | None) -> tuple[Path, frozenset[str]]:
    """ensure_binaries given each variant's manifest name, returning the manifests the directory holds as well: a warm
    registration names each variant once and lists the directory it registers from once."""
    packaged = _PACKAGED_ROOT / _directory_name(arch, multiprocessors)
    present = _present_manifests(packaged)
    if present.issuperset(manifests):
        return packaged, present
    cache_root = Path(_core.cache_default_directory()) / _CACHE_SUBDIRECTORY
    directory = cache_root / _directory_name(arch, multiprocessors)
    present = _present_manifests(directory)
    if not present.issuperset(manifests):
        # It lists and names again, which only compiling, seconds a binary, pays for.
        compile_binaries(variants, arch, multiprocessors, cache_root, workers)
        present = _present_manifests(directory)
    return directory, present


def register_native_binaries(arch: int, multiprocessors: int,
                             supports_for: Callable[[str, object, int], Callable], *,
                             families: Iterable[str] | None = None, dtypes: Iterable[str] | None = None,
                             tags: Iterable[str] | None = None,
                             workers: int | None = None) -> dict[tuple[str, str, str, str, int], str]:
    """Compile (or find) and register the device binaries of every variant for ``arch``, each for its family's op
    with the supports predicate ``supports_for(family name, config, rows)``; return {(family, config tag, dtype,
    layout, rows): kernel name}."""
    variants = binary_variants(arch, families, dtypes, tags)
    manifests = _manifest_names(variants, arch)
    directory, present = _ensure(variants, manifests, arch, multiprocessors, workers)
    # Joined as strings: a pathlib join and str() per manifest cost a warm first call 12 ms for ~220 of them.
    prefix = os.path.join(directory, "")
    families = binary_families()
    held = [(variant, manifest) for variant, manifest in zip(variants, manifests) if manifest in present]
    names = register_binaries([(prefix + manifest, families[variant.family].op,
                                supports_for(variant.family, variant.config, variant.rows))
                               for variant, manifest in held])
    return {(variant.family, variant.config.tag, variant.dtype, variant.layout, variant.rows): name
            for (variant, _), name in zip(held, names)}
