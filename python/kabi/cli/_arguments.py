"""Arguments shared by subcommands: the op, a problem shape (``MxNxK``, optionally ``BxMxNxK``), dtype and device,
and turning them into fresh random inputs.

Example::

    >>> parse_shape("512x256x128")
    (512, 256, 128)
"""

from __future__ import annotations

import argparse

import torch

from .. import _core
from .._base.declarations import op_spec
from .._base.errors import InvalidArgumentError, unknown_op
from .._base.tensors import torch_dtype
from .._plugins.discovery import complete_registry


def known_op(name: str) -> str:
    """``name`` if libkabi has that op (plugins may add ops, so the registry is completed first); otherwise the
    ``NotFoundError`` every command words the same way."""
    complete_registry()
    ops = _core.op_list()
    if name not in ops:
        raise unknown_op(name, ops)
    return name


def parse_shape(text: str) -> tuple[int, ...]:
    """``"MxNxK"`` or ``"BxMxNxK"`` -> a tuple of positive ints (argparse type)."""
    try:
        sizes = tuple(int(part) for part in text.lower().split("x"))
    except ValueError:
        sizes = ()
    if len(sizes) not in (3, 4) or min(sizes) <= 0:
        raise argparse.ArgumentTypeError(f"expected MxNxK or BxMxNxK with positive sizes (e.g. 512x512x512), got {text!r}")
    return sizes


def resolve_device(text: str) -> torch.device:
    """``--device``: "auto" is the GPU when torch sees one, else the CPU; anything else must name a device of this
    machine (``InvalidArgumentError`` listing those that exist)."""
    present = ["cpu", *(["cuda"] if torch.cuda.is_available() else []),
               *(f"cuda:{index}" for index in range(torch.cuda.device_count()))]
    if text == "auto":
        return torch.device(present[1] if len(present) > 1 else "cpu")
    try:
        device = torch.device(text)
    except RuntimeError:
        device = None
    if device is None or (str(device) not in present and f"{device.type}:{device.index}" not in present):
        raise InvalidArgumentError(f"--device {text!r} is not a device of this machine; expected auto or one of "
                                   f"{', '.join(present)}")
    return device


def add_problem_arguments(parser: argparse.ArgumentParser) -> None:
    """op, --shape, --dtype, --device, --transpose-a/--transpose-b."""
    parser.add_argument("op", help="the op, e.g. matmul")
    parser.add_argument("--shape", type=parse_shape, required=True, help="MxNxK, or BxMxNxK for a batch of B")
    parser.add_argument("--dtype", default="auto",
                        help="float16, bfloat16, float32 or float64 (default: bfloat16 on a GPU, float32 on the CPU)")
    parser.add_argument("--device", default="auto",
                        help="cpu, cuda or cuda:N (default: the GPU if there is one, else the CPU)")
    parser.add_argument("--transpose-a", action="store_true", help="pass a as a column-major (transposed) view")
    parser.add_argument("--transpose-b", action="store_true", help="pass b as a column-major (transposed) view")
    parser.add_argument("--force", help="a backend or kernel name to force (as kabi.use)")


def make_inputs(arguments: argparse.Namespace, seed: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Fresh random matmul inputs for the parsed shape, dtype, device and layouts. Resolves ``--device`` and
    ``--dtype auto`` in ``arguments`` (bfloat16 on a GPU, float32 on the CPU), so later reads of
    ``arguments.device`` and ``arguments.dtype`` see the real ones."""
    device = resolve_device(arguments.device)
    arguments.device = str(device)
    if arguments.dtype == "auto":
        arguments.dtype = "float32" if device.type == "cpu" else "bfloat16"
    *batch, m, n, k = arguments.shape
    dtype = torch_dtype(arguments.dtype)
    generator = torch.Generator().manual_seed(seed if seed is not None else torch.seed() & 0xFFFFFFFF)

    def matrix(rows: int, columns: int, transposed: bool) -> torch.Tensor:
        shape = (*batch, columns, rows) if transposed else (*batch, rows, columns)
        values = torch.randn(shape, generator=generator, dtype=torch.float32).to(dtype=dtype, device=device)
        return values.transpose(-1, -2) if transposed else values

    return matrix(m, k, arguments.transpose_a), matrix(k, n, arguments.transpose_b)


def add_suite_or_shapes_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """op, --shape (repeatable) or --suite, --dtype (repeatable), --device, --transpose-a/-b: the problems of a
    command that works through many of them (``kabi tune``, ``kabi verify``), read by :func:`suite_or_shapes`."""
    parser.add_argument("op", help="the op, e.g. matmul")
    problems = parser.add_mutually_exclusive_group(required=True)
    problems.add_argument("--shape", type=parse_shape, action="append", help="MxNxK or BxMxNxK; repeat for more")
    problems.add_argument("--suite", help="a shape suite of the op's registry file (e.g. smoke, cpu)")
    parser.add_argument("--dtype", action="append", help=f"a dtype to {verb}; repeat for more (default: the suite's, "
                        "else float32)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument("--transpose-a", action="store_true", help=f"{verb} for a column-major (transposed) a")
    parser.add_argument("--transpose-b", action="store_true", help=f"{verb} for a column-major (transposed) b")


def suite_or_shapes(arguments: argparse.Namespace) -> list[tuple[tuple[int, ...], str]]:
    """The (shape, dtype) problems of ``--suite`` (its dtypes unless ``--dtype``) or of the ``--shape`` options
    (float32 unless ``--dtype``), each dtype checked against the op's declaration."""
    spec = op_spec(arguments.op)
    if arguments.suite is not None:
        if arguments.suite not in spec.suites:
            raise InvalidArgumentError(f"--suite: {arguments.op} has no suite {arguments.suite!r}; "
                                       f"{spec.path.name} declares {', '.join(spec.suites) or 'none'}")
        suite = spec.suites[arguments.suite]
        shapes, dtypes = list(suite.shapes), list(arguments.dtype or suite.dtypes)
    else:
        shapes, dtypes = arguments.shape, list(arguments.dtype or ["float32"])
    unknown = [dtype for dtype in dtypes if dtype not in spec.dtypes]
    if unknown:
        raise InvalidArgumentError(f"--dtype: {arguments.op} is not defined for {', '.join(unknown)}; "
                                   f"expected among {', '.join(spec.dtypes)}")
    return [(tuple(shape), dtype) for dtype in dtypes for shape in shapes]
