"""The input generator: fresh random inputs for a problem of an op, declared per op, for the tuner, the correctness
gate, ``kabi run/explain/tune/verify`` and ``kabi bench``.

Two ways in:

- :func:`problem_inputs`: the inputs of a problem given as named dims (``{"M": 512, "N": 256, "K": 128}``), a batch
  shape for the schema's ``...`` tensors, a dtype per type variable (those an attribute binds, ``out_dtype: O``,
  follow from it), the attributes, which optional inputs are present and which declared shape an input of several
  (``scale_a: [] | [M, 1]``) has. Contiguous tensors; ``None`` for an absent optional input.
- :func:`inputs_like`: fresh inputs like a call's, with the same shapes, strides (broadcast and padded rows
  included), dtypes, devices and pointer alignment modulo 256 bytes, never aliasing or reading the caller's data.
  The tuner and the gate measure candidates on these.

How each tensor is filled is its *kind*. By default floating and complex tensors are ``"normal"`` and integer and
bool ones ``"integers"``; a tensor whose schema names a concrete dtype (an fp32 scale beside bf16 data) is filled in
that dtype, whatever the type variables are. An op declares other kinds in its TOML::

    [inputs.scale]            # a per-tensor kind
    kind = "positive"

    [inputs]                  # or a whole-op generator, for what kinds cannot say
    generator = "my_package.inputs:make"

The kinds (``kabi._base.declarations.INPUT_KINDS``), kept few on purpose:

- ``normal``: standard normal values, drawn in float32 (both parts for complex dtypes) and rounded to the dtype.
  This is what the correctness gate's tolerances were set for: a product of K terms stays near sqrt(K), well
  inside float16's range, and nothing cancels to zero so relative errors stay meaningful.
- ``uniform``: uniform in [-1, 1).
- ``positive``: uniform in [0.5, 2): a scale that multiplies or divides moves values by at most a factor of 4.
  FP8 scales are declared so: ``scale_a: [M] float32`` in the schema and ``[inputs.scale_a] kind = "positive"``.
- ``integers``: small integers, in [-8, 8] (signed), [0, 8] (unsigned), 0 or 1 (bool), so that integer products
  of many terms stay exact; a tensor of them is never all zeros.
- ``offsets``: sorted group boundaries along the last dimension, from 0 up to the size of the dimension named by
  ``total``, which the last one equals: G groups of rows of an [M, K] input, some possibly empty, that together
  cover all M rows. The cut points are uniformly random, so the groups range from empty to several times M / G:
  one tuned pick serves every routing of a problem's sizes, and tuning on this broad mix keeps it robust. Tuning on
  balanced routing instead (each row in a uniformly drawn group) picked, on DeepSeek-V3 prefill, a config that
  absorbs each group's last few rows, 14-19% faster on balanced routing and 10-15% slower on Zipf routing (H200,
  benchmarks/results/debug-grouped-balanced-tuning-nvidia-h200.json). A tensor whose schema gives the value rule ``offsets(M)`` (grouped_mm's ``offs: [E] int32
  offsets(R)``, which the core checks) is filled so without a declaration; ``[inputs.offs] kind = "offsets"`` with
  ``total = "M"`` says it for a tensor without the rule.

A whole-op generator is called as ``generator(dims=..., batch_shape=..., dtypes=..., attributes=..., present=...,
device=..., generator=...)`` (dtypes per type variable as ``torch.dtype``, ``generator`` a seeded
``torch.Generator``) and returns one tensor per input in schema order, None for absent ones; the shapes, dtypes and
device are checked.

Example::

    >>> a, b = problem_inputs("matmul", {"M": 4, "N": 2, "K": 3}, batch_shape=(5,), dtypes="float32")
    >>> a.shape, b.shape
    (torch.Size([5, 4, 3]), torch.Size([5, 3, 2]))
    >>> fresh = inputs_like("matmul", [torch.empty(8, 4).t(), torch.empty(8, 2)])
    >>> fresh[0].stride()
    (1, 4)
"""

from __future__ import annotations

from typing import Any, Callable, Collection, Mapping, Sequence

import torch

from .. import _core
from .._base.declarations import InputDeclaration, OpSpec, op_specs, resolve_callable
from .._base.errors import ArgumentTypeError, InvalidArgumentError
from .._base.tensors import torch_dtype
from ._schema import ONE, op_schema

__all__ = ["DEFAULT_SEED", "input_like", "inputs_like", "problem_inputs"]

# The seed of every generated problem unless the caller gives one: a tuning run is reproducible.
DEFAULT_SEED = 0x6B616269
# Fresh inputs reproduce the caller's pointer alignment modulo this many bytes (the widest vector/TMA alignment a
# kernel declares), so a kernel that needs aligned data fails tuning exactly where it would fail for the caller.
_ALIGNMENT_PERIOD_BYTES = 256
# Kinds that fill each element on its own, so a tensor's storage can be filled whatever its layout.
_ELEMENTWISE_KINDS = ("normal", "uniform", "positive", "integers")
_DRAW_CHUNK_ELEMENTS = 1 << 26


def _generator(generator: torch.Generator | int | None) -> torch.Generator:
    if isinstance(generator, torch.Generator):
        return generator
    if generator is not None and not isinstance(generator, int):
        raise ArgumentTypeError(f"generator: expected a torch.Generator or an int seed, got {type(generator).__name__}")
    return torch.Generator().manual_seed(DEFAULT_SEED if generator is None else generator)


def _on_device(generator: torch.Generator, device: torch.device) -> torch.Generator:
    """A generator for ``device``: generating large inputs on the device is far faster; its generator is seeded from
    the given one, so the values still follow from the caller's seed."""
    if device.type == "cpu":
        return generator
    seed = int(torch.randint(2**62, (1,), generator=generator))
    return torch.Generator(device=device).manual_seed(seed)


def _default_kind(dtype: torch.dtype) -> str:
    return "normal" if dtype.is_floating_point or dtype.is_complex else "integers"


def _elementwise_values(kind: str, count: int, dtype: torch.dtype, device: torch.device,
                        generator: torch.Generator) -> torch.Tensor:
    """``count`` values of an elementwise kind, in ``dtype``."""
    values = torch.empty(count, dtype=dtype, device=device)
    _fill_elementwise(values, kind, generator)
    return values


def _fill_elementwise(target: torch.Tensor, kind: str, generator: torch.Generator) -> None:
    """Fills the 1-D ``target`` with values of an elementwise kind. They are drawn in float32 (int64 for integers),
    a chunk at a time, so the draw's scratch stays small beside an input the size of an MoE layer's weights."""
    dtype, device, count = target.dtype, target.device, target.numel()
    if kind != "integers" and not (dtype.is_floating_point or dtype.is_complex):
        raise InvalidArgumentError(f"kind {kind!r} fills floating-point tensors; a {_name(dtype)} tensor takes "
                                   f"\"integers\" or \"offsets\"")
    generator = _on_device(generator, device)
    for start in range(0, count, _DRAW_CHUNK_ELEMENTS):
        size = min(_DRAW_CHUNK_ELEMENTS, count - start)
        target[start:start + size] = _draw(kind, size, dtype, device, generator)
    if kind == "integers" and count and not bool(target.any()):
        target[0] = 1  # never all zeros: a kernel that ignores its input must not pass on a tensor of zeros


def _draw(kind: str, count: int, dtype: torch.dtype, device: torch.device,
          generator: torch.Generator) -> torch.Tensor:
    if kind == "integers":
        low, high = (0, 2) if dtype == torch.bool else (0, 9) if _unsigned(dtype) else (-8, 9)
        return torch.randint(low, high, (count,), device=device, generator=generator)
    if kind == "normal":
        # Both parts random for complex: a kernel that drops or conjugates the imaginary part must not pass.
        return torch.randn(count, dtype=torch.complex64 if dtype.is_complex else torch.float32, device=device,
                           generator=generator)
    values = torch.rand(count, dtype=torch.float32, device=device, generator=generator)
    return values * 2 - 1 if kind == "uniform" else values * 1.5 + 0.5


def _unsigned(dtype: torch.dtype) -> bool:
    return not dtype.is_floating_point and not dtype.is_complex and dtype != torch.bool and not dtype.is_signed


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _offsets(shape: Sequence[int], total: int, dtype: torch.dtype, device: torch.device,
             generator: torch.Generator) -> torch.Tensor:
    """Sorted boundaries in [0, total] along the last dimension, the last one ``total``."""
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise InvalidArgumentError(f"kind \"offsets\" fills integer tensors, got a {_name(dtype)} tensor")
    *leading, groups = shape
    inner = torch.randint(0, total + 1, (*leading, max(groups - 1, 0)), generator=generator).sort(dim=-1).values
    ends = torch.full((*leading, min(groups, 1)), total, dtype=inner.dtype)
    return torch.cat([inner, ends], dim=-1).to(dtype=dtype, device=device)


class _Op:
    """What generation needs of an op: the core's parsed schema and the ``[inputs]`` declarations of its TOML."""

    def __init__(self, op: OpSpec | str) -> None:
        if isinstance(op, OpSpec):
            spec = op
        elif isinstance(op, str):
            spec = op_specs().get(op)
        else:
            raise ArgumentTypeError(f"op: expected an op name or an OpSpec, got {type(op).__name__}")
        self.name = spec.name if spec is not None else op
        self.source: OpSpec | str = spec if spec is not None else op
        self.schema = _core.op_schema(self.name)
        self.declarations: Mapping[str, InputDeclaration] = spec.inputs if spec is not None else {}
        self.generator = spec.input_generator if spec is not None else ""
        unknown = sorted(set(self.declarations) - {tensor["name"] for tensor in self.schema["inputs"]})
        if unknown:
            raise InvalidArgumentError(f"{self.name}: [inputs.{unknown[0]}] names no input of the schema "
                                       f"{self.schema['schema']!r}")

    def kind(self, tensor: Mapping[str, Any], dtype: torch.dtype) -> InputDeclaration:
        """The declared kind; else offsets for a tensor whose schema says ``offsets(R)``; else by dtype."""
        if tensor["name"] in self.declarations:
            return self.declarations[tensor["name"]]
        if tensor["offsets_of"]:
            return InputDeclaration("offsets", total=tensor["offsets_of"])
        return InputDeclaration(_default_kind(dtype))

    def fail(self, message: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"{self.name}: {message}")


def _dtypes(op: _Op, dtypes: str | Mapping[str, str], needed: Collection[str],
            attributes: Mapping[str, Any]) -> dict[str, torch.dtype]:
    """The dtype of each type variable given (one name: every variable, or, where some do not take it, every
    variable that does), each checked against the variable's declared dtypes; a variable an attribute binds has the
    attribute's value. Every variable in ``needed`` (those of the inputs present) must be given."""
    variables: Mapping[str, Sequence[str]] = op.schema["type_variables"]
    if isinstance(dtypes, str):
        taking = [variable for variable, allowed in variables.items() if dtypes in allowed]
        given = dict.fromkeys(taking or variables, dtypes)
    else:
        given = dict(dtypes)
    for attribute in op.schema["attributes"]:
        if attribute["type_variable"] is not None:
            given[attribute["type_variable"]] = attributes[attribute["name"]]
    unknown = sorted(set(given) - set(variables))
    if unknown:
        raise op.fail(f"dtypes names {unknown[0]}, which is not a type variable; expected among "
                      f"{', '.join(variables) or 'none'}")
    for variable in needed:
        if variable not in given:
            raise op.fail(f"dtypes gives no dtype for the type variable {variable} (one of "
                          f"{', '.join(variables[variable])})")
    result = {}
    for variable, name in given.items():
        if name not in variables[variable]:
            raise op.fail(f"dtypes: {variable} may be {', '.join(variables[variable])}, got {name!r}")
        result[variable] = torch_dtype(name)
    return result


def _tensor_dtype(tensor: Mapping[str, Any], dtypes: Mapping[str, torch.dtype]) -> torch.dtype:
    return dtypes[tensor["type_variable"]] if tensor["type_variable"] else torch_dtype(tensor["dtype"])


def _attributes(op: _Op, attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    declared = {attribute["name"]: attribute for attribute in op.schema["attributes"]}
    given = dict(attributes or {})
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise op.fail(f"attributes names {unknown[0]}, which the op does not have; expected among "
                      f"{', '.join(declared) or 'none'}")
    missing = [name for name, attribute in declared.items() if name not in given and not attribute["has_default"]]
    if missing:
        raise op.fail(f"attributes lacks {missing[0]}, which has no default")
    return {name: given.get(name, attribute["default"]) for name, attribute in declared.items()}


def problem_inputs(
    op: OpSpec | str,
    dims: Mapping[str, int],
    batch_shape: Sequence[int] = (),
    dtypes: str | Mapping[str, str] = "float32",
    attributes: Mapping[str, Any] | None = None,
    present: Collection[str] = (),
    device: torch.device | str = "cpu",
    generator: torch.Generator | int | None = None,
    shapes: Mapping[str, int] | None = None,
) -> tuple[torch.Tensor | None, ...]:
    """Fresh contiguous inputs of ``op`` (a name or an :class:`OpSpec`) for a problem: ``dims`` gives every named
    dimension of the inputs, ``batch_shape`` the leading shape of the ``...`` tensors, ``dtypes`` a dtype name per
    type variable (one name: the same for all), ``attributes`` the attribute values (defaults filled in; a whole-op
    generator sees them), ``present`` the optional inputs given. Absent optional inputs are None. ``generator`` is
    a ``torch.Generator`` or an int seed (default :data:`DEFAULT_SEED`): the same seed gives the same values.
    ``shapes`` picks, for an input of several declared shapes, which one it has (0: the first, as written in the
    schema, the default; 1: the next). ``InvalidArgumentError`` names the argument and what was expected."""
    spec = _Op(op)
    return _problem_inputs(spec, dims, tuple(batch_shape), dtypes, attributes, frozenset(present),
                           torch.device(device), _generator(generator), _declared_shapes(spec, shapes or {}))


def _declared_shapes(spec: _Op, chosen: Mapping[str, int]) -> list[tuple[str, ...]]:
    """Each input's dims as ``chosen`` picks among its declared shapes."""
    by_name = {tensor["name"]: tensor for tensor in spec.schema["inputs"]}
    for name, index in chosen.items():
        if name not in by_name:
            raise spec.fail(f"shapes names {name}, which is not an input")
        declared = by_name[name]["shapes"]
        if not isinstance(index, int) or not 0 <= index < len(declared):
            raise spec.fail(f"shapes: {name} has {len(declared)} declared shapes; expected an index below "
                            f"{len(declared)}, got {index!r}")
    return [tuple(tensor["shapes"][chosen.get(tensor["name"], 0)]) for tensor in spec.schema["inputs"]]


def _problem_inputs(spec: _Op, dims: Mapping[str, int], batch_shape: tuple[int, ...], dtypes: str | Mapping[str, str],
                    attributes: Mapping[str, Any] | None, present: frozenset[str], device: torch.device,
                    generator: torch.Generator, declared: Sequence[tuple[str, ...]]) -> tuple[torch.Tensor | None, ...]:
    inputs = spec.schema["inputs"]
    form = op_schema(spec.name)
    declared = [form.generated_dims(tensor["name"], present) if tensor["leading_dim_optional"] else names
                for tensor, names in zip(inputs, declared)]
    needed = {dim for tensor, names in zip(inputs, declared) if not tensor["optional"] or tensor["name"] in present
              for dim in names if dim != ONE}
    known = {dim for tensor in inputs for shape in tensor["shapes"] for dim in shape if dim != ONE}
    extra = sorted(set(dims) - known)
    if extra:
        raise spec.fail(f"dims names {extra[0]}, which no input has; expected {', '.join(sorted(known))}")
    missing = [dim for dim in sorted(needed) if dim not in dims]
    if missing:
        raise spec.fail(f"dims lacks {missing[0]}; expected sizes of {', '.join(sorted(needed))}")
    for dim, size in dims.items():
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise spec.fail(f"dims: {dim} must be a size (an int of 0 or more), got {size!r}")
    if batch_shape and not any(tensor["has_batch"] for tensor in inputs):
        raise spec.fail(f"batch_shape {list(batch_shape)} given, but no input of {spec.schema['schema']!r} has "
                        "leading batch dimensions (...)")
    optional = {tensor["name"] for tensor in inputs if tensor["optional"]}
    stray = sorted(set(present) - optional)
    if stray:
        raise spec.fail(f"present names {stray[0]}, which is not an optional input; expected among "
                        f"{', '.join(sorted(optional)) or 'none'}")
    shapes = [None if tensor["optional"] and tensor["name"] not in present else
              (*(batch_shape if tensor["has_batch"] else ()), *(1 if dim == ONE else dims[dim] for dim in names))
              for tensor, names in zip(inputs, declared)]
    values = _attributes(spec, attributes)
    by_variable = _dtypes(spec, dtypes, {tensor["type_variable"] for tensor, shape in zip(inputs, shapes)
                                         if shape is not None and tensor["type_variable"]}, values)
    if spec.generator:
        return _from_op_generator(spec, dims, batch_shape, by_variable, values, present, device, generator, shapes)
    result: list[torch.Tensor | None] = []
    for tensor, shape in zip(inputs, shapes):
        if shape is None:
            result.append(None)
            continue
        dtype = _tensor_dtype(tensor, by_variable)
        declaration = spec.kind(tensor, dtype)
        try:
            if declaration.kind == "offsets":
                if declaration.total not in dims:
                    raise InvalidArgumentError(f"total names {declaration.total}, which dims does not give")
                result.append(_offsets(shape, dims[declaration.total], dtype, device, generator))
            else:
                count = 1
                for size in shape:
                    count *= size
                result.append(_elementwise_values(declaration.kind, count, dtype, device, generator).reshape(shape))
        except InvalidArgumentError as error:
            raise spec.fail(f"input {tensor['name']}: {error}") from None
    return tuple(result)


def _from_op_generator(spec: _Op, dims: Mapping[str, int], batch_shape: tuple[int, ...],
                       dtypes: Mapping[str, torch.dtype], attributes: Mapping[str, Any], present: frozenset[str],
                       device: torch.device, generator: torch.Generator,
                       shapes: Sequence[tuple[int, ...] | None]) -> tuple[torch.Tensor | None, ...]:
    function: Callable[..., Sequence[Any]] = resolve_callable(spec.generator)
    produced = tuple(function(dims=dict(dims), batch_shape=batch_shape, dtypes=dict(dtypes),
                              attributes=dict(attributes), present=present, device=device, generator=generator))
    where = f"the input generator {spec.generator}"
    if len(produced) != len(shapes):
        raise spec.fail(f"{where} returned {len(produced)} values; expected one per input ({len(shapes)})")
    for tensor, shape, value in zip(spec.schema["inputs"], shapes, produced):
        if shape is None:
            if value is not None:
                raise spec.fail(f"{where} returned a tensor for the absent input {tensor['name']}; expected None")
            continue
        dtype = _tensor_dtype(tensor, dtypes)
        if not (isinstance(value, torch.Tensor) and tuple(value.shape) == shape and value.dtype == dtype
                and value.device == device):
            got = (f"{list(value.shape)} {_name(value.dtype)} on {value.device}" if isinstance(value, torch.Tensor)
                   else type(value).__name__)
            raise spec.fail(f"{where} returned {got} for {tensor['name']}; expected {list(shape)} {_name(dtype)} "
                            f"on {device}")
    return produced


def _storage_elements(shape: Sequence[int], stride: Sequence[int]) -> int:
    if any(size == 0 for size in shape):
        return 0
    return 1 + sum((size - 1) * step for size, step in zip(shape, stride))


def _aligned_storage(tensor: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """Storage for a tensor of ``tensor``'s layout, the offset at which it has ``tensor``'s pointer alignment, and
    the number of elements the layout spans."""
    element_bytes = tensor.element_size()
    needed = _storage_elements(tensor.shape, tensor.stride())
    storage = torch.empty(needed + _ALIGNMENT_PERIOD_BYTES // element_bytes, dtype=tensor.dtype, device=tensor.device)
    misalignment = (tensor.data_ptr() - storage.data_ptr()) % _ALIGNMENT_PERIOD_BYTES
    offset = misalignment // element_bytes if misalignment % element_bytes == 0 else 0
    return storage, offset, needed


def input_like(tensor: torch.Tensor, generator: torch.Generator | int | None = None, kind: str | None = None) -> torch.Tensor:
    """A new tensor with ``tensor``'s shape, dtype, device and strides (so the same layout class, broadcast and
    padded rows included) and the same pointer alignment modulo 256 bytes, filled with fresh values of an
    elementwise ``kind`` (default: ``"normal"`` for floating dtypes, ``"integers"`` otherwise). Never aliases or
    reads ``tensor``'s data."""
    if not isinstance(tensor, torch.Tensor):
        raise ArgumentTypeError(f"input_like: expected a torch.Tensor, got {type(tensor).__name__}")
    kind = kind if kind is not None else _default_kind(tensor.dtype)
    if kind not in _ELEMENTWISE_KINDS:
        raise InvalidArgumentError(f"input_like: kind must be one of {', '.join(_ELEMENTWISE_KINDS)}, got {kind!r}")
    storage, offset, needed = _aligned_storage(tensor)
    _fill_elementwise(storage[offset : offset + needed], kind, _generator(generator))
    return storage.as_strided(tensor.shape, tensor.stride(), offset)


def _laid_out_like(values: torch.Tensor, tensor: torch.Tensor) -> torch.Tensor:
    """``values`` (generated for the problem) copied into a fresh tensor of ``tensor``'s layout: cut to its shape
    where it broadcasts, and constant along its stride-0 dimensions."""
    values = values[(0,) * (values.dim() - tensor.dim())]
    for axis, size in enumerate(tensor.shape):
        values = values.narrow(axis, 0, size)
    storage, offset, _ = _aligned_storage(tensor)
    storage.zero_()
    distinct = [1 if step == 0 else size for size, step in zip(tensor.shape, tensor.stride())]
    storage.as_strided(distinct, tensor.stride(), offset).copy_(values[tuple(slice(0, size) for size in distinct)])
    return storage.as_strided(tensor.shape, tensor.stride(), offset)


def inputs_like(op: OpSpec | str, inputs: Sequence[torch.Tensor | None], attributes: Mapping[str, Any] | None = None,
                generator: torch.Generator | int | None = None) -> list[torch.Tensor | None]:
    """Fresh inputs of ``op`` like a call's ``inputs`` (None for an absent optional input stays None): each tensor
    as :func:`input_like` makes it, filled as the op declares (its kind, or its whole-op generator for the problem of
    these shapes and dtypes, then laid out like the caller's). One generator (default seed :data:`DEFAULT_SEED`)
    for all, so a tuning run is reproducible."""
    spec = _Op(op)
    generator = _generator(generator)
    schema_inputs = spec.schema["inputs"]
    if len(inputs) != len(schema_inputs):
        raise spec.fail(f"takes {len(schema_inputs)} inputs ({', '.join(t['name'] for t in schema_inputs)}), "
                        f"got {len(inputs)}")
    for tensor, value in zip(schema_inputs, inputs):
        if value is None and not tensor["optional"]:
            raise spec.fail(f"input {tensor['name']} is required, got None")
        if value is not None and not isinstance(value, torch.Tensor):
            raise ArgumentTypeError(f"{spec.name}: input {tensor['name']}: expected a torch.Tensor or None, "
                                    f"got {type(value).__name__}")
    structured = bool(spec.generator) or any(
        value is not None and spec.kind(tensor, value.dtype).kind not in _ELEMENTWISE_KINDS
        for tensor, value in zip(schema_inputs, inputs))
    problem = _problem_of(spec, inputs, attributes, generator) if structured else None
    result: list[torch.Tensor | None] = []
    for index, (tensor, value) in enumerate(zip(schema_inputs, inputs)):
        if value is None:
            result.append(None)
        elif problem is not None and (spec.generator or spec.kind(tensor, value.dtype).kind not in _ELEMENTWISE_KINDS):
            result.append(_laid_out_like(problem[index], value))
        else:
            result.append(input_like(value, generator, spec.kind(tensor, value.dtype).kind))
    return result


def _problem_of(spec: _Op, inputs: Sequence[torch.Tensor | None], attributes: Mapping[str, Any] | None,
                generator: torch.Generator) -> tuple[torch.Tensor | None, ...]:
    """:func:`problem_inputs` for the problem the tensors ``inputs`` pose: their named dims, broadcast batch shape,
    dtypes and the optional inputs present."""
    dims: dict[str, int] = {}
    leading, dtypes, present, devices, chosen = [], {}, set(), set(), {}
    for tensor, pattern, value in zip(spec.schema["inputs"], op_schema(spec.name).inputs, inputs):
        if value is None:
            continue
        names = pattern.dims_for_rank(value.dim()) or pattern.dims
        chosen[tensor["name"]] = pattern.shapes.index(names) if names in pattern.shapes else 0
        named = len(names)
        dims.update((dim, size) for dim, size in zip(names, value.shape[value.dim() - named:]) if dim != ONE)
        if tensor["has_batch"]:
            leading.append(value.shape[: value.dim() - named])
        if tensor["type_variable"]:
            dtypes[tensor["type_variable"]] = _name(value.dtype)
        if tensor["optional"]:
            present.add(tensor["name"])
        devices.add(value.device)
    if len(devices) > 1:
        raise spec.fail(f"inputs are on several devices ({', '.join(sorted(map(str, devices)))}); expected one")
    return _problem_inputs(spec, dims, tuple(torch.broadcast_shapes(*leading)) if leading else (), dtypes,
                           attributes, frozenset(present), devices.pop(), generator, _declared_shapes(spec, chosen))
