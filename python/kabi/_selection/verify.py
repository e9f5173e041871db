"""``kabi.verify``: run the correctness gate offline on a problem for every eligible kernel, plugins included.

libkabi runs, for a C caller, only kernels that passed the op's gate on the problem. A C-only deployment gets those
verdicts from ``kabi verify`` (or this function): each eligible kernel runs once, untimed, on fresh inputs shaped
like ``inputs``, its output is checked against the op's float64 reference, and the verdict goes into the tuning
cache (passed: a ``GATE_ONLY`` record; failed: ``inf`` with the reason). A kernel that already has a timed record
and passes again keeps its timing. Kernels whose recorded verdict is a failure are listed, not gated again.

Example::

    >>> report = kabi.verify(kabi.ops.matmul, torch.empty(64, 32), torch.empty(32, 16))  # doctest: +SKIP
    >>> print(report)                                                                     # doctest: +SKIP
    matmul float32|contiguous,contiguous|1|64|16|32 on cpu: 2 of 2 passed
      cpu.openblas.gemm  passed
      torch.matmul.cpu   passed
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from .._base.errors import NoEligibleKernelError
from ..ops._front import front_of
from .gate import gate_kernel, measurement_lock, record_verdicts

__all__ = ["KernelVerdict", "VerifyReport", "verify"]


@dataclass(frozen=True)
class KernelVerdict:
    """One kernel's gate verdict on the problem: whether it passed, why not, and whether it ran now."""

    kernel: str
    passed: bool
    note: str
    gated_now: bool


@dataclass(frozen=True)
class VerifyReport:
    """The verdicts of one problem's kernels."""

    op: str
    problem: str
    device: str
    verdicts: tuple[KernelVerdict, ...]

    @property
    def passed(self) -> bool:
        """Whether at least one kernel passed, so that strict selection (C callers) has a pick."""
        return any(verdict.passed for verdict in self.verdicts)

    def __str__(self) -> str:
        passed = sum(verdict.passed for verdict in self.verdicts)
        width = max((len(verdict.kernel) for verdict in self.verdicts), default=6)
        lines = [f"{self.op} {self.problem} on {self.device}: {passed} of {len(self.verdicts)} passed"]
        for verdict in self.verdicts:
            outcome = "passed" if verdict.passed else f"failed: {verdict.note}"
            lines.append(f"  {verdict.kernel:<{width}}  {outcome}{'' if verdict.gated_now else ' (recorded earlier)'}")
        return "\n".join(lines)


_RECORDED_FAILURE = "failed the correctness gate on this problem"


def verify(op: Any, *inputs: torch.Tensor) -> VerifyReport:
    """Gate every eligible kernel of ``op`` on a problem like ``inputs`` (only their shapes, strides, dtypes and
    devices are used) and record the verdicts. This is ``kabi verify``.

    Example::

        report = kabi.verify(kabi.ops.matmul, torch.empty(64, 32), torch.empty(32, 16))
        report.passed  # True when at least one kernel may serve the problem
    """
    front = front_of(op)
    with measurement_lock:
        selection = front.select(inputs, allow_none=True, with_rejected=True)
        if selection.problem is None:
            raise NoEligibleKernelError(f"verify: {selection.error}")
        eligible = [candidate for candidate in selection.candidates if candidate.eligible]
        earlier = [candidate for candidate in selection.candidates
                   if candidate.gate == "failed" and candidate.reason.startswith(_RECORDED_FAILURE)]
        if not eligible and not earlier:
            raise NoEligibleKernelError(f"verify: nothing to gate: {selection.error}")
        notes = {candidate.name: gate_kernel(front, inputs, dataclasses.replace(selection, kernel=candidate.kernel))
                 for candidate in eligible}
        timed = {candidate.name for candidate in eligible if candidate.gate == "passed, timed"}
        new_verdicts = {name: note for name, note in notes.items() if note is not None or name not in timed}
        if new_verdicts:
            record_verdicts(front, inputs, new_verdicts)
    verdicts = [KernelVerdict(name, note is None, note or "", True) for name, note in notes.items()]
    verdicts += [KernelVerdict(candidate.name, False, candidate.reason.removeprefix(_RECORDED_FAILURE + ": "), False)
                 for candidate in earlier]
    problem = selection.problem
    return VerifyReport(front.name, problem.key, problem.device, tuple(verdicts))
