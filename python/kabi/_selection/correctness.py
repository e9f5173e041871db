"""The correctness gate's comparison of a candidate's output with the op's reference (the inputs it runs on are
the input generator's, :mod:`kabi.ops._inputs`).

Before a candidate may win, its output on the tuning inputs must match the op's reference, computed in float64
(complex128 for complex dtypes) on the same (already rounded) inputs, within the op's tolerance for the dtype
(``[tolerance.<dtype>]`` in ``registry/ops/<op>.toml``):

- norm:    ``||out - ref|| / ||ref||`` (Frobenius) at most ``norm``;
- extreme: ``max |out - ref| / max |ref|`` at most ``extreme``, so one wrong element cannot hide in a large norm;
- no NaN or Inf in ``out`` where ``ref`` is finite.

Integer outputs must equal the reference exactly: it runs in int64 and wraps to the dtype, as integer arithmetic
in the dtype itself does.

Example::

    >>> import torch
    >>> from kabi._base.declarations import op_spec
    >>> a = torch.randn(8, 4)
    >>> check_output(a.clone(), a.double(), op_spec("matmul").tolerance["float32"]) is None
    True
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from .._base.declarations import Tolerance
from ..ops._references import takes_inputs_as_given, widened, widest_dtype

__all__ = ["reference_output", "check_output"]


def reference_output(reference: Any, inputs: Sequence[Any],
                     attributes: Mapping[str, Any] | None = None) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """The reference's output in the widest dtype of its kind (float64, complex128, int64), on inputs widened to it
    (the values the candidates see, exactly; a reference marked ``widens_its_own_inputs`` gets them as they
    are), with the call's attributes by name. An integer result is then wrapped back to the inputs' dtype, so it is
    what exact arithmetic in that dtype gives. An op of several outputs has a tuple of them."""
    tensors = [item for item in inputs if isinstance(item, torch.Tensor)]
    dtype = tensors[0].dtype if tensors else torch.float64
    if not takes_inputs_as_given(reference):
        inputs = [widened(item) if isinstance(item, torch.Tensor) else item for item in inputs]
    output = reference(*inputs, **(attributes or {}))
    if isinstance(output, tuple):
        return tuple(_widened_output(item, dtype) for item in output)
    return _widened_output(output, dtype)


def _widened_output(output: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if dtype.is_floating_point or dtype.is_complex:
        return output.to(widest_dtype(dtype))
    return output.to(dtype)


def _first_nonfinite_kind(values: torch.Tensor) -> str:
    return "NaN" if bool(torch.isnan(values).any()) else "Inf"


def check_output(output: Any, reference: torch.Tensor | tuple[torch.Tensor, ...], tolerance: Tolerance,
                 expected_dtype: torch.dtype | tuple[torch.dtype, ...] | None = None) -> str | None:
    """None when ``output`` matches the :func:`reference_output` ``reference`` (exactly for integers, within
    ``tolerance`` otherwise); otherwise why not, as a short note for the tuning cache ("wrong result: norm error
    3.1e-01 > 2e-05", "NaN in output"). For several outputs, ``reference`` and ``expected_dtype`` are tuples and
    each output is checked ("output 1: NaN in output")."""
    if isinstance(reference, tuple):
        if not isinstance(output, (tuple, list)) or len(output) != len(reference):
            return f"returned {type(output).__name__}, expected a tuple of {len(reference)} tensors"
        dtypes = expected_dtype if expected_dtype is not None else (None,) * len(reference)
        for index, (item, expected, dtype) in enumerate(zip(output, reference, dtypes)):
            note = check_output(item, expected, tolerance, dtype)
            if note is not None:
                return f"output {index}: {note}"
        return None
    if not isinstance(output, torch.Tensor):
        return f"returned {type(output).__name__}, expected a tensor"
    if tuple(output.shape) != tuple(reference.shape):
        return f"wrong shape {list(output.shape)}, expected {list(reference.shape)}"
    if expected_dtype is not None and output.dtype != expected_dtype:
        return f"wrong dtype {str(output.dtype).removeprefix('torch.')}, expected {str(expected_dtype).removeprefix('torch.')}"
    if output.device != reference.device:
        return f"output on {output.device}, expected {reference.device}"
    if not (reference.dtype.is_floating_point or reference.dtype.is_complex):
        differing = int((output.detach().to(reference.dtype) != reference).sum())
        return f"wrong result: {differing} elements differ from the exact reference" if differing else None
    actual = output.detach().to(reference.dtype)
    reference_finite = torch.isfinite(reference)
    unexpected = ~torch.isfinite(actual) & reference_finite
    # Values are read back together: each read of a device's value waits for the device (a GPU gate once read six).
    unexpected_count, nonfinite_references = torch.stack([unexpected.sum(), (~reference_finite).sum()]).tolist()
    if unexpected_count:
        return f"{_first_nonfinite_kind(actual[unexpected])} in output ({unexpected_count} elements)"
    if nonfinite_references:
        mismatched = ~reference_finite & ~((actual == reference) | (torch.isnan(actual) & torch.isnan(reference)))
        if bool(mismatched.any()):
            return f"wrong result: {int(mismatched.sum())} elements differ where the reference is NaN or Inf"
        actual, reference = actual[reference_finite], reference[reference_finite]
    if actual.numel() == 0:
        return None
    difference = actual - reference
    reference_norm, difference_norm, reference_peak, difference_peak = torch.stack([
        torch.linalg.vector_norm(reference), torch.linalg.vector_norm(difference), reference.abs().max(),
        difference.abs().max()]).tolist()
    norm_error = difference_norm / (reference_norm if reference_norm > 0 else 1.0)
    if not norm_error <= tolerance.norm:
        return f"wrong result: norm error {norm_error:.1e} > {tolerance.norm:g}"
    extreme_error = difference_peak / (reference_peak if reference_peak > 0 else 1.0)
    if not extreme_error <= tolerance.extreme:
        return f"wrong result: max error {extreme_error:.1e} > {tolerance.extreme:g} (relative to max |ref|)"
    return None
