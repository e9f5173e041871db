"""What the interpreter workers (``*_interpreter_worker.py``) measure of a result: shared by them, imported from the
worker's own directory (a script's directory leads sys.path). Imports only torch, so a worker can import it after
setting TRITON_INTERPRET."""

from __future__ import annotations

import torch


def relative_errors(out: torch.Tensor, reference: torch.Tensor) -> tuple[float, float]:
    """``out``'s error against a float64 ``reference``: the norm of the difference over the reference's norm, and the
    largest difference over the reference's largest magnitude."""
    difference = out.double() - reference
    return ((difference.norm() / reference.norm()).item(),
            (difference.abs().max() / reference.abs().max()).item())
