"""The op front: validation, selection and the per-op decision cache behind every ``kabi.ops.<op>``.

Every op's public function is C (csrc/python/front.cpp): it binds the call by the convention of
:mod:`kabi.ops._signature`, keys it by what selection depends on (each input's shape, strides, dtype, device and
requires_grad, or its absence; every attribute's value; the active ``kabi.use`` scope), read through DLPack's C
exchange API, and looks the key up in the op's decision table (:mod:`kabi._base.decision_cache`). A hit calls the
remembered implementation directly, its attributes bound: the Python kernel itself (given the attributes as keywords,
as the ``functools.partial`` that binds them would), or a native launcher bound to the problem (it allocates the
outputs and passes only data pointers to the core). Validation is skipped on a hit
because the key implies it; ``out=`` is checked on every call that gives it (in C when it matches the decision's
output, here when it does not). An op of several outputs returns a tuple, and ``out=`` takes one.

A miss validates (Python-only checks: the number of inputs, that each is a tensor or an absent optional input, that
all share a device, that each attribute has its type; then the core's ``kabi_problem_describe`` through
``kabi_select``, whose messages name the argument and what was expected), selects, offers the selection to the tuning
hook, builds the implementation, remembers it, and runs it.

Tuning hook: ``_on_selection_miss`` is None until a handler is installed with :func:`set_selection_miss_handler`
(kabi's bootstrap installs the tuner's, :func:`kabi._selection.tuner.on_selection_miss`): a function
``hook(front, inputs, out, selection) -> Selection | None`` called on every miss after the core's selection: it may
measure candidates (``kabi._core.tuning_store``) and return the selection to use instead (e.g. ``front.select(inputs)``
again), or None to keep the core's.

Example::

    >>> front = OpFront(op_spec("matmul"))
    >>> front.function(torch.randn(4, 3), torch.randn(3, 2)).shape
    torch.Size([4, 2])
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .. import _core
from .._base.core_answers import Candidate, KernelInfo, Problem
from .._base.decision_cache import decision_table
from .._base.declarations import EXACT_DTYPES, OpSpec, op_name_of
from .._base.errors import (
    ArgumentTypeError,
    ConstraintViolatedError,
    InvalidArgumentError,
    KabiError,
    KernelFailedError,
    StaleDecisionError,
    unknown_op,
)
from .._base.tensors import check_array, described_facts, descriptor, meta_descriptor, torch_device, torch_dtype
from .._plugins.discovery import complete_registry
from . import _kernel_registration, _scopes
from ._arrays import call_with_arrays, has_foreign_array
from ._autograd import differentiable
from ._schema import VectorPromotion, op_schema
from ._signature import check_names, parameters_text, signature

__all__ = ["OpFront", "Selection", "_on_selection_miss", "front_of", "set_fresh_selection_verifier",
           "set_selection_miss_handler"]

_on_selection_miss: Callable[..., Selection | None] | None = None
_verify_fresh_selection: Callable[..., Selection] | None = None


def set_selection_miss_handler(handler: Callable[..., Selection | None] | None) -> None:
    """Install the function every op front calls on a decision miss, after the core's selection (None: keep the
    core's selection). The selection layer provides it; this layer only calls it.

    Example::

        set_selection_miss_handler(tuner.on_selection_miss)  # in kabi._bootstrap
    """
    global _on_selection_miss
    _on_selection_miss = handler


def set_fresh_selection_verifier(verifier: Callable[..., Selection] | None) -> None:
    """Install the function that makes a selection taken with a call's data pointers (:meth:`OpFront.fresh_call`)
    safe to run: ``verifier(front, inputs, out, selection)`` returns the selection to use, its pick having passed
    the correctness gate on the problem. The selection layer provides it (the gate); this layer only calls it.

    Example::

        set_fresh_selection_verifier(functools.partial(gate.gate_until_verified, with_data=True))  # kabi._bootstrap
    """
    global _verify_fresh_selection
    _verify_fresh_selection = verifier
_fronts: dict[str, OpFront] = {}
# torch >= 2.10 offers DLPack's C exchange API: the C hit path reads tensor metadata and current streams through it.
_has_exchange_api = _core.dlpack_exchange_available(torch.Tensor)


def _current_cuda_stream(device_index: int) -> int:
    """torch's current CUstream on a CUDA device, as an integer."""
    return torch.cuda.current_stream(device_index).cuda_stream


def _device_type(inputs: tuple) -> str | None:
    """The device type of a call's first tensor (None without one): where its kernels must come from."""
    return next((value.device.type for value in inputs if isinstance(value, torch.Tensor)), None)


def front_of(op: Any) -> OpFront:
    """The dispatcher behind an op, given its name or its ``kabi.ops`` function."""
    try:
        return _fronts[op_name_of(op)]
    except (KeyError, ArgumentTypeError):
        raise unknown_op(op, _fronts) from None


@dataclass(frozen=True)
class Selection:
    """The core's answer for one problem: the kernel (None when nothing is eligible), why, whether it has passed
    the correctness gate on the problem (``verified``), the candidates (the eligible ones and the pick, or every one:
    :meth:`OpFront.select`'s ``with_rejected``), the execution mode it was made for
    (``"eager"``, or ``"graph"``: replayed in a CUDA graph), the call's attribute values (schema order, enums by
    name), which an implementation of the pick is bound to, and the op's generation (``kabi_op_generation``) it was
    made at (:meth:`OpFront.is_current`)."""

    op: str
    kernel: KernelInfo | None
    pick_reason: str
    reason: str
    candidates: tuple[Candidate, ...]
    problem: Problem | None
    forced: str | None
    error: str
    verified: bool
    execution_mode: str = "eager"
    attributes: tuple = ()
    generation: int = 0

    @property
    def picked(self) -> Candidate | None:
        """The candidate of the pick, or None."""
        return next((candidate for candidate in self.candidates if candidate.picked), None)

    @classmethod
    def from_core(cls, op: str, raw: dict, forced: str | None, execution_mode: str = "eager",
                  attributes: tuple = (), generation: int = 0) -> Selection:
        return cls(
            op=op,
            kernel=KernelInfo.from_core(raw["kernel"]) if raw["kernel"] is not None else None,
            pick_reason=raw["pick_reason"],
            reason=raw["reason"],
            candidates=tuple(Candidate.from_core(c) for c in raw["candidates"]),
            problem=Problem.from_core(raw["problem"]) if raw["problem"] is not None else None,
            forced=forced,
            error=raw["error"],
            verified=raw["verified"],
            execution_mode=execution_mode,
            attributes=tuple(attributes),
            generation=generation,
        )


def _by_execution_mode(eager: Callable[..., Any], graph: Callable[..., Any], device: torch.device) -> Callable[..., Any]:
    """One implementation for two picks: ``graph`` while a CUDA graph is being captured on ``device``, else ``eager``,
    asking torch per call. Only decisions whose modes pick different kernels pay for the capture check, and where
    torch has DLPack's exchange API the hit path does without this (a decision keeps both picks)."""

    def by_execution_mode(*inputs: torch.Tensor | None, out: Any = None) -> Any:
        implementation = graph if _scopes.cuda_graph_capturing(device) else eager
        return implementation(*inputs) if out is None else implementation(*inputs, out=out)

    return by_execution_mode


def _with_vectors(implementation: Callable[..., Any], promotion: VectorPromotion) -> Callable[..., Any]:
    """``implementation`` of the promoted problem, called with the caller's vectors: they become the matrices it
    takes, and its result loses the dimensions the vectors lacked. Decisions of calls without vectors never pay
    for it."""
    promote_input, promote_output, demote_output = promotion.promote_input, promotion.promote_output, promotion.demote_output

    def with_vectors(*inputs: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        full_inputs = [promote_input(index, tensor) for index, tensor in enumerate(inputs)]
        if out is None:
            return demote_output(0, implementation(*full_inputs))
        implementation(*full_inputs, out=promote_output(0, out))
        return out

    return with_vectors


class OpFront:
    """Dispatch of one op: ``function`` is the public ``kabi.ops.<name>`` callable."""

    def __init__(self, spec: OpSpec) -> None:
        self.spec = spec
        self.name = spec.name
        self.schema = op_schema(spec.name, tuple(spec.vectors.items()))
        self.input_names = self.schema.input_names
        self.attribute_names = self.schema.attribute_names
        self.output_count = len(self.schema.outputs)
        check_names(self.name, self.schema)
        self.cache = decision_table(spec.name, [(attribute.type, attribute.enum_values, attribute.enum_aliases)
                                                for attribute in self.schema.attributes])
        self.signature = signature(self.schema)
        self.function = self._make_function()
        _fronts[self.name] = self

    # -- the public callable -----------------------------------------------------------------------------------

    def _make_function(self) -> Callable[..., Any]:
        """The C function (csrc/python/front.cpp): the hit path in C over the decision table; misses, an ``out``
        it cannot accept, argument errors and failing kernels come back here."""
        schema = self.schema
        return _core.make_op_front(
            self.name,
            f"{self.name}({parameters_text(schema)})\n--\n\n{self._docstring()}",
            "kabi.ops",
            self.cache,
            sum(not pattern.optional for pattern in schema.inputs),
            list(self.input_names),
            list(self.attribute_names),
            [attribute.default if attribute.has_default else None for attribute in schema.attributes],
            _scopes.scope_variable,
            self.miss,
            self.call_with_out,
            self.kernel_failed,
            self.bind_call,
            self.check_host_values if schema.value_checked_inputs else None,
        )

    def bind_call(self, *arguments: Any, **keywords: Any) -> Any:
        """A call the C function could not bind: Python binds it (raising what is wrong with it), then it misses."""
        inputs, attributes, out = self.bind(arguments, keywords)
        return self.miss(inputs, out, attributes)

    def _docstring(self) -> str:
        spec = self.spec
        tolerances = ", ".join(
            f"{dtype} {t.norm:g}" if dtype not in EXACT_DTYPES else f"{dtype} exact" for dtype, t in spec.tolerance.items()
        )
        vectors = "".join(f"{name} may be a vector, without {dim}; out then lacks {dim} too. " for name, dim in spec.vectors.items())
        types = "; ".join(f"{name}: {', '.join(dtypes)}" for name, dtypes in self.schema.type_variables)
        required = ", ".join(pattern.name for pattern in self.schema.inputs if not pattern.optional)
        optional = "".join(
            f"{pattern.name} is optional: None (the default) leaves it out. " for pattern in self.schema.inputs
            if pattern.optional
        )
        attributes = "".join(
            f"{attribute.name} is {attribute.expected}"
            + (f" (default {attribute.default!r}). " if attribute.has_default else " (required). ")
            for attribute in self.schema.attributes
        )
        out = ("``out``, when given, must have the result's shape, dtype and device; it is written and returned."
               if self.output_count == 1 else
               f"Returns a tuple of {self.output_count} tensors; ``out``, when given, is a tuple of as many, each of "
               "its result's shape, dtype and device; they are written and returned.")
        return (
            f"{spec.summary}.\n\n"
            f"    {spec.schema}\n\n"
            f"{vectors}{optional}{attributes}types: {types}. Runs the fastest correct kernel registered for the "
            f"inputs' device; checked against {spec.reference} (relative error bound: {tolerances}).\n"
            f"{out}\n\n"
            f"Example::\n\n    >>> kabi.ops.{spec.name}({required})\n\n"
            f"Declared in {spec.path.name}; see kabi.explain(kabi.ops.{spec.name}, {required}) for the pick."
        )

    # -- arguments ------------------------------------------------------------------------------------------------

    def bind(self, arguments: tuple, keywords: dict[str, Any]) -> tuple[tuple, tuple, Any]:
        """``(inputs, attributes, out)`` of a call written as the op function takes it (``kabi.explain``,
        ``kabi.tune``): inputs in schema order (None for an absent optional one), attribute values in schema order
        with the defaults filled in. A wrong number of inputs is named with the inputs the op takes; Python's own
        ``TypeError`` names any other missing or unexpected argument."""
        required = [pattern.name for pattern in self.schema.inputs if not pattern.optional]
        if len(arguments) < len(required) and not any(name in keywords for name in required) or \
                len(arguments) > len(self.input_names):
            optional = [f"{pattern.name}=None" for pattern in self.schema.inputs if pattern.optional]
            counted = (f"{len(required)}" if not optional else f"{len(required)} to {len(self.input_names)}")
            raise ArgumentTypeError(f"{self.name} takes {counted} inputs ({', '.join(required + optional)}), got "
                                    f"{len(arguments)}")
        try:
            bound = self.signature.bind(*arguments, **keywords)
        except TypeError as error:
            raise ArgumentTypeError(f"{self.name}: {error}") from None
        bound.apply_defaults()
        values = bound.arguments
        return (tuple(values.get(name) for name in self.input_names),
                self.schema.canonical_attributes(tuple(values[name] for name in self.attribute_names)),
                values.get("out"))

    def attribute_map(self, attributes: tuple) -> dict[str, Any]:
        """Attribute values in schema order as keyword arguments (a Python kernel's or a reference's)."""
        return dict(zip(self.attribute_names, attributes))

    def check_attributes(self, attributes: tuple) -> tuple:
        """The Python-side check of attribute values: each of its declared type (an enum by one of its names, or by
        its alias), returned as the schema names them (:meth:`OpSchema.canonical_attributes`)."""
        attributes = self.schema.canonical_attributes(attributes)
        for attribute, value in zip(self.schema.attributes, attributes):
            attribute.check(self.name, value)
        return attributes

    def check_inputs(self, inputs: tuple, out: Any) -> tuple[torch.Tensor | None, ...]:
        """The Python-only checks, made before the core validates shapes and dtypes."""
        if len(inputs) != len(self.input_names):
            raise ArgumentTypeError(
                f"{self.name} takes {len(self.input_names)} inputs ({', '.join(self.input_names)}), got {len(inputs)}"
            )
        tensors = []
        for value, pattern in zip(inputs, self.schema.inputs):
            if pattern.optional and not (value is None or isinstance(value, torch.Tensor)):
                raise ArgumentTypeError(
                    f"{self.name}: {pattern.name} must be a tensor or None, got {type(value).__name__}"
                )
            tensors.append(value if pattern.optional else check_array(value, pattern.name, self.name))
        devices = [(name, t.device) for name, t in zip(self.input_names, tensors) if t is not None]
        devices += [(name, tensor.device) for name, tensor in self._outputs_of(out)]
        if len({device for _, device in devices}) > 1:
            listing = ", ".join(f"{name} on {device}" for name, device in devices)
            raise InvalidArgumentError(f"{self.name}: all tensors must be on one device; got {listing}")
        return tuple(tensors)

    def _outputs_of(self, out: Any) -> list[tuple[str, torch.Tensor]]:
        """A caller's ``out`` as (name, tensor) pairs, checked: a tensor, or a tuple of one per output."""
        if out is None:
            return []
        if self.output_count == 1:
            return [("out", check_array(out, "out", self.name))]
        if not isinstance(out, (tuple, list)) or len(out) != self.output_count:
            raise ArgumentTypeError(
                f"{self.name}: out must be a tuple of {self.output_count} tensors, got {type(out).__name__}"
                + (f" of {len(out)}" if isinstance(out, (tuple, list)) else "")
            )
        return [(f"out[{index}]", check_array(tensor, f"out[{index}]", self.name)) for index, tensor in enumerate(out)]

    def check_host_values(self, inputs: tuple) -> None:
        """The core's checks of a call's value-checked inputs (grouped_mm's offsets) when one is in host memory: a
        decision serves every call of its shapes, whose values differ. Device values are not read back (a copy and
        a synchronization per call); kernels keep inside their tensors whatever those hold."""
        for name, tensor in zip(self.input_names, inputs):
            if name in self.schema.value_checked_inputs and tensor is not None and tensor.device.type == "cpu":
                _core.describe(self.name, self.input_descriptors(inputs))
                return

    def input_descriptors(self, inputs: tuple, with_data: bool = True) -> list[tuple | None]:
        """The binding's descriptors of the inputs (None for an absent optional input); without data pointers
        unless ``with_data``."""
        descriptors = [
            descriptor(tensor, name, self.name) if tensor is not None else None
            for tensor, name in zip(inputs, self.input_names)
        ]
        return descriptors if with_data else [(0, *d[1:]) if d is not None else None for d in descriptors]

    def output_facts(self, problem: Problem) -> tuple[tuple[tuple[int, ...], torch.dtype, torch.device], ...]:
        """(shape, dtype, device) of each output of a problem: dtypes per the schema, from the type variables'
        bindings."""
        device = torch_device(problem.device_type, problem.device_index)
        dtypes = self.schema.output_dtypes(problem.type_bindings)
        return tuple((tuple(shape), torch_dtype(dtype), device) for shape, dtype in zip(problem.output_shapes, dtypes))

    def output_dtypes(self, problem: Problem) -> torch.dtype | tuple[torch.dtype, ...]:
        """The result's dtype (a tuple of them for several outputs), as the correctness gate expects them."""
        dtypes = tuple(dtype for _, dtype, _ in self.output_facts(problem))
        return dtypes[0] if self.output_count == 1 else dtypes

    # -- validation and selection --------------------------------------------------------------------------------

    def full_rank(self, inputs: tuple, out: Any) -> tuple[tuple, Any, VectorPromotion | None]:
        """Vectors among the inputs (the op's ``vectors``, torch.matmul's 1-D operands) as the tensors the schema
        names, views with a size-1 dimension added, and ``out`` as the view the kernel writes; with the promotion,
        or None (inputs and out unchanged) when no input is a vector."""
        if not self.schema.vectors or not all(isinstance(value, torch.Tensor) for value in inputs):
            return inputs, out, None
        shapes = [tensor.shape for tensor in inputs]
        promotion = self.schema.vector_promotion(self.name, shapes)
        if promotion is None:
            return inputs, out, None
        if isinstance(out, torch.Tensor):
            # Checked here, in the caller's terms: the core sees only the promoted view.
            (shape,) = self.schema.output_shapes(self.name, shapes)
            if tuple(out.shape) != tuple(shape):
                raise InvalidArgumentError(f"{self.name}: out has shape {list(out.shape)}; expected shape {list(shape)}")
            out = promotion.promote_output(0, out)
        inputs = tuple(promotion.promote_input(index, tensor) for index, tensor in enumerate(inputs))
        return inputs, out, promotion

    def execution_mode(self, inputs: tuple) -> str:
        """How this call will run: ``"graph"`` inside ``kabi.tuning(mode="graph")`` or while a CUDA graph is being
        captured on the inputs' device, else ``"eager"``."""
        mode = _scopes.execution_mode()
        if mode == "eager" and inputs and isinstance(inputs[0], torch.Tensor) and \
                _scopes.cuda_graph_capturing(inputs[0].device):
            return "graph"
        return mode

    def select(
        self, inputs: tuple, out: Any = None, *, allow_none: bool = False, with_data: bool = False,
        execution_mode: str | None = None, attributes: tuple = (), with_rejected: bool = False,
    ) -> Selection:
        """Validate and select without caching. ``attributes`` are the call's values in schema order, defaults
        filled in. ``with_data`` passes data pointers (alignment is then checked). Vector inputs select the kernel of
        the matrices they stand for (:meth:`full_rank`). ``execution_mode`` (``"eager"`` or ``"graph"``) defaults to
        the call's (:meth:`execution_mode`). The selection's candidates are the eligible ones and the pick (what a
        call and its tuning read), or with ``with_rejected`` every one, each rejection with its reason (what explain
        and verify show): where a GPU's backends register some 260 kernels of an op, the records of the rejected
        ones took most of a selection."""
        inputs, out, _ = self.full_rank(inputs, out)
        tensors = self.check_inputs(inputs, out)
        attributes = self.check_attributes(attributes)
        if execution_mode is None:
            execution_mode = self.execution_mode(tensors)
        complete_registry(_device_type(tensors))
        input_descriptors = self.input_descriptors(tensors, with_data)
        output_descriptors = [
            # Kernels write dense row-major outputs; a strided `out` receives a copy (see _native_launcher), so
            # the core validates it as the dense tensor the kernel will write.
            descriptor(tensor, name, self.name) if tensor.is_contiguous()
            else meta_descriptor(tuple(tensor.shape), tensor.dtype, tensor.device)
            for name, tensor in self._outputs_of(out)
        ]
        if not with_data:
            output_descriptors = [(0, *d[1:]) for d in output_descriptors]
        forced = _scopes.forced_choice(self.name)
        # Read first: a change made while the core selects must make the selection look stale, never current.
        generation = _core.op_generation(self.name)
        # Unverified picks are allowed here because the tuner's miss hook gates a pick before the front uses it.
        raw = _core.select(
            self.name, input_descriptors, output_descriptors, force=forced, use_environment=forced is None,
            allow_unverified=True, allow_failed_gate=_scopes.failed_gate_allowed(), allow_none=allow_none,
            attributes=attributes, execution_mode=execution_mode, with_rejected=with_rejected,
        )
        return Selection.from_core(self.name, raw, forced or _scopes.environment_choice(self.name), execution_mode,
                                   attributes, generation)

    def is_current(self, selection: Selection) -> bool:
        """Whether nothing that can change the op's selections (its kernels, its tuning records, the tuning cache)
        has changed since ``selection`` was made: selecting the same call again (same inputs, attributes, execution
        mode and ``kabi.use`` scope) would give the same answer, which is worth knowing where a GPU's backends register
        some 260 kernels of an op and a selection runs the filters and supports predicates of each."""
        return _core.op_generation(self.name) == selection.generation

    # -- the miss path -------------------------------------------------------------------------------------------

    def miss(self, inputs: tuple, out: Any, attributes: tuple = ()) -> Any:
        """Validate, select, remember the decision, run it.

        Other DLPack arrays (numpy, CuPy, ...) are shared with torch and the call comes back here with tensors
        (kabi.ops._arrays); a decision for inputs that require grad is wrapped so autograd records it
        (kabi.ops._autograd).
        """
        # Stored under the names, which key a decision as their aliases do: kernels and the reference get the names.
        attributes = self.schema.canonical_attributes(attributes)
        if has_foreign_array(inputs, out):
            function = functools.partial(self.function, **self.attribute_map(attributes))
            return call_with_arrays(function, self.name, self.input_names, inputs, out)
        # A process's first call registers the lazily loaded backends (CUDA's), which moves the op's generation: that
        # happens before the miss begins, so that the decision it makes is kept and the next call hits.
        complete_registry(_device_type(inputs))
        generation = self.cache.begin_miss()
        full_inputs, full_out, promotion = self.full_rank(inputs, out)
        selection = self.select(full_inputs, full_out, attributes=attributes)
        hook = _on_selection_miss
        if hook is not None:
            replacement = hook(self, full_inputs, full_out, selection)
            if replacement is not None:
                selection = replacement
                generation = self.cache.begin_miss()
        # The pick of eager calls and, where calls being captured in a CUDA graph have another, that one too: an eager
        # scope's key serves both.
        own = (selection.kernel.name, self.implementation(selection, full_inputs))
        picks = {"eager": own}
        other = self._other_mode_pick(selection, full_inputs, full_out) if _scopes.execution_mode() == "eager" else None
        if other is not None:
            other_mode, other_kernel, other_implementation = other
            picks = {selection.execution_mode: own, other_mode: (other_kernel, other_implementation)}
        outputs = self.output_facts(selection.problem)
        if promotion is not None:
            picks = {mode: (kernel, _with_vectors(run, promotion)) for mode, (kernel, run) in picks.items()}
            (shape, dtype, device), = outputs
            outputs = ((promotion.output_shape(0, shape), dtype, device),)
        if any(getattr(tensor, "requires_grad", False) for tensor in inputs):
            attribute_map = self.attribute_map(attributes)
            picks = {mode: (kernel, differentiable(self.name, run, **attribute_map))
                     for mode, (kernel, run) in picks.items()}
        described = tuple(meta_descriptor(shape, dtype, device) for shape, dtype, device in outputs)
        (kernel, eager_implementation), graph_pick = picks["eager"], picks.get("graph")
        implementation, when_capturing = eager_implementation, None
        if graph_pick is not None:
            graph_kernel, graph_implementation = graph_pick
            device = next(tensor.device for tensor in full_inputs if tensor is not None)
            # This first run asks torch which mode it runs in. The hit path asks the core (csrc/python/front.cpp)
            # where it can learn the current stream, through DLPack's exchange API; elsewhere it runs this wrapper.
            implementation = _by_execution_mode(eager_implementation, graph_implementation, device)
            if _has_exchange_api:
                when_capturing = (graph_implementation, graph_kernel, getattr(graph_implementation, "prepared", None),
                                  getattr(graph_implementation, "allocate_output", None))
        stored = eager_implementation if when_capturing is not None else implementation
        self.cache.store(inputs, attributes, _scopes.active_scope(), stored, described, kernel, generation,
                         native=getattr(stored, "prepared", None),
                         allocate_output=getattr(stored, "allocate_output", None), when_capturing=when_capturing)
        # The first run of a decision; later runs (the hit path) convert a foreign exception through kernel_failed.
        try:
            if out is None:
                return implementation(*inputs)
            return self._run_with_out(implementation, outputs, inputs, out)
        except KabiError:
            raise
        except Exception as error:
            raise self.kernel_failed(selection.kernel.name, error) from error

    def _other_mode_pick(self, selection: Selection, inputs: tuple,
                         out: Any) -> tuple[str, str, Callable[..., Any]] | None:
        """The other execution mode's verified pick (a graph-mode pick timed under graph replay, or the eager pick for
        a miss met during a capture) where it is another kernel than ``selection``'s: (mode, kernel name,
        implementation), else None."""
        if selection.pick_reason != "tuned":
            return None
        other_mode = "eager" if selection.execution_mode == "graph" else "graph"
        other = self.select(inputs, out, execution_mode=other_mode, attributes=selection.attributes)
        picked = other.picked
        if other.kernel is None or not other.verified or other.kernel.name == selection.kernel.name or (
                other_mode == "graph" and picked.tuned_execution_mode != "graph"):
            return None
        return other_mode, other.kernel.name, self.implementation(other, inputs)

    def call_with_out(self, implementation: Callable[..., Any], outputs: tuple, inputs: tuple, out: Any) -> Any:
        """Run a remembered decision with a caller's ``out`` the hit path could not accept in C; ``outputs`` are the
        decision's output descriptors."""
        return self._run_with_out(implementation, tuple(described_facts(output) for output in outputs), inputs, out)

    def _run_with_out(self, implementation: Callable[..., Any], outputs: tuple, inputs: tuple, out: Any) -> Any:
        """Run with a caller's ``out``, after checking each output's shape, dtype and device against the problem's
        result, ``outputs``: one (shape, dtype, device) per output; and that none overlaps an input's memory (the
        core's rule, which a Python implementation or torch's own would not apply: torch.matmul writes into an
        out that aliases an input and returns a wrong product)."""
        given = self._outputs_of(out)
        for (name, tensor), (shape, dtype, device) in zip(given, outputs):
            if tensor.shape != shape or tensor.dtype != dtype or tensor.device != device:
                raise InvalidArgumentError(
                    f"{self.name}: {name} has shape {list(tensor.shape)}, dtype "
                    f"{str(tensor.dtype).removeprefix('torch.')} on {tensor.device}; expected shape {list(shape)}, "
                    f"dtype {str(dtype).removeprefix('torch.')} on {device}"
                )
        _core.check_outputs_do_not_alias_inputs(self.name, self.input_descriptors(inputs),
                                                [descriptor(tensor, name, self.name) for name, tensor in given])
        return implementation(*inputs, out=out if self.output_count == 1 else tuple(out))

    def fresh_call(self, inputs: tuple, out: Any, attributes: tuple = ()) -> Any:
        """Select with the real data pointers and run once, remembering nothing: the fallback when a cached native
        kernel refuses this call's pointers (e.g. alignment). Errors of this launch propagate. The pick runs only
        once it has passed the correctness gate on the problem: one without a verdict is gated first."""
        selection = self.select(inputs, out, with_data=True, attributes=attributes)
        verifier = _verify_fresh_selection
        if verifier is not None:
            selection = verifier(self, inputs, out, selection)
        kernel = selection.kernel
        if kernel.kind == "external":
            implementation = self._python_kernel(kernel.name, attributes)
            try:
                return implementation(*inputs) if out is None else implementation(*inputs, out=out)
            except KabiError:
                raise
            except Exception as error:
                raise self.kernel_failed(kernel.name, error) from error
        given = [tensor for _, tensor in self._outputs_of(out)] or [None] * self.output_count
        results = [
            tensor if tensor is not None and tensor.is_contiguous() else torch.empty(shape, dtype=dtype, device=device)
            for tensor, (shape, dtype, device) in zip(given, self.output_facts(selection.problem))
        ]
        device = results[0].device
        stream = _current_cuda_stream(device.index or 0) if device.type == "cuda" else 0
        _core.launch(self.name, kernel.name, self.input_descriptors(inputs), [descriptor(t) for t in results], stream,
                     attributes)
        return self._written(results, out)

    def _written(self, results: list[torch.Tensor], out: Any) -> Any:
        """The call's result from the outputs a kernel wrote: the caller's ``out`` (copied into where the kernel
        wrote a dense stand-in for a strided one), else the outputs (one, or a tuple)."""
        if out is None:
            return results[0] if self.output_count == 1 else tuple(results)
        for tensor, result in zip([tensor for _, tensor in self._outputs_of(out)], results):
            if result is not tensor:
                tensor.copy_(result)
        return out

    # -- implementations ---------------------------------------------------------------------------------------------

    def implementation(self, selection: Selection, inputs: tuple) -> Callable[..., Any]:
        """A ready-to-call implementation of the selected kernel for this problem, the selection's attributes
        bound: ``implementation(*inputs)`` or ``implementation(*inputs, out=out)``."""
        kernel = selection.kernel
        if kernel.kind != "external":
            return self._native_launcher(kernel.name, selection.problem, inputs, selection.attributes)
        implementation = self._python_kernel(kernel.name, selection.attributes)
        if kernel.alignment > 1:
            implementation = self._aligned(implementation, kernel.alignment, selection.attributes)
        return implementation

    def _python_kernel(self, kernel_name: str, attributes: tuple) -> Callable[..., Any]:
        """A Python kernel with the call's attributes bound as keyword arguments (the kernel convention
        ``fn(*inputs, out=None, **attributes)``). A hit calls the kernel itself with them: the decision table takes a
        ``functools.partial`` of keywords apart (csrc/python/decision_table.hpp), sparing the partial's own call."""
        implementation = _kernel_registration.python_implementation(self.name, kernel_name)
        return functools.partial(implementation, **self.attribute_map(attributes)) if attributes else implementation

    def kernel_failed(self, kernel_name: str, error: Exception) -> KernelFailedError:
        """The kabi error for a Python kernel that raised a foreign exception (the caller chains the original; the
        hit path, csrc/python/front.cpp, does so for a remembered decision's kernel). Native kernels report their
        failures through libkabi as this error already."""
        return KernelFailedError(f"kernel {self.name}/{kernel_name} failed: {type(error).__name__}: {error}")

    def _aligned(self, implementation: Callable[..., Any], alignment: int, attributes: tuple) -> Callable[..., Any]:
        """A Python kernel declaring an alignment, guarded the way the core guards native launches: a call whose
        data pointers miss it is selected afresh (with the pointers) instead."""
        fresh_call = self.fresh_call
        outputs_of = self._outputs_of

        def aligned(*inputs: torch.Tensor | None, out: Any = None) -> Any:
            tensors = [tensor for tensor in inputs if tensor is not None] + [tensor for _, tensor in outputs_of(out)]
            if any(tensor.data_ptr() % alignment for tensor in tensors):
                return fresh_call(inputs, out, attributes)
            return implementation(*inputs) if out is None else implementation(*inputs, out=out)

        return aligned

    def _native_launcher(self, kernel_name: str, problem: Problem, inputs: tuple,
                         attributes: tuple = ()) -> Callable[..., Any]:
        """A launcher bound to the problem: allocates the outputs and hands only data pointers to the core.

        A launch refused for this call's pointers (``ConstraintViolatedError``, e.g. a misaligned view) falls back
        to a fresh selection for this call; a launch prepared against an older kernel table selects again."""
        outputs = self.output_facts(problem)
        prepared = _core.PreparedLaunch(
            self.name,
            kernel_name,
            self.input_descriptors(inputs, with_data=False),
            [meta_descriptor(shape, dtype, device) for shape, dtype, device in outputs],
            attributes=attributes,
        )
        device = outputs[0][2]
        empty = torch.empty
        miss = self.miss
        fresh_call = self.fresh_call
        run = prepared
        if device.type == "cuda" and _has_exchange_api:
            # Kernels run on torch's current stream of the device (a side stream, a CUDA-graph capture stream),
            # which the core asks torch for through DLPack's exchange API.
            run = prepared.on_current_stream
        elif device.type == "cuda":
            current_stream, index, on_stream = _current_cuda_stream, device.index or 0, prepared.on_stream

            def run(*tensors: torch.Tensor | None) -> None:
                on_stream(current_stream(index), *tensors)

        if self.output_count == 1:
            ((shape, dtype, _),) = outputs

            def launch(*inputs: torch.Tensor | None, out: torch.Tensor | None = None) -> torch.Tensor:
                result = empty(shape, dtype=dtype, device=device) if out is None or not out.is_contiguous() else out
                try:
                    run(*inputs, result)
                except ConstraintViolatedError:
                    return fresh_call(inputs, out, attributes)
                except StaleDecisionError:
                    return miss(inputs, out, attributes)
                if out is not None and result is not out:
                    out.copy_(result)
                    return out
                return result

            # What the hit path needs to run this launch itself (csrc/python/front.cpp), with no Python frame.
            launch.prepared = prepared  # type: ignore[attr-defined]
            launch.allocate_output = functools.partial(empty, shape, dtype=dtype, device=device)  # type: ignore[attr-defined]

        else:
            written = self._written

            def launch(*inputs: torch.Tensor | None, out: tuple | None = None) -> tuple:
                given = out if out is not None else (None,) * len(outputs)
                results = [
                    tensor if tensor is not None and tensor.is_contiguous() else empty(shape, dtype=dtype, device=device)
                    for tensor, (shape, dtype, _) in zip(given, outputs)
                ]
                try:
                    run(*inputs, *results)
                except ConstraintViolatedError:
                    return fresh_call(inputs, out, attributes)
                except StaleDecisionError:
                    return miss(inputs, out, attributes)
                return written(results, out)

        launch.kernel_name = kernel_name  # type: ignore[attr-defined]
        return launch
