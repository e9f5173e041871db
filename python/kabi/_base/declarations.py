"""The registry data under ``registry/``: op declarations (``ops/<op>.toml``) and built-in kernel declarations
(``kernels/<backend>/<op>.toml``), parsed into frozen dataclasses and validated field by field.

This module is the schema: every field, its type and its allowed values are checked here, and a bad file fails
with ``RegistryError`` naming the file and the field (``registry/ops/matmul.toml: tolerance.float32.norm: expected
a positive number, got -1``; :mod:`kabi._base.registry_fields`). Files are parsed once per process. An op's
``[gradient]`` table is read by :mod:`kabi._base.gradient_declarations`.

Example::

    >>> from kabi._base.declarations import op_spec
    >>> op_spec("matmul").tolerance["float32"].norm
    2e-05
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from .. import _core
from .errors import ArgumentTypeError, NotFoundError
from .gradient_declarations import GradientSpec, parse_gradient
from .registry_fields import TEXT_SOURCE, TableReader, parse_toml

__all__ = [
    "INPUT_KINDS",
    "InputDeclaration",
    "KernelSpec",
    "OpSpec",
    "ProblemShape",
    "ShapeSuite",
    "Tolerance",
    "kernel_specs",
    "load_kernel_file",
    "load_op_file",
    "read_op_declaration",
    "op_name_of",
    "op_spec",
    "op_specs",
    "parse_problem_shape",
    "registry_root",
    "resolve_callable",
]

# The core's dtype vocabulary (csrc/core/names.cpp), in the order of its KABI_DTYPE_* bits.
DTYPE_NAMES = tuple(_core.DTYPES)
# Integer results are compared exactly by the correctness gate: these dtypes take no tolerance.
EXACT_DTYPES = frozenset({"uint8", "int8", "int16", "int32", "int64"})
# The core's layout classes (kabi.h's KABI_LAYOUT_*), and "any" for a kernel that takes every one.
LAYOUT_NAMES = (*_core.LAYOUTS, "any")
BATCH_MODE_NAMES = ("none", "uniform", "any")
DEVICE_NAMES = ("cpu", "cuda", "rocm", "mps", "xpu")
# How a suite lays out the second operand: "row_major" is b as a contiguous [..., K, N]; "transposed_b" is b as the
# transposed view of a contiguous [..., N, K], the layout of an nn.Linear weight.
# The input layouts a suite's shapes are benchmarked in: b row-major or transposed (matmul), the scales per tensor
# or row-wise, each also with fast accumulation allowed (scaled_mm, whose b is always transposed).
SUITE_LAYOUT_NAMES = ("row_major", "transposed_b", "tensor_scales", "row_scales", "tensor_scales_fast_accum",
                      "row_scales_fast_accum")
# How a grouped op's benchmark spreads rows over groups (a suite's ``routings``): each row's group drawn uniformly
# ("balanced") or with probability proportional to 1 / rank ("zipf": a few hot experts, many cold or empty ones).
SUITE_ROUTING_NAMES = ("balanced", "zipf")
# How the input generator fills a tensor (``[inputs.<tensor>] kind``); kabi.ops._inputs gives each its meaning.
INPUT_KINDS = ("normal", "uniform", "positive", "integers", "offsets")
# The key of a problem shape's leading (batch) shape, beside the named dimensions.
BATCH_KEY = "batch"
# ``[tuning] distributed``: how the ranks of a job share tuning (kabi._selection.distributed); the first is the default.
DISTRIBUTED_TUNING_STRATEGIES = ("split", "every-rank")


@dataclass(frozen=True)
class Tolerance:
    """The correctness gate of one dtype: relative Frobenius error and relative max error, both upper bounds."""

    norm: float
    extreme: float


@dataclass(frozen=True)
class ProblemShape:
    """The sizes of one problem: each named dimension of the op's schema, and the leading (batch) shape of its
    ``[..., ...]`` tensors (empty: no batch dimensions).

    Example::

        >>> shape = parse_problem_shape("2x16x24x40", ("M", "N", "K"))
        >>> shape.sizes, shape.batch, str(shape)
        ({'M': 16, 'N': 24, 'K': 40}, (2,), 'batch=2,M=16,N=24,K=40')
    """

    dims: tuple[tuple[str, int], ...]
    batch: tuple[int, ...] = ()

    @property
    def sizes(self) -> dict[str, int]:
        """The named dimensions as a dict, in the order given."""
        return dict(self.dims)

    def positional(self, order: tuple[str, ...]) -> tuple[int, ...]:
        """The batch shape then the dimensions in ``order``: ``(B, M, N, K)`` for matmul's ``("M", "N", "K")``."""
        return (*self.batch, *(self.sizes[name] for name in order))

    def __str__(self) -> str:
        batch = [f"{BATCH_KEY}={'x'.join(map(str, self.batch))}"] if self.batch else []
        return ",".join(batch + [f"{name}={size}" for name, size in self.dims])


def _positive_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def parse_problem_shape(value: Any, shape_order: tuple[str, ...] = ()) -> ProblemShape:
    """The one reader of problem shapes, from a suite entry or the command line; ``ValueError`` saying what was
    expected (the caller adds where the value came from).

    - a table of named dimensions, ``{"M": 512, "N": 512, "K": 512}``, optionally with ``"batch"``: the leading
      shape, an int or a list of ints;
    - a list of sizes in the op's ``shape_order`` (``[512, 512, 512]`` is M, N, K for matmul), optionally with one
      leading batch size (``[2, 512, 512, 512]``);
    - text: ``"M=512,N=512,K=512"`` (``batch=2x3`` for a batch) or ``"512x512x512"`` in the op's ``shape_order``.
    """
    if isinstance(value, str):
        value = _shape_text(value)
    if isinstance(value, list):
        if not shape_order:
            raise ValueError(f"sizes without names need the op's shape_order; name them, as in "
                             f"{{ M = 8, N = 8 }}, got {value!r}")
        if len(value) not in (len(shape_order), len(shape_order) + 1) or not all(map(_positive_size, value)):
            order = ", ".join(shape_order)
            raise ValueError(f"expected {len(shape_order)} positive sizes [{order}], or {len(shape_order) + 1} with a "
                             f"leading batch size [B, {order}], got {value!r}")
        batch = tuple(value[: len(value) - len(shape_order)])
        return ProblemShape(tuple(zip(shape_order, value[len(batch):])), batch)
    if not isinstance(value, dict) or not value:
        raise ValueError(f"expected a table of named dimensions such as {{ M = 8, N = 8 }} or a list of sizes, "
                         f"got {value!r}")
    batch = value.get(BATCH_KEY, [])
    batch = [batch] if isinstance(batch, int) and not isinstance(batch, bool) else batch
    if not (isinstance(batch, list) and all(map(_positive_size, batch))):
        raise ValueError(f"{BATCH_KEY}: expected a positive size or a list of them, got {value[BATCH_KEY]!r}")
    dims = tuple((name, size) for name, size in value.items() if name != BATCH_KEY)
    for name, size in dims:
        if not name.isidentifier():
            raise ValueError(f"{name!r} is not a dimension name")
        if not _positive_size(size):
            raise ValueError(f"{name}: expected a positive size, got {size!r}")
    return ProblemShape(dims, tuple(batch))


def _shape_text(text: str) -> list[Any] | dict[str, Any]:
    """``"M=512,N=512"`` as a table (``batch=2x3`` as a list), ``"512x512x512"`` as a list; sizes that are not
    integers stay text, for :func:`parse_problem_shape` to reject by name."""

    def size(part: str) -> Any:
        try:
            return int(part)
        except ValueError:
            return part

    text = text.strip()
    if "=" not in text:
        return [size(part) for part in text.lower().split("x")]
    table: dict[str, Any] = {}
    for item in text.split(","):
        name, equals, sizes = (part.strip() for part in item.partition("="))
        if not equals or not name:
            raise ValueError(f"expected NAME=SIZE items separated by commas, got {item.strip()!r}")
        if name in table:
            raise ValueError(f"{name} is given twice")
        table[name] = [size(part) for part in sizes.split("x")] if name == BATCH_KEY else size(sizes)
    return table


@dataclass(frozen=True)
class InputDeclaration:
    """How the input generator fills one tensor (``[inputs.<tensor>]``): a ``kind`` of :data:`INPUT_KINDS`, and
    for ``"offsets"`` the dimension its last value equals (``total``)."""

    kind: str
    total: str = ""


@dataclass(frozen=True)
class ShapeSuite:
    """Named problem shapes for ``kabi tune --suite`` and ``kabi bench``; ``layouts`` (default ``("row_major",)``)
    lists the operand layouts each shape is benchmarked in, ``routings`` (``SUITE_ROUTING_NAMES``; none for an op
    without groups) how a grouped op's rows are spread over its groups."""

    name: str
    description: str
    shapes: tuple[ProblemShape, ...]
    dtypes: tuple[str, ...]
    layouts: tuple[str, ...] = ("row_major",)
    routings: tuple[str, ...] = ()


@dataclass(frozen=True)
class OpSpec:
    """One ``registry/ops/<op>.toml``. The schema text is the core's to parse (``_core.op_schema`` gives the parsed
    form); ``type_variables`` is the ``[types]`` table, each type variable with the dtypes it may take."""

    name: str
    summary: str
    schema: str
    type_variables: Mapping[str, tuple[str, ...]]
    reference: str
    tolerance: Mapping[str, Tolerance]
    tuning_key: str
    suites: Mapping[str, ShapeSuite]
    path: Path
    # Inputs that may be vectors, each with the dimension a vector lacks (kabi.ops._schema.VectorPromotion).
    vectors: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # The order of the dimensions in a shape given as a list ([M, N, K] for matmul), after an optional batch size.
    shape_order: tuple[str, ...] = ()
    # The input generator (``[inputs]``): a whole-op ``"module:function"``, and per tensor how to fill it.
    input_generator: str = ""
    inputs: Mapping[str, InputDeclaration] = dataclasses.field(default_factory=dict)
    # True with the [gradient] table, False for ``differentiable = false``, None where the file declares neither.
    differentiable: bool | None = None
    gradient: GradientSpec | None = None
    # How the ranks of a distributed job share the measuring (``[tuning] distributed``; kabi._selection.distributed).
    distributed_tuning: str = "split"

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The dtypes of the first type variable (for matmul, ``T``: the dtype of every tensor)."""
        return next(iter(self.type_variables.values()), ())

    @property
    def problem_dtypes(self) -> tuple[str, ...]:
        """The dtypes a suite or ``--dtype`` may name: any type variable's (each is given to every variable that
        may take it; scaled_mm's float8_e4m3fn binds its operands' variables)."""
        return _any_variable_dtypes(self.type_variables)

    @property
    def type_variables_text(self) -> str:
        """The ``[types]`` table in kabi.h's type_variables syntax, ``"T: float16, float32"``, for the core."""
        return "; ".join(f"{name}: {', '.join(dtypes)}" for name, dtypes in self.type_variables.items())


@dataclass(frozen=True)
class KernelSpec:
    """One ``[[kernels]]`` entry of ``registry/kernels/<backend>/<op>.toml``.

    A kernel registered by a native plugin names the ``plugin``; a Python kernel names its ``implementation``
    as ``"module:attribute"``.
    """

    op: str
    name: str
    backend: str
    device: str
    dtypes: tuple[str, ...]
    # For every input; ("any",) where ``input_layouts`` gives them per input.
    layouts: tuple[str, ...]
    batch_mode: str
    # Per input it names (``layouts = { a = ["contiguous"], b = ["col_strided"] }``), the layouts it takes; an input
    # the table leaves out takes any.
    input_layouts: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    # Per type variable, the dtypes the kernel accepts where they differ from ``dtypes``.
    type_constraints: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    features: tuple[str, ...] = ()
    archs: tuple[int, ...] = ()
    arch_min: int = 0
    arch_max: int = 0
    alignment: int = 0
    priority: int = 0
    plugin: str = ""
    implementation: str = ""
    # A Python kernel's supports predicate, ``"module:function"`` taking the problem: what its declaration above
    # cannot say (a layout one input needs, a size multiple), True or the reason it declines.
    supports: str = ""
    fingerprint: str = ""
    path: Path = Path()

    @property
    def layouts_argument(self) -> str | tuple[str, ...] | Mapping[str, tuple[str, ...]]:
        """``layouts`` as ``kabi.register_kernel`` takes it: "any", the names, or the per-input table."""
        if self.input_layouts:
            return dict(self.input_layouts)
        return "any" if "any" in self.layouts else self.layouts


def _positive(value: float) -> str | None:
    return None if value > 0 else f"expected a positive number, got {value!r}"


def _identifier(value: str) -> str | None:
    return None if value and value.strip() == value else f"expected a non-empty name, got {value!r}"


@functools.lru_cache(maxsize=None)
def load_op_file(path: Path) -> OpSpec:
    """Parse and validate one op file; its ``name`` must be the file's name."""
    return _op_spec(TableReader(path, parse_toml(path)), path.stem)


def read_op_declaration(source: str | Path) -> OpSpec:
    """Parse and validate an op declaration given as a path to its ``.toml`` file (a ``Path``, or a string naming
    an existing file) or as its TOML text, with the same fields, checks and messages as ``registry/ops/*.toml``
    (text is reported as ``<op declaration text>``).

    Example::

        >>> read_op_declaration(registry_root() / "ops" / "matmul.toml").name
        'matmul'
    """
    if isinstance(source, Path) or (isinstance(source, str) and "\n" not in source and source.endswith(".toml")):
        path = Path(source)
        if not path.is_file():
            raise NotFoundError(f"op declaration {str(path)!r}: no such file")
        return load_op_file(path.resolve())
    if not isinstance(source, str):
        raise ArgumentTypeError(f"expected an op declaration's TOML text or path, got {type(source).__name__}")
    return _op_spec(TableReader(TEXT_SOURCE, parse_toml(TEXT_SOURCE, source)), None)


def _op_spec(root: TableReader, file_stem: str | None) -> OpSpec:
    path = root.path
    name = root.get("name", str, check=_identifier)
    if file_stem is not None and name != file_stem:
        raise root.fail("name", f"{name!r} must match the file name {file_stem!r}")
    type_variables = _type_table(root, "types")
    if not type_variables:
        raise root.fail("types", "declares no type variable; expected a table such as T = [\"float32\"]")
    dtypes = next(iter(type_variables.values()))
    tolerance_table = root.child("tolerance")
    tolerance = {}
    for dtype in dtypes:
        if dtype in EXACT_DTYPES:
            if dtype in tolerance_table.table:
                raise tolerance_table.fail(dtype, f"{dtype} results are compared exactly; remove this tolerance")
            tolerance[dtype] = Tolerance(0.0, 0.0)
            continue
        entry = tolerance_table.child(dtype)
        tolerance[dtype] = Tolerance(entry.get("norm", (int, float), check=_positive), entry.get("extreme", (int, float), check=_positive))
        entry.finish()
    tolerance_table.finish()
    tuning = root.child("tuning")
    tuning_key = tuning.get("key", str, check=_identifier)
    distributed_tuning = tuning.get("distributed", str, DISTRIBUTED_TUNING_STRATEGIES[0],
                                    check=lambda value: None if value in DISTRIBUTED_TUNING_STRATEGIES else
                                    f"expected one of {', '.join(DISTRIBUTED_TUNING_STRATEGIES)}, got {value!r}")
    tuning.finish()
    shape_order = tuple(root.get("shape_order", list, [], check=_dimension_names))
    suites = {}
    suites_table = root.child("suites") if "suites" in root.table else None
    for suite_name in suites_table.table if suites_table else ():
        suite = suites_table.child(suite_name)
        shapes = []
        for index, shape in enumerate(suite.get("shapes", list)):
            try:
                shapes.append(parse_problem_shape(shape, shape_order))
            except ValueError as error:
                raise suite.fail(f"shapes[{index}]", str(error)) from None
        layouts = suite.names("layouts", SUITE_LAYOUT_NAMES, ["row_major"])
        if not layouts or len(set(layouts)) != len(layouts):
            raise suite.fail("layouts", f"expected distinct layout names, at least one, got {list(layouts)!r}")
        routings = suite.names("routings", SUITE_ROUTING_NAMES, [])
        if len(set(routings)) != len(routings):
            raise suite.fail("routings", f"expected distinct routing names, got {list(routings)!r}")
        suites[suite_name] = ShapeSuite(
            suite_name, suite.get("description", str), tuple(shapes),
            suite.names("dtypes", _any_variable_dtypes(type_variables)), layouts, routings,
        )
        suite.finish()
    spec = OpSpec(
        name=name,
        summary=root.get("summary", str, check=_identifier),
        schema=root.get("schema", str, check=lambda s: None if "->" in s else "expected 'inputs -> outputs'"),
        type_variables=type_variables,
        reference=root.get("reference", str, check=_identifier),
        tolerance=tolerance,
        tuning_key=tuning_key,
        distributed_tuning=distributed_tuning,
        suites=suites,
        path=path,
        vectors=_vectors(root),
        shape_order=shape_order,
        **_inputs(root),
        **_gradient_declaration(root, name),
    )
    root.finish()
    return spec


def _any_variable_dtypes(type_variables: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(dtype for allowed in type_variables.values() for dtype in allowed))


def _dimension_names(names: list[Any]) -> str | None:
    if all(isinstance(name, str) and name.isidentifier() and name != BATCH_KEY for name in names) and \
            len(set(names)) == len(names):
        return None
    return f"expected distinct dimension names of the schema, such as [\"M\", \"N\", \"K\"], got {names!r}"


def _inputs(root: TableReader) -> dict[str, Any]:
    """The ``[inputs]`` table: ``generator = "module:function"`` for the whole op, and ``[inputs.<tensor>]`` tables
    each with a ``kind`` (and ``total`` for ``"offsets"``). Tensor names are the core's to check against the
    schema, when the generator runs."""
    if "inputs" not in root.table:
        return {}
    table = root.child("inputs")
    generator = table.get("generator", str, "", check=lambda s: None if s.count(":") == 1 else "expected 'module:function'")
    declarations = {}
    for name, value in table.table.items():
        if name == "generator":
            continue
        if not isinstance(value, dict):
            raise table.fail(name, f"expected a table such as {{ kind = \"positive\" }}, got {value!r}")
        entry = table.child(name)
        kind = entry.get("kind", str, check=lambda k: None if k in INPUT_KINDS else f"{k!r} is not one of {', '.join(INPUT_KINDS)}")
        total = entry.get("total", str, "", check=lambda d: None if d.isidentifier() else f"expected a dimension name, got {d!r}")
        if (kind == "offsets") != bool(total):
            raise entry.fail("total", "an \"offsets\" tensor names the dimension its last value equals (total = \"M\"); "
                                      "other kinds take no total")
        entry.finish()
        declarations[name] = InputDeclaration(kind, total)
    table.finish()
    return {"input_generator": generator, "inputs": declarations}


def _kernel_layouts(entry: TableReader) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """A kernel's ``layouts``: a list of layout names for every input, or a table of them per input name (checked
    against the op's inputs when the kernel registers). Returns (every input's, per input's)."""
    if not isinstance(entry.table.get("layouts"), dict):
        return entry.names("layouts", LAYOUT_NAMES), {}
    table = entry.get("layouts", dict)
    for name, names in table.items():
        if not (isinstance(names, list) and names):
            raise entry.fail(f"layouts.{name}", f"expected a non-empty list of layout names, got {names!r}")
        for index, layout in enumerate(names):
            if layout not in LAYOUT_NAMES:
                raise entry.fail(f"layouts.{name}[{index}]", f"{layout!r} is not one of {', '.join(LAYOUT_NAMES)}")
    return ("any",), {name: tuple(names) for name, names in table.items()}


def _type_table(reader: TableReader, field: str) -> dict[str, tuple[str, ...]]:
    """A table of type variables, each a list of dtype names: ``[types]`` of an op, ``type_constraints`` of a
    kernel. The names are the core's to check against the schema."""
    table = reader.get(field, dict, {})
    for name, dtypes in table.items():
        if not (isinstance(dtypes, list) and dtypes):
            raise reader.fail(f"{field}.{name}", f"expected a non-empty list of dtype names, got {dtypes!r}")
        for index, dtype in enumerate(dtypes):
            if dtype not in DTYPE_NAMES:
                raise reader.fail(f"{field}.{name}[{index}]", f"{dtype!r} is not one of {', '.join(DTYPE_NAMES)}")
    return {name: tuple(dtypes) for name, dtypes in table.items()}


def _vectors(root: TableReader) -> dict[str, str]:
    """The op's ``vectors`` table: input name -> the dimension a vector given for it lacks."""
    table = root.get("vectors", dict, {})
    for name, dim in table.items():
        if not (isinstance(dim, str) and dim.isidentifier()):
            raise root.fail(f"vectors.{name}", f"expected a dimension name of the schema, got {dim!r}")
    return dict(table)


def _gradient_declaration(root: TableReader, op: str) -> dict[str, Any]:
    """``differentiable`` and ``gradient`` of an op file, checked against the op's schema as the core parsed it."""
    differentiable = root.get("differentiable", bool, None)
    if "gradient" not in root.table:
        if differentiable:
            raise root.fail("differentiable", "true, but the file has no [gradient] table to say how")
        return {"differentiable": differentiable}
    if differentiable is False:
        raise root.fail("differentiable", "false, but the file has a [gradient] table; remove one of them")
    table = root.get("gradient", dict)
    try:
        schema = _core.op_schema(op)
    except NotFoundError:
        raise root.fail("gradient", f"op {op} is not registered in libkabi, whose schema the gradient is checked "
                                    "against") from None
    ops = {path.stem for path in (registry_root() / "ops").glob("*.toml")} | {op}
    return {"differentiable": True, "gradient": parse_gradient(root.path, table, schema, ops)}


@functools.lru_cache(maxsize=None)
def load_kernel_file(path: Path) -> tuple[KernelSpec, ...]:
    """Parse and validate one kernel declaration file (a list of ``[[kernels]]`` tables)."""
    root = TableReader(path, parse_toml(path))
    entries = root.get("kernels", list)
    root.finish()
    specs = []
    for index, table in enumerate(entries):
        if not isinstance(table, dict):
            raise root.fail(f"kernels[{index}]", "expected a table")
        entry = TableReader(path, table, f"kernels[{index}].")
        archs = entry.get("archs", list, [])
        for arch_index, arch in enumerate(archs):
            if not isinstance(arch, int) or isinstance(arch, bool) or arch <= 0:
                raise entry.fail(f"archs[{arch_index}]", f"expected a positive integer such as 90, got {arch!r}")
        layouts, input_layouts = _kernel_layouts(entry)
        spec = KernelSpec(
            op=entry.get("op", str, check=_identifier),
            name=entry.get("name", str, check=_identifier),
            backend=entry.get("backend", str, check=_identifier),
            device=entry.get("device", str, check=lambda d: None if d in DEVICE_NAMES else f"{d!r} is not one of {', '.join(DEVICE_NAMES)}"),
            dtypes=entry.names("dtypes", DTYPE_NAMES),
            layouts=layouts,
            input_layouts=input_layouts,
            batch_mode=entry.get("batch_mode", str, check=lambda m: None if m in BATCH_MODE_NAMES else f"{m!r} is not one of {', '.join(BATCH_MODE_NAMES)}"),
            type_constraints=_type_table(entry, "type_constraints"),
            features=tuple(entry.get("features", list, [])),
            archs=tuple(archs),
            arch_min=entry.get("arch_min", int, 0, check=lambda v: None if v >= 0 else "expected 0 or more"),
            arch_max=entry.get("arch_max", int, 0, check=lambda v: None if v >= 0 else "expected 0 or more"),
            alignment=entry.get("alignment", int, 0, check=lambda v: None if v >= 0 else "expected 0 or more"),
            priority=entry.get("priority", int, 0),
            plugin=entry.get("plugin", str, ""),
            implementation=entry.get("implementation", str, "", check=lambda s: None if s.count(":") == 1 else "expected 'module:attribute'"),
            supports=entry.get("supports", str, "",
                               check=lambda s: None if s.count(":") == 1 else "expected 'module:function'"),
            fingerprint=entry.get("fingerprint", str, ""),
            path=path,
        )
        if bool(spec.plugin) == bool(spec.implementation):
            raise entry.fail("implementation", "a kernel names exactly one of `plugin` (native) or `implementation` (Python)")
        if spec.supports and not spec.implementation:
            raise entry.fail("supports", "only a Python kernel (one with an `implementation`) takes a supports "
                                         "predicate")
        if spec.arch_max and spec.arch_min > spec.arch_max:
            raise entry.fail("arch_min", f"{spec.arch_min} is above arch_max {spec.arch_max}")
        entry.finish()
        specs.append(spec)
    return tuple(specs)


@functools.lru_cache(maxsize=None)
def registry_root() -> Path:
    """The ``registry`` directory: inside the installed package, or the source checkout's in an editable install."""
    package = Path(__file__).resolve().parent
    candidates = [package / "registry", package.parent.parent / "registry"]
    try:
        from .. import _core

        candidates.insert(0, Path(_core.__file__).resolve().parent / "registry")
    except ImportError:
        pass
    for candidate in candidates:
        if (candidate / "ops").is_dir():
            return candidate
    raise NotFoundError(f"kabi cannot find its registry data; looked in {', '.join(map(str, candidates))}")


def op_specs() -> dict[str, OpSpec]:
    """Every op declared under ``registry/ops``, by name."""
    return {spec.name: spec for spec in map(load_op_file, sorted((registry_root() / "ops").glob("*.toml")))}


def op_spec(name: str) -> OpSpec:
    """The declaration of one op; ``NotFoundError`` naming the known ops otherwise."""
    specs = op_specs()
    try:
        return specs[name]
    except KeyError:
        raise NotFoundError(f"unknown op {name!r}; registry/ops declares {', '.join(specs) or 'none'}") from None


def op_name_of(op: Any) -> str:
    """The op name of a name or of a ``kabi.ops`` function; ``ArgumentTypeError`` for anything else."""
    if isinstance(op, str):
        return op
    if getattr(op, "__module__", None) == "kabi.ops" and isinstance(getattr(op, "__name__", None), str):
        return op.__name__
    raise ArgumentTypeError(f"expected an op name or a kabi.ops function, got {type(op).__name__}")


def resolve_callable(dotted: str) -> Callable[..., Any]:
    """The function a declaration names, as ``"module:function"`` or dotted (``"torch.matmul"``): an op's reference,
    a kernel's implementation, an input generator."""
    module_name, _, attribute = dotted.replace(":", ".").rpartition(".")
    return getattr(importlib.import_module(module_name), attribute)


def kernel_specs(backend: str | None = None) -> tuple[KernelSpec, ...]:
    """Every kernel declared under ``registry/kernels`` (or under one backend's directory)."""
    directory = registry_root() / "kernels"
    pattern = f"{backend}/*.toml" if backend else "*/*.toml"
    return tuple(spec for path in sorted(directory.glob(pattern)) for spec in load_kernel_file(path))
