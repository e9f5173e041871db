"""The problem arguments every command that runs an op shares, declared here and read here.

A problem is the op's named dims (``--shape M=512,N=512,K=512``, or sizes in the op's ``shape_order``:
``--shape 512x512x512`` is M, N, K for matmul, ``2x512x512x512`` with a batch of 2), an optional batch shape for its
``...`` tensors (``--batch 2,3``), its attributes (``--attr activation=gelu``, parsed against the op's declared
types), the dtypes (``--dtype bfloat16`` for every type variable that may take it, or ``--dtype T=bfloat16,OutT=float16``),
the optional inputs left out (``--absent bias``), the inputs passed as transposed views (``--transpose b``) and
the device. ``kabi run`` and ``kabi explain`` take one problem (:func:`add_problem_arguments`); ``kabi tune`` and
``kabi verify`` take many, or a suite of the op's TOML (:func:`add_suite_or_shapes_arguments`). Both are read by
:func:`problems`, and :meth:`CommandProblem.inputs` makes the inputs with the op's input generator.

Example::

    $ kabi run matmul --shape M=512,N=256,K=128 --batch 4 --dtype float32 --transpose b
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Mapping

import torch

from .. import _core
from .._base.declarations import ProblemShape, op_specs, parse_problem_shape
from .._base.errors import InvalidArgumentError, unknown_op
from .._plugins.discovery import complete_registry
from ..ops._inputs import problem_inputs

__all__ = ["CommandProblem", "add_problem_arguments", "add_suite_or_shapes_arguments", "known_op", "problems",
           "resolve_device"]

_BOOLEAN_TEXT = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


def known_op(name: str) -> str:
    """``name`` if libkabi has that op (plugins may add ops, so the registry is completed first); otherwise the
    ``NotFoundError`` every command words the same way."""
    complete_registry()
    ops = _core.op_list()
    if name not in ops:
        raise unknown_op(name, ops)
    return name


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


@dataclass(frozen=True)
class CommandProblem:
    """One problem of a command: the op, its shape, a dtype per type variable, the attributes (by name, with the
    op's defaults filled in), the optional inputs present, the inputs passed transposed, and the device."""

    op: str
    shape: ProblemShape
    dtypes: Mapping[str, str]
    attributes: Mapping[str, Any]
    present: frozenset[str]
    transposed: tuple[str, ...]
    device: torch.device

    @property
    def dtype(self) -> str:
        """The dtype of the op's first type variable: the problem's dtype in its tuning key and tolerances."""
        return next(iter(self.dtypes.values()))

    @property
    def label(self) -> str:
        """``M=64,N=48,K=32 float32``, with the attributes that differ from their defaults, the inputs left out
        and those transposed."""
        dtypes = sorted(set(self.dtypes.values()))
        parts = [str(self.shape), dtypes[0] if len(dtypes) == 1 else ",".join(f"{v}={d}" for v, d in self.dtypes.items())]
        declared = {attribute["name"]: attribute for attribute in _core.op_schema(self.op)["attributes"]}
        parts += [f"{name}={value}" for name, value in self.attributes.items() if value != declared[name]["default"]]
        optional = [tensor["name"] for tensor in _core.op_schema(self.op)["inputs"] if tensor["optional"]]
        parts += [f"no {name}" for name in optional if name not in self.present]
        parts += [f"{name} transposed" for name in self.transposed]
        return " ".join(parts)

    def inputs(self, seed: int | None = None) -> tuple[torch.Tensor | None, ...]:
        """Fresh inputs from the op's input generator (seeded: the same problem gets the same values; None: a new
        seed), the transposed ones as column-major views of the same values."""
        spec = op_specs().get(self.op, self.op)
        generated = problem_inputs(spec, self.shape.sizes, self.shape.batch, self.dtypes, self.attributes,
                                   self.present, self.device, seed if seed is not None else torch.seed() & 0xFFFFFFFF)
        names = [tensor["name"] for tensor in _core.op_schema(self.op)["inputs"]]
        for name, value in zip(names, generated):
            if name in self.transposed and value is not None and value.dim() < 2:
                raise InvalidArgumentError(f"--transpose {name}: {name} has shape {list(value.shape)}; only a "
                                           "tensor of 2 or more dimensions has a transposed view")
        return tuple(value.mT.contiguous().mT if name in self.transposed and value is not None else value
                     for name, value in zip(names, generated))


def _add_common_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    parser.add_argument("--batch", help="the leading (batch) shape of the op's [..., ] tensors, e.g. 2 or 2,3")
    parser.add_argument("--attr", action="append", default=[], metavar="NAME=VALUE",
                        help="an attribute of the op (enum values by name); repeat for more")
    parser.add_argument("--absent", action="append", default=[], metavar="INPUT",
                        help=f"{verb} without this optional input; repeat for more")
    parser.add_argument("--transpose", action="append", default=[], metavar="INPUT",
                        help="pass this input as a column-major (transposed) view; repeat for more")


def add_problem_arguments(parser: argparse.ArgumentParser) -> None:
    """op, --shape, --batch, --attr, --dtype, --absent, --transpose, --device, --force: one problem (``kabi run``,
    ``kabi explain``), read by :func:`problems`."""
    parser.add_argument("op", help="the op, e.g. matmul")
    parser.add_argument("--shape", required=True,
                        help="named dims, M=512,N=512,K=512, or sizes in the op's shape order, 512x512x512 (a leading "
                             "size is the batch)")
    _add_common_arguments(parser, "run")
    parser.add_argument("--dtype", default="auto",
                        help="a dtype for every type variable, or T=bfloat16,OutT=float16 (default: bfloat16 on a GPU, "
                             "float32 on the CPU)")
    parser.add_argument("--device", default="auto",
                        help="cpu, cuda or cuda:N (default: the GPU if there is one, else the CPU)")
    parser.add_argument("--force", help="a backend or kernel name to force (as kabi.use)")


def add_suite_or_shapes_arguments(parser: argparse.ArgumentParser, verb: str) -> None:
    """op, --shape (repeatable) or --suite, --batch, --attr, --dtype (repeatable), --absent, --transpose, --device:
    the problems of a command that works through many of them (``kabi tune``, ``kabi verify``), read by
    :func:`problems`."""
    parser.add_argument("op", help="the op, e.g. matmul")
    problems_group = parser.add_mutually_exclusive_group(required=True)
    problems_group.add_argument("--shape", action="append",
                                help="named dims (M=64,N=64,K=64) or sizes in the op's shape order (64x64x64); "
                                     "repeat for more")
    problems_group.add_argument("--suite", help="a shape suite of the op's registry file (e.g. smoke, cpu)")
    _add_common_arguments(parser, verb)
    parser.add_argument("--dtype", action="append", help=f"a dtype to {verb} (or T=bfloat16,OutT=float16); repeat "
                        "for more (default: the suite's, else float32)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")


def _shape(text: str, shape_order: tuple[str, ...], batch: tuple[int, ...]) -> ProblemShape:
    try:
        shape = parse_problem_shape(text, shape_order)
    except ValueError as error:
        raise InvalidArgumentError(f"--shape {text!r}: {error}") from None
    if batch and shape.batch:
        raise InvalidArgumentError(f"--shape {text!r} has a batch ({'x'.join(map(str, shape.batch))}) and --batch "
                                   "gives another; give one")
    return ProblemShape(shape.dims, shape.batch or batch)


def _batch(text: str | None) -> tuple[int, ...]:
    if text is None:
        return ()
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        sizes = ()
    if not sizes or min(sizes) <= 0:
        raise InvalidArgumentError(f"--batch: expected positive sizes separated by commas (e.g. 2 or 2,3), got {text!r}")
    return sizes


def _dtypes(op: str, text: str, attributes: Mapping[str, Any], auto: str | None = None) -> dict[str, str]:
    """``--dtype``: one name for every type variable that may take it (the others must be named), or
    ``T=bfloat16,OutT=float16``; a variable an attribute binds (``out_dtype: O``) has the attribute's value. With
    ``auto`` (the device's default dtype), each variable takes it where it may, else its first dtype."""
    schema = _core.op_schema(op)
    bound = {attribute["type_variable"]: attributes[attribute["name"]] for attribute in schema["attributes"]
             if attribute["type_variable"] is not None}
    variables: Mapping[str, list[str]] = {name: allowed for name, allowed in schema["type_variables"].items()
                                          if name not in bound}
    if auto is not None:
        return {name: bound.get(name) or (auto if auto in allowed else allowed[0])
                for name, allowed in schema["type_variables"].items()}
    if "=" in text:
        given = dict(item.partition("=")[::2] for item in text.split(","))
        unknown = sorted(set(given) - set(variables))
        if unknown:
            raise InvalidArgumentError(f"--dtype: {op} has no type variable {unknown[0]}; expected among "
                                       f"{', '.join(variables) or 'none'}")
    else:
        given = {variable: text for variable, allowed in variables.items() if text in allowed}
        if not given and variables:
            given = {next(iter(variables)): text}  # none may take it: the first variable's check says why
    for variable, allowed in variables.items():
        if variable not in given:
            raise InvalidArgumentError(f"--dtype {text!r}: gives no dtype for {op}'s type variable {variable}; name "
                                       f"it, e.g. {variable}={allowed[0]} (one of {', '.join(allowed)})")
        dtype = given[variable]
        if dtype not in _core.DTYPES:
            raise InvalidArgumentError(f"--dtype: unknown dtype {dtype!r}; expected one of {', '.join(_core.DTYPES)}")
        if dtype not in allowed:
            raise InvalidArgumentError(f"--dtype: {op} is not defined for {dtype} as {variable}; expected among "
                                       f"{', '.join(allowed)}")
    return {variable: given[variable] if variable in given else bound[variable]
            for variable in schema["type_variables"]}


def _attribute_value(op: str, attribute: Mapping[str, Any], text: str) -> Any:
    """One ``--attr`` value parsed as its declared type: enum values by name, ints, floats, booleans."""
    name, kind = attribute["name"], attribute["type"]
    if kind == "enum":
        if text not in attribute["enum_values"]:
            raise InvalidArgumentError(f"--attr {name}: expected one of {', '.join(attribute['enum_values'])}, "
                                       f"got {text!r}")
        return text
    if kind == "bool":
        if text.lower() not in _BOOLEAN_TEXT:
            raise InvalidArgumentError(f"--attr {name}: expected a bool (true or false), got {text!r}")
        return _BOOLEAN_TEXT[text.lower()]
    try:
        return int(text) if kind == "int" else float(text)
    except ValueError:
        raise InvalidArgumentError(f"--attr {name}: expected {'an int' if kind == 'int' else 'a float'}, "
                                   f"got {text!r}") from None


def _attributes(op: str, items: list[str]) -> dict[str, Any]:
    declared = {attribute["name"]: attribute for attribute in _core.op_schema(op)["attributes"]}
    given: dict[str, Any] = {}
    for item in items:
        name, equals, text = item.partition("=")
        if not equals:
            raise InvalidArgumentError(f"--attr: expected NAME=VALUE, got {item!r}")
        if name not in declared:
            raise InvalidArgumentError(f"--attr {name}: {op} has no attribute {name}; expected among "
                                       f"{', '.join(declared) or 'none'}")
        if name in given:
            raise InvalidArgumentError(f"--attr {name}: given twice")
        given[name] = _attribute_value(op, declared[name], text)
    for name, attribute in declared.items():
        if name not in given:
            if not attribute["has_default"]:
                raise InvalidArgumentError(f"--attr {name}: {op} requires it (no default); give --attr {name}=...")
            given[name] = attribute["default"]
    return {name: given[name] for name in declared}


def _input_names(op: str, names: list[str], option: str, optional_only: bool) -> tuple[str, ...]:
    inputs = [tensor for tensor in _core.op_schema(op)["inputs"] if tensor["optional"] or not optional_only]
    allowed = [tensor["name"] for tensor in inputs]
    for name in names:
        if name not in allowed:
            kind = "optional input" if optional_only else "input"
            raise InvalidArgumentError(f"{option} {name}: {op} has no {kind} {name}; expected among "
                                       f"{', '.join(allowed) or 'none'}")
    return tuple(dict.fromkeys(names))


def _check_dims(op: str, shapes: list[ProblemShape], present: frozenset[str]) -> None:
    """Every shape names exactly the dims of the inputs given, and has a batch only where the op has ``...``."""
    inputs = [tensor for tensor in _core.op_schema(op)["inputs"] if not tensor["optional"] or tensor["name"] in present]
    needed = list(dict.fromkeys(dim for tensor in inputs for dim in tensor["dims"]))
    batched = any(tensor["has_batch"] for tensor in inputs)
    for shape in shapes:
        named = list(shape.sizes)
        if sorted(named) != sorted(needed):
            extra, missing = sorted(set(named) - set(needed)), [dim for dim in needed if dim not in named]
            problem = f"{op} has no dim {extra[0]}" if extra else f"lacks {', '.join(missing)}"
            raise InvalidArgumentError(f"--shape {shape}: {problem}; expected {', '.join(f'{d}=...' for d in needed)}")
        if shape.batch and not batched:
            raise InvalidArgumentError(f"--shape {shape}: {op} has no batch dimensions (no [..., ] input); "
                                       "expected no batch")


def problems(arguments: argparse.Namespace) -> list[CommandProblem]:
    """The problems the parsed arguments pose: for each ``--shape`` (or each shape of ``--suite``) and each
    ``--dtype`` (default: the suite's, else ``auto``: float32 on the CPU, bfloat16 on a GPU), with the
    attributes, absent and transposed inputs and the device. Every value is checked against the op's declaration;
    ``InvalidArgumentError`` names the option and what was expected."""
    op = known_op(arguments.op)
    spec = op_specs().get(op)
    shape_order = spec.shape_order if spec is not None else ()
    device = resolve_device(arguments.device)
    batch = _batch(arguments.batch)
    suite_name = getattr(arguments, "suite", None)
    if suite_name is not None:
        suites = spec.suites if spec is not None else {}
        if suite_name not in suites:
            raise InvalidArgumentError(f"--suite: {op} has no suite {suite_name!r}; it declares "
                                       f"{', '.join(suites) or 'none'}")
        suite = suites[suite_name]
        shapes = [ProblemShape(shape.dims, shape.batch or batch) for shape in suite.shapes]
        dtype_texts = list(arguments.dtype or suite.dtypes)
    else:
        texts = arguments.shape if isinstance(arguments.shape, list) else [arguments.shape]
        shapes = [_shape(text, shape_order, batch) for text in texts]
        dtype_texts = arguments.dtype if isinstance(arguments.dtype, list) else [arguments.dtype or "auto"]
    auto = "float32" if device.type == "cpu" else "bfloat16"
    attributes = _attributes(op, arguments.attr)
    dtypes = [_dtypes(op, text, attributes, auto if text == "auto" else None) for text in dtype_texts]
    absent = _input_names(op, arguments.absent, "--absent", optional_only=True)
    present = frozenset(tensor["name"] for tensor in _core.op_schema(op)["inputs"]
                        if tensor["optional"] and tensor["name"] not in absent)
    transposed = _input_names(op, arguments.transpose, "--transpose", optional_only=False)
    _check_dims(op, shapes, present)
    return [CommandProblem(op, shape, by_variable, attributes, present, transposed, device)
            for by_variable in dtypes for shape in shapes]
