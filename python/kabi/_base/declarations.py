"""The registry data under ``registry/``: op declarations (``ops/<op>.toml``) and built-in kernel declarations
(``kernels/<backend>/<op>.toml``), parsed into frozen dataclasses and validated field by field.

This module is the schema: every field, its type and its allowed values are checked here, and a bad file fails
with ``RegistryError`` naming the file and the field (``registry/ops/matmul.toml: tolerance.float32.norm: expected
a positive number, got -1``). Files are parsed once per process.

Example::

    >>> from kabi._base.declarations import op_spec
    >>> op_spec("matmul").tolerance["float32"].norm
    2e-05
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from .. import _core
from .errors import ArgumentTypeError, InvalidArgumentError, NotFoundError

__all__ = [
    "KernelSpec",
    "OpSpec",
    "RegistryError",
    "ShapeSuite",
    "Tolerance",
    "kernel_specs",
    "load_kernel_file",
    "load_op_file",
    "read_op_declaration",
    "op_name_of",
    "op_spec",
    "op_specs",
    "registry_root",
]

# The core's dtype vocabulary (csrc/core/names.cpp), in the order of its KABI_DTYPE_* bits.
DTYPE_NAMES = tuple(_core.DTYPES)
# Integer results are compared exactly by the correctness gate: these dtypes take no tolerance.
EXACT_DTYPES = frozenset({"uint8", "int8", "int16", "int32", "int64"})
LAYOUT_NAMES = ("contiguous", "row_strided", "col_strided", "general", "any")
BATCH_MODE_NAMES = ("none", "uniform", "any")
DEVICE_NAMES = ("cpu", "cuda", "rocm", "mps", "xpu")
# How a suite lays out the second operand: "row_major" is b as a contiguous [..., K, N]; "transposed_b" is b as the
# transposed view of a contiguous [..., N, K], the layout of an nn.Linear weight.
SUITE_LAYOUT_NAMES = ("row_major", "transposed_b")


class RegistryError(InvalidArgumentError):
    """A registry file that does not follow the schema; the message names the file and the field."""


@dataclass(frozen=True)
class Tolerance:
    """The correctness gate of one dtype: relative Frobenius error and relative max error, both upper bounds."""

    norm: float
    extreme: float


@dataclass(frozen=True)
class ShapeSuite:
    """Named problem shapes ([M, N, K] or [B, M, N, K] for matmul) for ``kabi tune --suite`` and ``kabi bench``;
    ``layouts`` (default ``("row_major",)``) lists the operand layouts each shape is benchmarked in."""

    name: str
    description: str
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    layouts: tuple[str, ...] = ("row_major",)


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

    @property
    def dtypes(self) -> tuple[str, ...]:
        """The dtypes of the first type variable (for matmul, ``T``: the dtype of every tensor)."""
        return next(iter(self.type_variables.values()), ())

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
    layouts: tuple[str, ...]
    batch_mode: str
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
    fingerprint: str = ""
    path: Path = Path()


class _Reader:
    """Typed access to one TOML table that reports the file and the dotted field path on any mistake."""

    def __init__(self, path: Path, table: Mapping[str, Any], prefix: str = "") -> None:
        self.path, self.table, self.prefix = path, table, prefix
        self.used: set[str] = set()

    def fail(self, field: str, message: str) -> RegistryError:
        return RegistryError(f"{_display(self.path)}: {self.prefix}{field}: {message}")

    def get(self, field: str, kind: type | tuple[type, ...], default: Any = ..., check: Callable[[Any], str | None] | None = None) -> Any:
        self.used.add(field)
        if field not in self.table:
            if default is ...:
                raise self.fail(field, "missing (required)")
            return default
        value = self.table[field]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, float, (int, float))):
            expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise self.fail(field, f"expected {expected}, got {value!r}")
        problem = check(value) if check is not None else None
        if problem:
            raise self.fail(field, problem)
        return value

    def names(self, field: str, allowed: tuple[str, ...], default: Any = ...) -> tuple[str, ...]:
        values = self.get(field, list, default)
        for index, value in enumerate(values):
            if value not in allowed:
                raise self.fail(f"{field}[{index}]", f"{value!r} is not one of {', '.join(allowed)}")
        return tuple(values)

    def child(self, field: str) -> _Reader:
        return _Reader(self.path, self.get(field, dict), f"{self.prefix}{field}.")

    def finish(self) -> None:
        unknown = sorted(set(self.table) - self.used)
        if unknown:
            raise self.fail(unknown[0], "unknown field")


# The path an op declaration given as text is reported under, in place of a file name.
TEXT_SOURCE = Path("<op declaration text>")


def _display(path: Path) -> str:
    if path == TEXT_SOURCE:
        return str(path)
    parts = path.parts
    return "/".join(parts[parts.index("registry"):]) if "registry" in parts else str(path)


def _positive(value: float) -> str | None:
    return None if value > 0 else f"expected a positive number, got {value!r}"


def _identifier(value: str) -> str | None:
    return None if value and value.strip() == value else f"expected a non-empty name, got {value!r}"


def _parse(path: Path, text: str | None = None) -> dict[str, Any]:
    """The TOML table of a file, or of ``text`` (reported as ``path``)."""
    try:
        if text is not None:
            return tomllib.loads(text)
        with path.open("rb") as file:
            return tomllib.load(file)
    except tomllib.TOMLDecodeError as error:
        raise RegistryError(f"{_display(path)}: not valid TOML: {error}") from None


@functools.lru_cache(maxsize=None)
def load_op_file(path: Path) -> OpSpec:
    """Parse and validate one op file; its ``name`` must be the file's name."""
    return _op_spec(_Reader(path, _parse(path)), path.stem)


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
    return _op_spec(_Reader(TEXT_SOURCE, _parse(TEXT_SOURCE, source)), None)


def _op_spec(root: _Reader, file_stem: str | None) -> OpSpec:
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
    tuning.finish()
    suites = {}
    suites_table = root.child("suites") if "suites" in root.table else None
    for suite_name in suites_table.table if suites_table else ():
        suite = suites_table.child(suite_name)
        shapes = suite.get("shapes", list)
        for index, shape in enumerate(shapes):
            if not (isinstance(shape, list) and shape and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)):
                raise suite.fail(f"shapes[{index}]", f"expected a list of positive integers, got {shape!r}")
        layouts = suite.names("layouts", SUITE_LAYOUT_NAMES, ["row_major"])
        if not layouts or len(set(layouts)) != len(layouts):
            raise suite.fail("layouts", f"expected distinct layout names, at least one, got {list(layouts)!r}")
        suites[suite_name] = ShapeSuite(
            suite_name, suite.get("description", str), tuple(tuple(s) for s in shapes), suite.names("dtypes", tuple(dtypes)),
            layouts,
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
        suites=suites,
        path=path,
        vectors=_vectors(root),
    )
    root.finish()
    return spec


def _type_table(reader: _Reader, field: str) -> dict[str, tuple[str, ...]]:
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


def _vectors(root: _Reader) -> dict[str, str]:
    """The op's ``vectors`` table: input name -> the dimension a vector given for it lacks."""
    table = root.get("vectors", dict, {})
    for name, dim in table.items():
        if not (isinstance(dim, str) and dim.isidentifier()):
            raise root.fail(f"vectors.{name}", f"expected a dimension name of the schema, got {dim!r}")
    return dict(table)


@functools.lru_cache(maxsize=None)
def load_kernel_file(path: Path) -> tuple[KernelSpec, ...]:
    """Parse and validate one kernel declaration file (a list of ``[[kernels]]`` tables)."""
    root = _Reader(path, _parse(path))
    entries = root.get("kernels", list)
    root.finish()
    specs = []
    for index, table in enumerate(entries):
        if not isinstance(table, dict):
            raise root.fail(f"kernels[{index}]", "expected a table")
        entry = _Reader(path, table, f"kernels[{index}].")
        archs = entry.get("archs", list, [])
        for arch_index, arch in enumerate(archs):
            if not isinstance(arch, int) or isinstance(arch, bool) or arch <= 0:
                raise entry.fail(f"archs[{arch_index}]", f"expected a positive integer such as 90, got {arch!r}")
        spec = KernelSpec(
            op=entry.get("op", str, check=_identifier),
            name=entry.get("name", str, check=_identifier),
            backend=entry.get("backend", str, check=_identifier),
            device=entry.get("device", str, check=lambda d: None if d in DEVICE_NAMES else f"{d!r} is not one of {', '.join(DEVICE_NAMES)}"),
            dtypes=entry.names("dtypes", DTYPE_NAMES),
            layouts=entry.names("layouts", LAYOUT_NAMES),
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
            fingerprint=entry.get("fingerprint", str, ""),
            path=path,
        )
        if bool(spec.plugin) == bool(spec.implementation):
            raise entry.fail("implementation", "a kernel names exactly one of `plugin` (native) or `implementation` (Python)")
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


def kernel_specs(backend: str | None = None) -> tuple[KernelSpec, ...]:
    """Every kernel declared under ``registry/kernels`` (or under one backend's directory)."""
    directory = registry_root() / "kernels"
    pattern = f"{backend}/*.toml" if backend else "*/*.toml"
    return tuple(spec for path in sorted(directory.glob(pattern)) for spec in load_kernel_file(path))
