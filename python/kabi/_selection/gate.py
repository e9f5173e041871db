"""The correctness gate once per (problem, kernel): nothing serves a problem before it has passed the op's gate on it.

When the tuning policy measures a problem (:mod:`kabi._selection.tuner`), every candidate is gated on the way. When
it does not (``KABI_TUNE=off``, a forced kernel), the core's pick may have no verdict on the problem yet; then
:func:`gate_until_verified` runs it once, untimed, on fresh inputs shaped like the caller's, checks the output
against the op's float64 reference, and records the verdict in the tuning cache (``GATE_ONLY`` when it passed,
``inf`` with the reason when it failed). A failed kernel is no longer eligible for the problem, so selecting again
yields the next candidate, which is gated in turn. Later processes and C callers reuse the verdicts.

Under CUDA-graph capture or torch.compile tracing no kernel may run for the gate: a pick with a passing verdict is
used, and a real-tensor call whose pick has none fails, asking to call the op once before capturing. Fake and meta
tensors run no kernel on data, so they need no verdict. Each rank of a distributed job gates on its own.

Example::

    >>> with kabi.tuning("off"):                       # doctest: +SKIP
    ...     kabi.ops.matmul(a, b)   # the heuristic pick is gated once, then used
    >>> [r.gate_only for r in kabi.cache.show("matmul")]  # doctest: +SKIP
    [True]
"""

from __future__ import annotations

import contextvars
import functools
import math
import threading
from typing import Any, Callable, Sequence

import torch

from .. import _core
from .._base.declarations import resolve_callable
from .._base.errors import NoEligibleKernelError
from ..ops import _stats
from ..ops._front import OpFront, Selection
from ..ops._inputs import inputs_like
from .measure import gate_once
from .tuning_policy import inputs_are_fake, measurement_blocked_reason

__all__ = ["bound_reference", "gate_kernel", "gate_until_verified", "inside_measurement", "measurement_lock",
           "record_verdicts"]

# One problem is measured or gated at a time: concurrent measurements would disturb each other's timings.
measurement_lock = threading.RLock()
# Set while candidates run, so a kernel that itself calls a kabi op does not start a nested tuning or gate run.
inside_measurement: contextvars.ContextVar[bool] = contextvars.ContextVar("kabi_inside_measurement", default=False)


def bound_reference(front: OpFront, selection: Selection) -> Callable[..., Any]:
    """The op's reference with the selection's attributes bound as keyword arguments."""
    reference = resolve_callable(front.spec.reference)
    attributes = front.attribute_map(selection.attributes)
    return functools.partial(reference, **attributes) if attributes else reference


def gate_kernel(front: OpFront, inputs: Sequence[torch.Tensor | None], selection: Selection) -> str | None:
    """Run the selection's kernel once, untimed, on fresh inputs like ``inputs``, through the implementation the
    front would cache, and check it against the reference. Returns why it failed, or None when it passed. Running
    out of device memory is no verdict on the kernel: ``torch.OutOfMemoryError`` propagates, and nothing is
    recorded."""
    make_inputs = lambda: inputs_like(front.spec, inputs, front.attribute_map(selection.attributes))
    try:
        implementation = front.implementation(selection, tuple(make_inputs()))
    except torch.OutOfMemoryError as error:
        raise _without_verdict(error, selection)
    except Exception as error:
        return f"cannot be prepared: {type(error).__name__}: {error}"
    token = inside_measurement.set(True)
    try:
        return gate_once(implementation, make_inputs, bound_reference(front, selection),
                         front.spec.tolerance[selection.problem.dtype],
                         expected_dtype=front.output_dtypes(selection.problem))
    except torch.OutOfMemoryError as error:
        raise _without_verdict(error, selection)
    finally:
        inside_measurement.reset(token)


def _without_verdict(error: torch.OutOfMemoryError, selection: Selection) -> torch.OutOfMemoryError:
    problem = selection.problem
    error.add_note(f"kabi: gating {selection.kernel.name} on {problem.dtype} {problem.key} on {problem.device} (fresh "
                   f"inputs like the call's, and the op's reference) ran out of device memory; no verdict was recorded")
    return error


def record_verdicts(front: OpFront, inputs: Sequence[torch.Tensor | None], verdicts: dict[str, str | None],
                    attributes: tuple = ()) -> None:
    """Record gate verdicts (kernel -> None when it passed, else why it failed) for the problem of ``inputs`` and
    ``attributes``."""
    descriptors = front.input_descriptors(tuple(inputs))
    records = [
        (kernel, 0.0, "", _core.TUNING_RECORD_GATE_ONLY, 0.0) if note is None else (kernel, math.inf, note, 0, 0.0)
        for kernel, note in verdicts.items()
    ]
    _core.tuning_store(front.name, descriptors, [], records, attributes)
    _stats.count("gate_failures", sum(note is not None for note in verdicts.values()))


def _unverified(selection: Selection) -> bool:
    picked = selection.picked
    return picked is not None and picked.gate == "none"


def gate_until_verified(front: OpFront, inputs: tuple, out: torch.Tensor | None, selection: Selection, *,
                        with_data: bool = False) -> Selection:
    """The selection to use for the call: ``selection`` when its pick has a verdict on the problem, else the first
    pick that passes the gate (each pick gated once, its verdict recorded, then selected again, with the inputs'
    data pointers when ``with_data``, as ``selection`` was). Raises
    ``NoEligibleKernelError`` when every candidate fails, or when the gate cannot run now (capture, tracing)."""
    if not _unverified(selection) or inputs_are_fake(inputs):
        return selection
    blocked = measurement_blocked_reason(inputs)
    problem = selection.problem
    if blocked is not None:
        raise NoEligibleKernelError(
            f"{front.name}: no kernel has passed the correctness gate on {problem.dtype} {problem.key} on "
            f"{problem.device} yet, and the gate cannot run now ({blocked}); call the op once with these shapes "
            f"before capturing or compiling, or verify the problem offline (kabi verify {front.name} ...)"
        )
    with measurement_lock:
        attributes = selection.attributes
        selection = front.select(inputs, out, allow_none=True, with_data=with_data, attributes=attributes)
        while _unverified(selection):
            record_verdicts(front, inputs, {selection.kernel.name: gate_kernel(front, inputs, selection)}, attributes)
            selection = front.select(inputs, out, allow_none=True, with_data=with_data, attributes=attributes)
    if selection.kernel is None:
        raise NoEligibleKernelError(selection.error)
    return selection
