"""``kabi.explain``: what a call will do, and why.

The record lists every candidate for the problem's device type, each with a reason: the pick and why, an eligible
kernel that was not picked and why (slower, passed the gate untimed, no verdict yet), a rejected one and the filter
or the correctness-gate failure (wrong result, NaN, raised) that rejected it. A kernel that names the variant it runs
per problem (a cuBLASLt slot kernel names the algorithm its heuristic chose) shows it, in a variant column and after
the pick; a tuning record of another variant is stale, which the candidate's reason says (its problem is tuned
again). Its plan says what the next call of the problem will do under the current policy: use a tuned pick, tune
(naming the kernels it will measure, the current heuristic pick being provisional), or gate the heuristic's pick
once before using it. It prints as plain text (``str``) and as a rich table (``rich.print(record)``).

Example::

    >>> print(kabi.explain(kabi.ops.matmul, torch.randn(64, 32), torch.randn(32, 16)))
    matmul on cpu, problem float32|contiguous,contiguous|1|64|16|32
    pick: cpu.openblas.gemm (provisional; heuristic: any arch, priority 10, among 2 eligible; ...)
    plan: will tune: measures cpu.openblas.gemm, torch.matmul.cpu on the first call
    ...
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from .. import _core
from .._base.core_answers import Candidate, Problem
from ..ops._front import Selection, front_of
from .cache import show
from .tuner import kernels_to_measure, last_report
from .tuning_policy import tuning_blocked_reason

__all__ = ["Explanation", "explain", "gate_notes"]


@dataclass(frozen=True)
class Explanation:
    """What selection decided for one call, and why."""

    op: str
    device: str
    problem_key: str
    problem: Problem | None
    candidates: tuple[Candidate, ...]
    pick: str | None
    pick_reason: str
    reason: str
    forced: str | None
    error: str
    gate_failures: dict[str, str] = field(default_factory=dict)
    """Why each candidate that failed the correctness gate on the problem failed, by kernel name."""
    plan: str = ""
    """What the next call of the problem will do under the current tuning policy ("" when nothing can run)."""
    provisional: bool = False
    """Whether the first call will replace the pick (it tunes the problem)."""
    execution_mode: str = "eager"
    """How the call will run, which decides the times that pick: "eager", or "graph" (replayed in a CUDA graph)."""

    @classmethod
    def from_selection(cls, selection: Selection, gate_failures: dict[str, str] | None = None, plan: str = "",
                       provisional: bool = False) -> Explanation:
        problem = selection.problem
        return cls(
            op=selection.op,
            device=problem.device if problem is not None else "",
            problem_key=problem.key if problem is not None else "",
            problem=problem,
            candidates=selection.candidates,
            pick=selection.kernel.name if selection.kernel is not None else None,
            pick_reason=selection.pick_reason,
            reason=selection.reason,
            forced=selection.forced,
            error=selection.error,
            gate_failures=dict(gate_failures or {}),
            plan=plan,
            provisional=provisional,
            execution_mode=selection.execution_mode,
        )

    def _reason(self, candidate: Candidate, verdict: str) -> str:
        if verdict == "picked":
            return ("provisional: " if self.provisional else "") + (self.reason or self.pick_reason)
        if verdict == "not forced":
            return f"not forced: the call is forced to {self.forced}"
        if verdict != "eligible":
            return candidate.reason
        if candidate.gate == "passed, timed" and candidate.tuned_screened:
            return f"eligible, not picked: screened out ({candidate.tuned_time_us:.2f} us in the screen)"
        if candidate.gate == "passed, timed":
            return f"eligible, not picked: slower ({candidate.tuned_time_us:.2f} us)"
        if candidate.gate == "passed, untimed":
            return "eligible, not picked: passed the gate, untimed"
        if candidate.stale_variant is not None:
            return "eligible, not picked: no verdict yet on the variant it runs now"
        return "eligible, not picked: no verdict yet (not gated on this problem)"

    @property
    def pick_variant(self) -> str:
        """The variant the pick runs for the problem ("" when it names none)."""
        return next((candidate.variant for candidate in self.candidates if candidate.picked), "")

    def _shows_variants(self) -> bool:
        return any(candidate.variant or candidate.stale_variant is not None for candidate in self.candidates)

    def _rows(self) -> list[tuple[str, ...]]:
        """One row per candidate, in _headers() order."""
        variants = self._shows_variants()
        rows = []
        for candidate in self.candidates:
            kernel = candidate.kernel
            tuned = candidate.tuned_time_us
            time = "-" if tuned is None else ("failed" if math.isinf(tuned) else f"{tuned:.2f} us")
            if tuned is not None and math.isfinite(tuned) and candidate.tuned_execution_mode == "graph":
                time += " (graph)"
            if tuned is not None and candidate.tuned_screened:
                time += " (screened)"
            verdict = "picked" if candidate.picked else ("eligible" if candidate.eligible else "rejected")
            if candidate.gate == "failed" and not candidate.picked:
                verdict = "failed gate"
            if verdict == "eligible" and self.forced and self.forced not in (kernel.name, kernel.backend):
                verdict = "not forced"
            reason = self._reason(candidate, verdict)
            if candidate.stale_variant is not None:
                reason += f"; {_stale_record(candidate)}"
            rows.append((kernel.name, kernel.backend, kernel.kind, kernel.archs_text, str(kernel.priority), verdict,
                         time, *((candidate.variant or "-",) if variants else ()), reason))
        return rows

    def _headers(self) -> tuple[str, ...]:
        """The columns; "variant" only where a candidate names one."""
        leading = ("kernel", "backend", "kind", "archs", "priority", "verdict", "tuned")
        return (*leading, "variant", "reason") if self._shows_variants() else (*leading, "reason")

    def _title(self) -> str:
        forced = f", forced: {self.forced}" if self.forced else ""
        mode = ", selected for CUDA-graph replay" if self.execution_mode == "graph" else ""
        return f"{self.op} on {self.device or '?'}, problem {self.problem_key or '?'}{forced}{mode}"

    def _summary(self) -> str:
        if self.pick is None:
            return f"no eligible kernel: {self.error}"
        provisional = "provisional; " if self.provisional else ""
        variant = f", variant {self.pick_variant}" if self.pick_variant else ""
        return f"pick: {self.pick}{variant} ({provisional}{self.reason or self.pick_reason})"

    def __str__(self) -> str:
        headers = self._headers()
        rows = [headers, *self._rows()]
        widths = [max(len(row[i]) for row in rows) for i in range(len(headers) - 1)]
        lines = [self._title(), self._summary(), *([f"plan: {self.plan}"] if self.plan else [])]
        for row in rows:
            cells = [cell.ljust(width) for cell, width in zip(row, widths)]
            lines.append("  " + "  ".join([*cells, row[-1]]).rstrip())
        return "\n".join(lines)

    def __rich__(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        table = Table(title=self._title(), title_justify="left", show_lines=False)
        for header in self._headers():
            table.add_column(header, overflow="fold")
        styles = {"picked": "bold green", "eligible": "", "not forced": "dim", "rejected": "dim", "failed gate": "red"}
        for row in self._rows():
            table.add_row(*row, style=styles[row[5]])
        summary = Text(self._summary(), style="bold" if self.pick else "bold red")
        return Group(table, summary, *([Text(f"plan: {self.plan}")] if self.plan else []))


def _stale_record(candidate: Candidate) -> str:
    """Why the candidate's tuning record does not count: it was made for another variant than it runs now."""
    def named(variant: str) -> str:
        return f"variant {variant}" if variant else "no named variant"

    recorded, current = named(candidate.stale_variant), named(candidate.variant)
    return f"its tuning record is stale: made for {recorded}, it now runs {current}"


def _plan(selection: Selection, inputs: tuple) -> tuple[str, bool]:
    """What the next call will do under the current policy, and whether it replaces the current pick (see
    :func:`kabi._selection.tuner.on_selection_miss`)."""
    pick = selection.kernel.name
    gated_first = "" if selection.verified else ", after gating it once (it has no verdict on this problem yet; " \
                                                "if it fails, the next pick is gated)"
    if selection.pick_reason == "forced":
        return f"runs the forced {pick}{gated_first}", False
    if selection.pick_reason == "tuned":
        return f"runs {pick}, the tuned pick", False
    blocked = tuning_blocked_reason(inputs)
    if blocked is None:
        measured = ", ".join(kernels_to_measure(selection, inputs)[0])
        return f"will tune: measures {measured} on the first call, then runs the fastest that passes the gate", True
    return f"will not tune ({blocked}): runs the heuristic's pick {pick}{gated_first}", False


def gate_notes(op: str, problem: Problem) -> dict[str, str]:
    """Why candidates were rejected when ``problem`` was tuned, by kernel name (only rejected ones): from this
    process's last tuning report, else from the notes the tuning cache keeps. For ``kabi.explain``."""
    report = last_report(op, problem.device, problem.key)
    if report is not None:
        return {item.kernel: item.note for item in report.measurements if not item.passed}
    signature = _core.device_signature(problem.device_type, problem.device_index)
    return {record.kernel: record.note for record in show(op)
            if record.device == signature and record.problem == problem.key and record.note}


def explain(op: Any, *arguments: Any, **keywords: Any) -> Explanation:
    """Select for ``op(*arguments, **keywords)`` as that call would, without running or caching, and say why and
    what the call will do (its plan: use a tuned pick, tune first, or gate the heuristic's pick once). The arguments
    are the op's: tensors, optional tensors, attributes by keyword, ``out=``.

    ``op`` is a ``kabi.ops`` function or an op name. Validation errors raise as the call would; a problem that
    no kernel can run returns a record with ``pick`` None and every rejection.

    Example::

        >>> kabi.explain(kabi.ops.matmul, a, b).pick
        'cpu.openblas.gemm'
        >>> kabi.explain(kabi.ops.linear, x, w, activation="gelu").plan
    """
    front = front_of(op)
    inputs, attributes, out = front.bind(arguments, keywords)
    selection = front.select(inputs, out, allow_none=True, attributes=attributes, with_rejected=True)
    plan, provisional = _plan(selection, inputs) if selection.kernel is not None else ("", False)
    failed = any(candidate.gate == "failed" for candidate in selection.candidates)
    if not failed or selection.problem is None:
        return Explanation.from_selection(selection, plan=plan, provisional=provisional)
    return Explanation.from_selection(selection, gate_notes(selection.op, selection.problem), plan, provisional)
