"""``kabi binaries compile|list``: device binaries (cubins and their ``NAME.kabi-manifest``) that load without code.

``compile`` builds the Triton kernels into a directory (Triton compiles cubins without a GPU); any process then
loads them by naming that directory in ``KABI_BINARY_PATH`` (docs/manifest.md). ``list`` reads the manifests of a
directory as the loader would.

Example::

    $ kabi binaries compile --arch 90 --out binaries/ --dtypes bfloat16
    $ KABI_BINARY_PATH=$PWD/binaries python serve.py
    $ kabi binaries list binaries/
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from ..._base.errors import InvalidArgumentError, UnavailableError
from ...backends.triton._names import MANIFEST_SUFFIX

_ARCHS = (80, 90)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("binaries", help="compile or list device binaries that load without code")
    actions = parser.add_subparsers(dest="binaries_action", metavar="ACTION", required=True)
    compile_parser = actions.add_parser("compile", help="compile the Triton kernels into a directory of binaries")
    compile_parser.add_argument("--arch", type=_parse_arch, required=True,
                                help="the GPU architecture: 80 (sm_80, runs on sm_8x) or 90 (sm_90a)")
    compile_parser.add_argument("--out", type=Path, required=True, help="the directory to write into")
    compile_parser.add_argument("--dtypes", nargs="+", metavar="DTYPE",
                                help="dtypes to compile for (default: float16 bfloat16; float32 also exists; with "
                                     "--native, each family's native set: scaled_mm's output dtypes include "
                                     "float32)")
    compile_parser.add_argument("--families", nargs="+", metavar="FAMILY",
                                help="only these kernel families (tiled, small_m, persistent_tma, decode; grouped "
                                     "for grouped_mm, linear, scaled_mm and scaled_mm_tma; default: all that exist "
                                     "for the arch)")
    compile_parser.add_argument("--multiprocessors", type=_parse_multiprocessors,
                                help="the persistent kernel's program count: the target GPU's SM count "
                                     "(default 132, an H100/H200)")
    compile_parser.add_argument("--native", action="store_true",
                                help="compile the set kabi registers as its CUDA candidates (each family's native "
                                     "dtypes, row- and column-major, every config) into OUT/<kernels' "
                                     "fingerprint>/sm<arch>_sms<N>, where registration looks: with --out "
                                     "python/kabi/binaries/triton a wheel ships them precompiled")
    compile_parser.set_defaults(handler=_compile)
    list_parser = actions.add_parser("list", help="the manifests of a directory: name, arch, dtypes, entry")
    list_parser.add_argument("directory", type=Path)
    list_parser.set_defaults(handler=_list)


def _parse_arch(text: str) -> int:
    if text not in tuple(map(str, _ARCHS)):
        raise argparse.ArgumentTypeError(f"must be {' or '.join(map(str, _ARCHS))}, got {text!r}")
    return int(text)


def _parse_multiprocessors(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (the target GPU's SM count), got {text!r}")
    return value


def _unknown(requested: list[str] | None, known: list[str]) -> list[str]:
    return [name for name in requested or () if name not in known]


def _compile(arguments: argparse.Namespace, console) -> int:
    try:
        from ...backends.triton._binary_families import binary_families
        from ...backends.triton._families import DTYPE_NAMES
    except ImportError as error:
        raise UnavailableError(f"kabi binaries compile needs Triton ({error}); pip install triton") from None
    from ...backends.triton import compile_all, read_manifest
    from ...backends.triton._compile import DEFAULT_MULTIPROCESSORS

    # --native without --dtypes: each family's native dtypes (None), as registration compiles them.
    dtypes = arguments.dtypes or (None if arguments.native else ["float16", "bfloat16"])
    for option, noun, requested, known in (("--dtypes", "dtype", dtypes, list(DTYPE_NAMES.values())),
                                           ("--families", "family", arguments.families, list(binary_families()))):
        unknown = _unknown(requested, known)
        if unknown:
            raise InvalidArgumentError(f"{option}: unknown {noun} {', '.join(unknown)}; expected some of "
                                       f"{', '.join(known)}")
    multiprocessors = arguments.multiprocessors or DEFAULT_MULTIPROCESSORS
    with console.status(f"compiling the Triton kernels for sm_{arguments.arch} into {arguments.out} ..."):
        if arguments.native:
            from ...backends.triton._native import binary_variants, compile_binaries

            directory = compile_binaries(binary_variants(arguments.arch, arguments.families, dtypes),
                                         arguments.arch, multiprocessors, arguments.out)
            paths = sorted(directory.glob(f"*{MANIFEST_SUFFIX}"))
        else:
            directory = arguments.out
            paths = compile_all(arguments.arch, arguments.out, dtypes=dtypes, families=arguments.families,
                                multiprocessors=multiprocessors)
    if not paths:
        among = f" among {' '.join(arguments.families)}" if arguments.families else ""
        raise InvalidArgumentError(f"--arch {arguments.arch}: no kernel family compiles for sm_{arguments.arch} with "
                                   f"{' '.join(dtypes or ['their native dtypes'])}{among}")
    table = Table(title=f"{len(paths)} binaries for sm_{arguments.arch} in {directory}", title_justify="left")
    for header in ("kernel", "dtype", "file"):
        table.add_column(header, overflow="fold")
    for path in paths:
        manifest = read_manifest(path, check_image=False)
        table.add_row(manifest.name, ",".join(manifest.dtypes), manifest.image)
    console.print(table)
    console.print(f"load them without code: KABI_BINARY_PATH={directory.resolve()}")
    return 0


def _list(arguments: argparse.Namespace, console) -> int:
    from ...backends.triton import ManifestError, read_manifest

    directory: Path = arguments.directory
    if not directory.is_dir():
        raise InvalidArgumentError(f"DIRECTORY: {directory} is not a directory")
    paths = sorted(directory.glob(f"*{MANIFEST_SUFFIX}"))
    if not paths:
        console.print(f"no {MANIFEST_SUFFIX} files in {directory}")
        return 0
    table = Table(title=f"{directory}: {len(paths)} manifests", title_justify="left")
    for header in ("name", "arch", "dtypes", "entry"):
        table.add_column(header, overflow="fold")
    errors = []
    for path in paths:
        try:
            manifest = read_manifest(path)
        except ManifestError as error:
            errors.append(str(error))
            continue
        table.add_row(manifest.name, f"sm_{manifest.arch}", ",".join(manifest.dtypes), manifest.entry)
    console.print(table)
    for error in errors:
        console.print(f"[red]invalid:[/] {error}")
    return 1 if errors else 0
