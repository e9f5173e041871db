"""The op front: validation, selection and the per-op decision cache behind every ``kabi.ops.<op>``.

A call builds a lean key from what selection depends on — each input's shape, strides, dtype, device and
requires_grad, plus the active ``kabi.use`` scope — and looks it up in the op's decision cache (for two-input ops
the hit path runs in C, csrc/python/front.cpp, and plain tensors are first looked up in the cache's C memo by the
same facts read through DLPack's C exchange API, without building the key tuple). A hit calls the cached implementation
directly: the Python kernel itself, or a native launcher bound to the problem (it allocates the output and passes
only data pointers to the core). Validation is skipped on a hit because the key implies it; ``out=`` is checked on
every call that gives it.

A miss validates (Python-only checks: the number of inputs, that each is a tensor, that all share a device; then
the core's ``kabi_problem_describe`` through ``kabi_select``, whose messages name the argument and what was
expected), selects, offers the selection to the tuning hook, builds the implementation, remembers it, and runs it.

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

import inspect
from dataclasses import dataclass
from typing import Any, Callable

import torch

from .. import _core
from .._base.core_answers import Candidate, KernelInfo, Problem
from .._base.decision_cache import DecisionCache
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
from .._base.tensors import check_array, descriptor, meta_descriptor, torch_device, torch_dtype
from .._plugins.discovery import complete_registry
from . import _kernel_registration, _scopes
from ._arrays import call_with_arrays, has_foreign_array
from ._autograd import differentiable
from ._schema import VectorPromotion, op_schema

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


def front_of(op: Any) -> OpFront:
    """The dispatcher behind an op, given its name or its ``kabi.ops`` function."""
    try:
        return _fronts[op_name_of(op)]
    except (KeyError, ArgumentTypeError):
        raise unknown_op(op, _fronts) from None


@dataclass(frozen=True)
class Selection:
    """The core's answer for one problem: the kernel (None when nothing is eligible), why, whether it has passed
    the correctness gate on the problem (``verified``), every candidate, and the execution mode it was made for
    (``"eager"``, or ``"graph"``: replayed in a CUDA graph)."""

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

    @property
    def picked(self) -> Candidate | None:
        """The candidate of the pick, or None."""
        return next((candidate for candidate in self.candidates if candidate.picked), None)

    @classmethod
    def from_core(cls, op: str, raw: dict, forced: str | None, execution_mode: str = "eager") -> Selection:
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
        )


def _key(inputs: tuple, scope: Any) -> tuple:
    """The decision-cache key: what selection depends on (dtypes, devices, the ``kabi.use`` scope, shapes,
    strides) and whether an input requires grad (those decisions are wrapped for autograd). For two inputs it is flat, with plain ints that hash and compare faster than torch.Size objects;
    csrc/python/front.cpp builds the same tuple on the hit path."""
    if len(inputs) == 2:
        a, b = inputs
        return (
            a.dtype, b.dtype, a.device, b.device, a.requires_grad, b.requires_grad, scope, a.dim(),
            *a.shape, *a.stride(), *b.shape, *b.stride(),
        )
    return (*[(t.shape, t.stride(), t.dtype, t.device, t.requires_grad) for t in inputs], scope)


def _by_execution_mode(eager: Callable[..., Any], graph: Callable[..., Any], device: torch.device) -> Callable[..., Any]:
    """One decision for two picks: ``graph`` while a CUDA graph is being captured on ``device``, else ``eager``. Only
    decisions whose modes pick different kernels pay for the capture check."""

    def by_execution_mode(*inputs: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
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
        self.cache = DecisionCache(spec.name)
        self.function = self._make_function()
        _fronts[self.name] = self

    # -- the public callable -----------------------------------------------------------------------------------

    def _make_function(self) -> Callable[..., Any]:
        entries = self.cache.entries
        count_hit = self.cache.memo.count_hit
        count_miss = self.cache.memo.count_miss
        active_scope = _scopes.active_scope
        miss = self.miss
        call_with_out = self.call_with_out
        kernel_failed = self.kernel_failed

        if len(self.input_names) == 2:
            # The hit path in C (csrc/python/front.cpp): same key, same entries; misses and out= come back here.
            arguments = ", ".join(self.input_names)
            return _core.make_two_input_front(
                self.name,
                f"{self.name}({arguments}, /, *, out=None)\n--\n\n{self._docstring()}",
                "kabi.ops",
                entries,
                _scopes.scope_variable,
                miss,
                call_with_out,
                kernel_failed,
                self.cache.memo,
                [torch.Tensor, torch.nn.Parameter],
            )

        def op(*inputs: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
            try:
                key = _key(inputs, active_scope())
                implementation = entries[key]
            except (KeyError, AttributeError, TypeError, ValueError):
                implementation = None
            if implementation is None:
                count_miss()
                return miss(inputs, out)
            count_hit()
            try:
                if out is None:
                    return implementation(*inputs)
                return call_with_out(implementation, key, inputs, out)
            except KabiError:
                raise
            except Exception as error:
                raise kernel_failed(key, error) from error

        op.__name__ = op.__qualname__ = self.name
        op.__module__ = "kabi.ops"
        op.__doc__ = self._docstring()
        op.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter(name, inspect.Parameter.POSITIONAL_ONLY) for name in self.input_names]
            + [inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=None)]
        )
        return op

    def _docstring(self) -> str:
        spec = self.spec
        tolerances = ", ".join(
            f"{dtype} {t.norm:g}" if dtype not in EXACT_DTYPES else f"{dtype} exact" for dtype, t in spec.tolerance.items()
        )
        vectors = "".join(f"{name} may be a vector, without {dim}; out then lacks {dim} too. " for name, dim in spec.vectors.items())
        arguments = ", ".join(self.input_names)
        return (
            f"{spec.summary}.\n\n"
            f"    {spec.schema}\n\n"
            f"{vectors}dtypes: {', '.join(spec.dtypes)}. Runs the fastest correct kernel registered for the inputs' "
            f"device; checked against {spec.reference} (relative error bound: {tolerances}).\n"
            f"``out``, when given, must have the result's shape, dtype and device; it is written and returned.\n\n"
            f"Example::\n\n    >>> kabi.ops.{spec.name}({arguments})\n\n"
            f"Generated from {spec.path.name}; see kabi.explain(kabi.ops.{spec.name}, {arguments}) for the pick."
        )

    # -- validation and selection --------------------------------------------------------------------------------

    def check_inputs(self, inputs: tuple, out: Any) -> tuple[torch.Tensor, ...]:
        """The Python-only checks, made before the core validates shapes and dtypes."""
        if len(inputs) != len(self.input_names):
            raise ArgumentTypeError(
                f"{self.name} takes {len(self.input_names)} inputs ({', '.join(self.input_names)}), got {len(inputs)}"
            )
        tensors = tuple(check_array(value, name, self.name) for value, name in zip(inputs, self.input_names))
        if out is not None:
            check_array(out, "out", self.name)
        devices = [(name, t.device) for name, t in zip(self.input_names, tensors)]
        if out is not None:
            devices.append(("out", out.device))
        if len({device for _, device in devices}) > 1:
            listing = ", ".join(f"{name} on {device}" for name, device in devices)
            raise InvalidArgumentError(f"{self.name}: all tensors must be on one device; got {listing}")
        return tensors

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
        self, inputs: tuple, out: torch.Tensor | None = None, *, allow_none: bool = False, with_data: bool = False,
        execution_mode: str | None = None,
    ) -> Selection:
        """Validate and select without caching. ``with_data`` passes data pointers (alignment is then checked).
        Vector inputs select the kernel of the matrices they stand for (:meth:`full_rank`). ``execution_mode``
        (``"eager"`` or ``"graph"``) defaults to the call's (:meth:`execution_mode`)."""
        inputs, out, _ = self.full_rank(inputs, out)
        tensors = self.check_inputs(inputs, out)
        if execution_mode is None:
            execution_mode = self.execution_mode(tensors)
        complete_registry(tensors[0].device.type if tensors else None)
        input_descriptors = [descriptor(t, name, self.name) for t, name in zip(tensors, self.input_names)]
        output_descriptors = [descriptor(out, "out", self.name)] if out is not None else []
        if out is not None and not out.is_contiguous():
            # Kernels write dense row-major outputs; a strided `out` receives a copy (see _native_launcher), so
            # the core validates it as the dense tensor the kernel will write.
            output_descriptors = [meta_descriptor(tuple(out.shape), out.dtype, out.device)]
        if not with_data:
            input_descriptors = [(0, *d[1:]) for d in input_descriptors]
            output_descriptors = [(0, *d[1:]) for d in output_descriptors]
        forced = _scopes.forced_choice(self.name)
        # Unverified picks are allowed here because the tuner's miss hook gates a pick before the front uses it.
        raw = _core.select(
            self.name, input_descriptors, output_descriptors, force=forced, use_environment=forced is None,
            allow_unverified=True, allow_failed_gate=_scopes.failed_gate_allowed(), allow_none=allow_none,
            execution_mode=execution_mode,
        )
        return Selection.from_core(self.name, raw, forced or _scopes.environment_choice(self.name), execution_mode)

    # -- the miss path -------------------------------------------------------------------------------------------

    def miss(self, inputs: tuple, out: torch.Tensor | None) -> torch.Tensor:
        """Validate, select, remember the decision, run it.

        Other DLPack arrays (numpy, CuPy, ...) are shared with torch and the call comes back here with tensors
        (kabi.ops._arrays); a decision for inputs that require grad is wrapped so autograd records it
        (kabi.ops._autograd).
        """
        if has_foreign_array(inputs, out):
            return call_with_arrays(self.function, self.name, self.input_names, inputs, out)
        generation = self.cache.begin_miss()
        full_inputs, full_out, promotion = self.full_rank(inputs, out)
        selection = self.select(full_inputs, full_out)
        hook = _on_selection_miss
        if hook is not None:
            replacement = hook(self, full_inputs, full_out, selection)
            if replacement is not None:
                selection = replacement
                generation = self.cache.begin_miss()
        implementation = self.implementation(selection, full_inputs)
        if _scopes.execution_mode() == "eager":
            implementation = self._for_both_modes(selection, implementation, full_inputs, full_out)
        problem = selection.problem
        output_shape = problem.output_shape
        if promotion is not None:
            implementation = _with_vectors(implementation, promotion)
            output_shape = promotion.output_shape(0, output_shape)
        if any(getattr(tensor, "requires_grad", False) for tensor in inputs):
            implementation = differentiable(self.name, implementation)
        key = _key(inputs, _scopes.active_scope())
        expected = (output_shape, torch_dtype(problem.dtype), torch_device(problem.device_type, problem.device_index))
        self.cache.store(key, implementation, expected, generation, selection.kernel.name)
        # The first run of a decision; later runs (the hit path) convert a foreign exception through kernel_failed.
        try:
            if out is None:
                return implementation(*inputs)
            return self._run_with_out(implementation, expected, inputs, out)
        except KabiError:
            raise
        except Exception as error:
            raise self._kernel_failed(selection.kernel.name, error) from error

    def _for_both_modes(self, selection: Selection, implementation: Callable[..., Any], inputs: tuple,
                        out: torch.Tensor | None) -> Callable[..., Any]:
        """The implementation to remember under an eager scope's key, which eager calls and calls being captured in
        a CUDA graph share: where the other mode's verified pick (a graph-mode pick timed under graph replay, or the
        eager pick for a miss met during a capture) is another kernel, one that runs each call's own pick."""
        if selection.pick_reason != "tuned":
            return implementation
        other_mode = "eager" if selection.execution_mode == "graph" else "graph"
        other = self.select(inputs, out, execution_mode=other_mode)
        picked = other.picked
        if other.kernel is None or not other.verified or other.kernel.name == selection.kernel.name or (
                other_mode == "graph" and picked.tuned_execution_mode != "graph"):
            return implementation
        other_implementation = self.implementation(other, inputs)
        if other_mode == "graph":
            return _by_execution_mode(implementation, other_implementation, inputs[0].device)
        return _by_execution_mode(other_implementation, implementation, inputs[0].device)

    def call_with_out(self, implementation: Callable[..., Any], key: Any, inputs: tuple, out: Any) -> torch.Tensor:
        """Run a remembered decision with a caller's ``out``; a decision forgotten since it was found (another
        thread invalidated the cache) is made afresh."""
        expected = self.cache.expected_output(key)
        if expected is None:
            return self.miss(inputs, out)
        return self._run_with_out(implementation, expected, inputs, out)

    def _run_with_out(self, implementation: Callable[..., Any], expected: tuple, inputs: tuple, out: Any) -> torch.Tensor:
        """Run with a caller's ``out``, after checking its shape, dtype and device against the problem's result."""
        shape, dtype, device = expected
        if not isinstance(out, torch.Tensor):
            check_array(out, "out", self.name)
        if out.shape != shape or out.dtype != dtype or out.device != device:
            raise InvalidArgumentError(
                f"{self.name}: out has shape {list(out.shape)}, dtype {str(out.dtype).removeprefix('torch.')} on "
                f"{out.device}; expected shape {list(shape)}, dtype {str(dtype).removeprefix('torch.')} on {device}"
            )
        return implementation(*inputs, out=out)

    def fresh_call(self, inputs: tuple, out: torch.Tensor | None) -> torch.Tensor:
        """Select with the real data pointers and run once, remembering nothing: the fallback when a cached native
        kernel refuses this call's pointers (e.g. alignment). Errors of this launch propagate. The pick runs only
        once it has passed the correctness gate on the problem: one without a verdict is gated first."""
        selection = self.select(inputs, out, with_data=True)
        verifier = _verify_fresh_selection
        if verifier is not None:
            selection = verifier(self, inputs, out, selection)
        kernel = selection.kernel
        if kernel.kind == "external":
            implementation = _kernel_registration.python_implementation(self.name, kernel.name)
            try:
                return implementation(*inputs) if out is None else implementation(*inputs, out=out)
            except KabiError:
                raise
            except Exception as error:
                raise self._kernel_failed(kernel.name, error) from error
        problem = selection.problem
        result = out
        if result is None or not result.is_contiguous():
            device = torch_device(problem.device_type, problem.device_index)
            result = torch.empty(problem.output_shape, dtype=torch_dtype(problem.dtype), device=device)
        stream = _current_cuda_stream(result.device.index or 0) if result.device.type == "cuda" else 0
        _core.launch(self.name, kernel.name, [descriptor(t) for t in inputs], [descriptor(result)], stream)
        if out is not None and result is not out:
            out.copy_(result)
            return out
        return result

    # -- implementations ---------------------------------------------------------------------------------------------

    def implementation(self, selection: Selection, inputs: tuple) -> Callable[..., Any]:
        """A ready-to-call implementation of the selected kernel for this problem."""
        kernel = selection.kernel
        if kernel.kind != "external":
            return self._native_launcher(kernel.name, selection.problem, inputs)
        implementation = _kernel_registration.python_implementation(self.name, kernel.name)
        if kernel.alignment > 1:
            implementation = self._aligned(implementation, kernel.alignment)
        return implementation

    def kernel_failed(self, key: Any, error: Exception) -> KernelFailedError:
        """The error for a remembered decision's kernel that raised a foreign exception on a hit (the hit path,
        csrc/python/front.cpp for two inputs, chains the original)."""
        return self._kernel_failed(self.cache.kernel(key) or "(a decision forgotten since)", error)

    def _kernel_failed(self, kernel_name: str, error: Exception) -> KernelFailedError:
        """The kabi error for a Python kernel that raised a foreign exception (the caller chains the original).
        Native kernels report their failures through libkabi as this error already."""
        return KernelFailedError(f"kernel {self.name}/{kernel_name} failed: {type(error).__name__}: {error}")

    def _aligned(self, implementation: Callable[..., Any], alignment: int) -> Callable[..., Any]:
        """A Python kernel declaring an alignment, guarded the way the core guards native launches: a call whose
        data pointers miss it is selected afresh (with the pointers) instead."""
        fresh_call = self.fresh_call

        def aligned(*inputs: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
            tensors = inputs if out is None else (*inputs, out)
            if any(tensor.data_ptr() % alignment for tensor in tensors):
                return fresh_call(inputs, out)
            return implementation(*inputs) if out is None else implementation(*inputs, out=out)

        return aligned

    def _native_launcher(self, kernel_name: str, problem: Problem, inputs: tuple) -> Callable[..., Any]:
        """A launcher bound to the problem: allocates the output and hands only data pointers to the core.

        A launch refused for this call's pointers (``ConstraintViolatedError``, e.g. a misaligned view) falls back
        to a fresh selection for this call; a launch prepared against an older kernel table selects again."""
        shape = problem.output_shape
        dtype = torch_dtype(problem.dtype)
        device = torch_device(problem.device_type, problem.device_index)
        prepared = _core.PreparedLaunch(
            self.name,
            kernel_name,
            [(0, *descriptor(t)[1:]) for t in inputs],
            [meta_descriptor(shape, dtype, device)],
        )
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

            def run(*tensors: torch.Tensor) -> None:
                on_stream(current_stream(index), *tensors)

        def launch(*inputs: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
            result = empty(shape, dtype=dtype, device=device) if out is None or not out.is_contiguous() else out
            try:
                run(*inputs, result)
            except ConstraintViolatedError:
                return fresh_call(inputs, out)
            except StaleDecisionError:
                return miss(inputs, out)
            if out is not None and result is not out:
                out.copy_(result)
                return out
            return result

        launch.kernel_name = kernel_name  # type: ignore[attr-defined]
        return launch
