"""An op's schema as data, and its shape rule.

The core parses the schema text once (``"a: [..., M, K] T, b: [..., K, N] T -> out: [..., M, N] T"``, kabi.h's
kabi_op_desc); :func:`op_schema` reads its parsed form through ``_core.op_schema``, so Python never parses schema
text. Each tensor names its dimensions: a name (``M``) must agree wherever it appears, and a leading ``...`` stands
for batch dimensions that broadcast across inputs as in torch (right-aligned, a size 1 stretches). A dimension may
be a literal ``1``, and an input may list other shapes it may have (``scale_a: [M, 1] | []``: a row-wise or a
per-tensor scale), which a call's rank picks. The output shapes follow from the sizes the inputs bind. A first
dimension written ``E?`` may be left out (grouped_mm's ``x`` is ``[T, K]`` or ``[E, M, K]``), and an output's ``E?``
is there exactly when the inputs have it; an optional input with a presence condition (``offs?(x.rank == 2)``) is
given exactly when it holds.

An op may also take a vector where a tensor has no batch and one named dimension less (torch.matmul's rule, the
op's ``vectors``: ``{"a": "M", "b": "N"}``): the missing dimension is taken as size 1, and every output drops it, so
for matmul a vector @ matrix is a vector and a vector @ vector a 0-d tensor (:class:`VectorPromotion`).

The rule runs on plain ints and on torch's symbolic sizes alike (comparisons of ``SymInt`` become guards; sizes
known only at run time are assumed not to be 1, as torch's own broadcasting does, and to agree, which torch then
checks), which is what a fake implementation under ``torch.compile`` needs: no data, no call into the core.

Example::

    >>> schema = op_schema("matmul")
    >>> schema.input_names
    ('a', 'b')
    >>> schema.output_shapes("matmul", [(2, 1, 4, 3), (5, 3, 6)])
    [(2, 5, 4, 6)]
    >>> op_schema("matmul", (("a", "M"), ("b", "N"))).output_shapes("matmul", [(3,), (5, 3, 6)])
    [(5, 6)]
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch

from .. import _core
from .._base.errors import ArgumentTypeError, InvalidArgumentError, UnsupportedDtypeError
from .._base.tensors import known_torch_dtype

__all__ = ["Attribute", "OpSchema", "TensorPattern", "VectorPromotion", "op_schema"]

BATCH = "..."
# A dimension that is a literal 1 in the schema ("[1, N]"), as the core reports it.
ONE = "1"


@dataclass(frozen=True)
class TensorPattern:
    """One tensor of a schema: its name, whether it has leading batch dimensions, its named trailing dims, whether
    it is an optional input, and its dtype: a type variable's name, or a concrete dtype's."""

    name: str
    batched: bool
    dims: tuple[str, ...]
    optional: bool = False
    dtype: str = ""
    # The other shapes the input may have instead of dims (``[M, 1] | []``), each of its own rank.
    alternative_shapes: tuple[tuple[str, ...], ...] = ()
    leading_dim_optional: bool = False
    present_with: tuple[str, int] | None = None
    offsets_of: str | None = None

    @property
    def shapes(self) -> tuple[tuple[str, ...], ...]:
        return (self.dims, *self.alternative_shapes)

    @property
    def dims_text(self) -> str:
        """The dimensions as written in the schema: ``[..., M, K]``, ``[E?, M, K]``; ``[M, 1] or []`` for several
        shapes."""
        dims = list(self.dims)
        if self.leading_dim_optional:
            dims[0] += "?"
        first = f"[{', '.join(([BATCH] if self.batched else []) + dims)}]"
        return " or ".join([first] + [f"[{', '.join(shape)}]" for shape in self.alternative_shapes])

    def dims_for_rank(self, rank: int) -> tuple[str, ...] | None:
        """The dims a tensor of this rank names: its dims (without the first where it may be left out and is), or the
        alternative of that rank; None if no declared shape has that rank."""
        if rank == len(self.dims) or (self.batched and rank > len(self.dims)):
            return self.dims
        if self.leading_dim_optional and rank == len(self.dims) - 1:
            return self.dims[1:]
        return next((shape for shape in self.alternative_shapes if len(shape) == rank), None)

    def __str__(self) -> str:
        return f"{self.name}: {self.dims_text}"


@dataclass(frozen=True)
class Attribute:
    """One attribute of a schema: its name, its type (``"int"``, ``"float"``, ``"bool"`` or ``"enum"``), an enum's
    value names, and its default (``has_default`` False: the caller must pass it)."""

    name: str
    type: str
    enum_values: tuple[str, ...] = ()
    has_default: bool = False
    default: Any = None
    # For an enum of dtype names typed by a type variable (``out_dtype: O``): the variable its value binds.
    type_variable: str | None = None

    @property
    def expected(self) -> str:
        """What a value must be, for error messages: ``"a float"``, ``"one of none, relu"``."""
        if self.type == "enum":
            names = f"one of {', '.join(self.enum_values)}"
            return f"{names} (a name or the torch.dtype)" if self.type_variable is not None else names
        return {"int": "an int", "float": "a float", "bool": "a bool"}[self.type]

    @functools.cached_property
    def enum_aliases(self) -> tuple[torch.dtype | None, ...]:
        """Per enum value, the object a caller may pass for it instead of its name (None for none): an enum of dtype
        names typed by a type variable (``out_dtype: O``) takes each dtype as torch does, ``torch.bfloat16`` for
        ``"bfloat16"``, as ``torch._scaled_mm`` callers write it."""
        if self.type_variable is None:
            return (None,) * len(self.enum_values)
        return tuple(known_torch_dtype(name) for name in self.enum_values)

    @functools.cached_property
    def names_by_alias(self) -> dict[torch.dtype, str]:
        """Each alias's enum value name (empty for an attribute without aliases)."""
        return {alias: name for alias, name in zip(self.enum_aliases, self.enum_values) if alias is not None}

    def canonical(self, value: Any) -> Any:
        """``value`` as the schema names it: an enum value's alias becomes its name; anything else is returned as
        given, for :meth:`check` to judge."""
        return self.names_by_alias.get(value, value) if isinstance(value, torch.dtype) else value

    def accepts(self, value: Any) -> bool:
        """Whether ``value`` is a value of this attribute as Python callers pass it (an enum by its name)."""
        if self.type == "float":
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if self.type == "int":
            return isinstance(value, int) and not isinstance(value, bool)
        if self.type == "bool":
            return isinstance(value, bool)
        return isinstance(value, str) and value in self.enum_values

    def check(self, op: str, value: Any) -> None:
        """Raise naming the attribute and what it takes unless ``value`` is one of its values:
        ``InvalidArgumentError`` for an unknown enum name, ``ArgumentTypeError`` for a value of another type."""
        if self.accepts(value):
            return
        if self.type == "enum" and (isinstance(value, str) or
                                    (self.type_variable is not None and isinstance(value, torch.dtype))):
            raise InvalidArgumentError(f"{op}: {self.name} must be {self.expected}; got {value!r}")
        raise ArgumentTypeError(f"{op}: {self.name} must be {self.expected}, got {value!r}")


@dataclass(frozen=True)
class VectorPromotion:
    """Vectors of one call as the tensors the schema names: the size-1 dimension each promoted input gains, and
    the dimensions each output loses, as positions counted from the end (``-2`` for ``M`` in ``[..., M, K]``).

    Example::

        >>> promotion = op_schema("matmul", (("a", "M"), ("b", "N"))).vector_promotion("matmul", [(3,), (3,)])
        >>> promotion.promote_input(0, torch.ones(3)).shape, promotion.demote_output(0, torch.ones(1, 1)).shape
        (torch.Size([1, 3]), torch.Size([]))
    """

    inputs: tuple[int | None, ...]
    outputs: tuple[tuple[int, ...], ...]

    def input_shape(self, index: int, shape: Sequence[Any]) -> tuple[Any, ...]:
        position = self.inputs[index]
        if position is None:
            return tuple(shape)
        cut = len(shape) + 1 + position
        return (*shape[:cut], 1, *shape[cut:])

    def output_shape(self, index: int, shape: Sequence[Any]) -> tuple[Any, ...]:
        dropped = {len(shape) + position for position in self.outputs[index]}
        return tuple(size for axis, size in enumerate(shape) if axis not in dropped)

    def promote_input(self, index: int, tensor: torch.Tensor) -> torch.Tensor:
        position = self.inputs[index]
        return tensor if position is None else tensor.unsqueeze(position)

    def promote_output(self, index: int, tensor: torch.Tensor) -> torch.Tensor:
        """A caller's ``out`` as a view of the rank the kernels write."""
        full_rank = tensor.dim() + len(self.outputs[index])
        for position in sorted(self.outputs[index]):
            tensor = tensor.unsqueeze(full_rank + position)
        return tensor

    def demote_output(self, index: int, tensor: torch.Tensor) -> torch.Tensor:
        positions = self.outputs[index]
        return tensor.squeeze(positions) if positions else tensor


@dataclass(frozen=True)
class OpSchema:
    """A parsed schema: input and output tensor patterns, attributes, type variables (name -> the dtypes it may
    take, in the core's order, which is the order of a problem's ``type_bindings``), which inputs may be vectors
    (input name -> the dimension a vector lacks), and the op's tuning key as the core parsed it: the field each
    item reads (``dtype``, ``layout``, ``batch``, a dimension or an attribute), in the order of a problem key."""

    inputs: tuple[TensorPattern, ...]
    outputs: tuple[TensorPattern, ...]
    vectors: tuple[tuple[str, str], ...] = ()
    attributes: tuple[Attribute, ...] = ()
    type_variables: tuple[tuple[str, tuple[str, ...]], ...] = ()
    tuning_key: tuple[str, ...] = ()

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(pattern.name for pattern in self.inputs)

    @property
    def value_checked_inputs(self) -> tuple[str, ...]:
        """The inputs whose values the core checks where the host can read them (``offsets(R)``)."""
        return tuple(pattern.name for pattern in self.inputs if pattern.offsets_of is not None)

    @property
    def attribute_names(self) -> tuple[str, ...]:
        return tuple(attribute.name for attribute in self.attributes)

    def canonical_attributes(self, values: Sequence[Any]) -> tuple:
        """Attribute values in schema order as the schema names them (:meth:`Attribute.canonical`)."""
        return tuple(attribute.canonical(value) for attribute, value in zip(self.attributes, values))

    def generated_dims(self, name: str, present: Any) -> tuple[str, ...]:
        """The dims a made-up input ``name`` has when the optional inputs in ``present`` are given: a first dim that
        may be left out (``[E?, R, K]``) is left out exactly when an optional input whose presence condition asks
        for this input's shorter rank is given (grouped_mm's ``x`` without ``E`` when ``offs`` is given)."""
        pattern = next(pattern for pattern in self.inputs if pattern.name == name)
        if not pattern.leading_dim_optional:
            return pattern.dims
        for other in self.inputs:
            if other.present_with is not None and other.present_with[0] == name:
                shorter = other.present_with[1] == len(pattern.dims) - 1
                return pattern.dims[1:] if shorter == (other.name in present) else pattern.dims
        return pattern.dims

    def complete_inputs(self, given: tuple) -> tuple:
        """Every input in schema order: torch's dispatcher hands a custom op's kernels only the inputs a call gave,
        leaving out trailing optional ones, which are None here."""
        return given + (None,) * (len(self.inputs) - len(given))

    def output_dtypes(self, type_bindings: Sequence[str]) -> tuple[str, ...]:
        """Each output's dtype name, given the dtype each type variable is bound to (a problem's ``type_bindings``,
        in the order of ``type_variables``)."""
        bound = {name: dtype for (name, _), dtype in zip(self.type_variables, type_bindings)}
        return tuple(bound.get(pattern.dtype, pattern.dtype) for pattern in self.outputs)

    def attribute_dtypes(self, attributes: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
        """The type variables that attributes bind (``out_dtype: O``): variable -> (dtype, attribute name), from the
        values given in ``attributes`` or the defaults."""
        bound = {}
        for attribute in self.attributes:
            if attribute.type_variable is not None:
                bound[attribute.type_variable] = (attributes.get(attribute.name, attribute.default), attribute.name)
        return bound

    def bind_dtypes(self, op: str, dtypes: Sequence[str | None],
                    attributes: Mapping[str, Any] | None = None) -> dict[str, str]:
        """The dtype of each type variable given the inputs' dtype names (None for an absent input) and the
        attributes (those typed by a variable bind it first), checked as the core checks them: a variable takes one
        dtype among those it allows, and a concrete dtype must match. ``UnsupportedDtypeError`` naming the argument
        otherwise. For fake tensors, which never reach the core."""
        allowed = dict(self.type_variables)
        bound: dict[str, tuple[str, str]] = self.attribute_dtypes(attributes or {})
        for pattern, dtype in zip(self.inputs, dtypes):
            if dtype is None:
                continue
            if pattern.dtype not in allowed:
                if dtype != pattern.dtype:
                    raise UnsupportedDtypeError(f"{op}: {pattern.name} has dtype {dtype}; expected {pattern.dtype}")
                continue
            if pattern.dtype in bound and bound[pattern.dtype][0] != dtype:
                first_dtype, owner = bound[pattern.dtype]
                raise UnsupportedDtypeError(
                    f"{op}: {owner} has dtype {first_dtype} but {pattern.name} has {dtype}; both have type "
                    f"{pattern.dtype}, which takes one dtype"
                )
            if dtype not in allowed[pattern.dtype]:
                raise UnsupportedDtypeError(
                    f"{op}: {pattern.name}'s dtype {dtype} is not one of {', '.join(allowed[pattern.dtype])} "
                    f"(the dtypes of its type {pattern.dtype})"
                )
            bound.setdefault(pattern.dtype, (dtype, pattern.name))
        return {name: dtype for name, (dtype, _) in bound.items()}

    def vector_promotion(self, op: str, shapes: Sequence[Sequence[Any] | None]) -> VectorPromotion | None:
        """How vectors among inputs of these shapes become the schema's tensors; None when no input is a vector.
        ``InvalidArgumentError`` naming the argument when one that may be a vector has too few dimensions."""
        lacking = dict(self.vectors)
        positions: list[int | None] = []
        dropped: set[str] = set()
        for pattern, shape in zip(self.inputs, shapes):
            vector_rank = len(pattern.dims) - 1
            if pattern.name not in lacking or shape is None or len(shape) > vector_rank:
                positions.append(None)
                continue
            if len(shape) < vector_rank:
                raise InvalidArgumentError(
                    f"{op}: {pattern.name} has shape {list(shape)} (rank {len(shape)}); expected "
                    f"{pattern.dims_text} or a vector of rank {vector_rank} (without {lacking[pattern.name]})"
                )
            dim = lacking[pattern.name]
            positions.append(pattern.dims.index(dim) - len(pattern.dims))
            dropped.add(dim)
        if not dropped:
            return None
        outputs = tuple(
            tuple(index - len(pattern.dims) for index, dim in enumerate(pattern.dims) if dim in dropped)
            for pattern in self.outputs
        )
        return VectorPromotion(tuple(positions), outputs)

    def output_shapes(self, op: str, shapes: Sequence[Sequence[Any] | None]) -> list[tuple[Any, ...]]:
        """The output shapes for inputs of these shapes (None for an absent optional input);
        ``InvalidArgumentError`` naming the argument otherwise."""
        if len(shapes) != len(self.inputs):
            raise InvalidArgumentError(
                f"{op} takes {len(self.inputs)} inputs ({', '.join(self.input_names)}), got {len(shapes)}"
            )
        promotion = self.vector_promotion(op, shapes)
        if promotion is not None:
            full = self.output_shapes(op, [promotion.input_shape(i, shape) for i, shape in enumerate(shapes)])
            return [promotion.output_shape(i, shape) for i, shape in enumerate(full)]
        sizes: dict[str, tuple[Any, str, tuple]] = {}
        leading: list[tuple[str, tuple, tuple]] = []
        leading_given: dict[str, tuple[bool, str, tuple]] = {}
        for pattern, shape in zip(self.inputs, shapes):
            if shape is None:
                if not pattern.optional:
                    raise InvalidArgumentError(f"{op}: input {pattern.name} is required but was passed absent")
                continue
            shape = tuple(shape)
            dims = pattern.dims_for_rank(len(shape))
            if dims is None:
                ranks = " or ".join(str(len(alternative)) for alternative in pattern.shapes)
                if pattern.leading_dim_optional:
                    ranks = f"{len(pattern.dims) - 1} or {len(pattern.dims)}"
                expected = f"rank at least {ranks}" if pattern.batched else f"rank {ranks}"
                raise InvalidArgumentError(
                    f"{op}: {pattern.name} has shape {list(shape)} (rank {len(shape)}); "
                    f"expected {pattern.dims_text} ({expected})"
                )
            if pattern.leading_dim_optional:
                given = dims == pattern.dims
                first = leading_given.setdefault(pattern.dims[0], (given, pattern.name, shape))
                if first[0] != given:
                    raise InvalidArgumentError(
                        f"{op}: {first[1]} has shape {list(first[2])} but {pattern.name} has shape {list(shape)}: "
                        f"both have the dimension {pattern.dims[0]} or neither"
                    )
            named = len(dims)
            for position, (dim, size) in enumerate(zip(dims, shape[len(shape) - named:])):
                index = position - named
                if dim == ONE:
                    if _differ(size, 1):
                        raise InvalidArgumentError(f"{op}: {pattern.name} has shape {list(shape)}; expected "
                                                   f"{pattern.dims_text}: its dimension {index} must be 1")
                    continue
                if dim not in sizes:
                    sizes[dim] = (size, pattern.name, shape)
                elif _differ(size, sizes[dim][0]):
                    bound, owner, owner_shape = sizes[dim]
                    raise InvalidArgumentError(
                        f"{op}: {pattern.name} has shape {list(shape)} but {owner} has shape {list(owner_shape)}: "
                        f"{pattern.name}'s dimension {dim} ({index}) must be {bound}"
                    )
            if pattern.batched:
                leading.append((pattern.name, shape, shape[: len(shape) - named]))
        self._check_presence(op, shapes)
        batch = _broadcast(op, leading)
        result = []
        for pattern in self.outputs:
            dims = pattern.dims
            if pattern.leading_dim_optional and not leading_given.get(dims[0], (True,))[0]:
                dims = dims[1:]
            sized = tuple(1 if dim == ONE else sizes[dim][0] for dim in dims)
            result.append((batch if pattern.batched else ()) + sized)
        return result

    def _check_presence(self, op: str, shapes: Sequence[Sequence[Any] | None]) -> None:
        """An optional input with a presence condition (``offs?(x.rank == 2)``) is given exactly when it holds."""
        ranks = {pattern.name: None if shape is None else len(shape) for pattern, shape in zip(self.inputs, shapes)}
        for pattern, shape in zip(self.inputs, shapes):
            if pattern.present_with is None:
                continue
            other, rank = pattern.present_with
            wanted = ranks[other] == rank
            if wanted != (shape is not None):
                rule = "is required when" if wanted else "must be absent unless"
                raise InvalidArgumentError(f"{op}: {pattern.name} {rule} {other} has rank {rank} ({other} has rank "
                                           f"{ranks[other]})")

    def __str__(self) -> str:
        return f"{', '.join(map(str, self.inputs))} -> {', '.join(map(str, self.outputs))}"


def _guard_or_true(condition: Any) -> bool:
    """``condition`` as a bool; for a symbolic one, torch's guard (True when it cannot be decided). Symbolic sizes
    exist only while torch traces, so the symbolic-shapes module (a third of a second to import, with sympy) is
    imported only then, not with kabi."""
    if isinstance(condition, bool):
        return condition
    from torch.fx.experimental.symbolic_shapes import guard_or_true

    return guard_or_true(condition)


def _guard_or_false(condition: Any) -> bool:
    """``condition`` as a bool; for a symbolic one, torch's guard (False when it cannot be decided)."""
    if isinstance(condition, bool):
        return condition
    from torch.fx.experimental.symbolic_shapes import guard_or_false

    return guard_or_false(condition)


def _differ(size: Any, expected: Any) -> bool:
    """Whether two sizes differ. A size known only at run time (an unbacked symbol, e.g. after ``nonzero``) is taken
    to be equal, and torch checks it when the graph runs."""
    same = size == expected
    if _guard_or_true(same):
        if not isinstance(same, bool):
            torch._check(same)
        return False
    return True


def _broadcast(op: str, leading: list[tuple[str, tuple, tuple]]) -> tuple:
    """Broadcast the batch dimensions of every batched input (torch's rule); on failure name two that disagree."""
    width = max((len(batch) for _, _, batch in leading), default=0)
    result = []
    for position in range(-width, 0):
        size, owner = 1, None
        for name, shape, batch in leading:
            if len(batch) < -position or _guard_or_false(batch[position] == 1):
                continue
            if owner is None:
                size, owner = batch[position], (name, shape)
            elif _differ(batch[position], size):
                raise InvalidArgumentError(
                    f"{op}: the leading dimensions of {owner[0]} {list(owner[1])} and {name} {list(shape)} do not "
                    f"broadcast: batch dimension {position} is {size} in {owner[0]} and {batch[position]} in {name}"
                )
        result.append(size)
    return tuple(result)


def _pattern(tensor: dict[str, Any]) -> TensorPattern:
    return TensorPattern(
        name=tensor["name"],
        batched=tensor["has_batch"],
        dims=tuple(tensor["dims"]),
        optional=tensor["optional"],
        dtype=tensor["type_variable"] or tensor["dtype"],
        leading_dim_optional=tensor["leading_dim_optional"],
        present_with=tensor["present_with"],
        offsets_of=tensor["offsets_of"],
        alternative_shapes=tuple(tuple(shape) for shape in tensor["shapes"][1:]),
    )


@functools.lru_cache(maxsize=None)
def op_schema(op: str, vectors: tuple[tuple[str, str], ...] = ()) -> OpSchema:
    """The schema of a registered op as the core parsed it, with the inputs that may be vectors
    (``(("a", "M"),)``: ``a`` may lack its ``M``); ``InvalidArgumentError`` when ``vectors`` names a dimension the
    schema does not have."""
    parsed = _core.op_schema(op)
    inputs = tuple(_pattern(tensor) for tensor in parsed["inputs"])
    outputs = tuple(_pattern(tensor) for tensor in parsed["outputs"])
    patterns = {pattern.name: pattern for pattern in inputs}
    for name, dim in vectors:
        if name not in patterns or dim not in patterns[name].dims:
            raise InvalidArgumentError(
                f"{op}: schema {parsed['schema']!r}: vectors names {name}'s dimension {dim}, which the schema does "
                "not have"
            )
    attributes = tuple(
        Attribute(attribute["name"], attribute["type"], tuple(attribute["enum_values"]), attribute["has_default"],
                  attribute["default"], attribute["type_variable"])
        for attribute in parsed["attributes"]
    )
    type_variables = tuple((name, tuple(dtypes)) for name, dtypes in parsed["type_variables"].items())
    tuning_key = tuple(item["name"] for item in parsed["tuning_key_items"])
    return OpSchema(inputs, outputs, vectors, attributes, type_variables, tuning_key)
