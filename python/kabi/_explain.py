"""``kabi.explain``: why a call would run the kernel it runs.

The record lists every candidate for the problem's device type — eligible or the reason it is not, its tuned time
where the tuning cache has one, and for a candidate that failed the correctness gate when the problem was tuned, why
(wrong result, NaN, raised) — the pick and the reason for it. It prints as plain text (``str``) and as a rich
table (``rich.print(record)``).

Example::

    >>> print(kabi.explain(kabi.ops.matmul, torch.randn(64, 32), torch.randn(32, 16)))
    matmul on cpu, problem float32|contiguous,contiguous|1|64|16|32
    pick: cpu.openblas.gemm (tuned: fastest of 2 measured (6.9 us))
    ...
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ._dispatch import Selection, front_of
from ._records import Candidate, Problem

__all__ = ["Explanation", "explain"]


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
    """Why each candidate that failed the correctness gate when the problem was tuned failed, by kernel name."""

    @classmethod
    def from_selection(cls, selection: Selection, gate_failures: dict[str, str] | None = None) -> Explanation:
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
        )

    def _rows(self) -> list[tuple[str, ...]]:
        rows = []
        for candidate in self.candidates:
            kernel = candidate.kernel
            tuned = candidate.tuned_time_us
            time = "-" if tuned is None else ("failed" if math.isinf(tuned) else f"{tuned:.2f} us")
            verdict = "picked" if candidate.picked else ("eligible" if candidate.eligible else "rejected")
            reason = candidate.reason
            if candidate.gate == "failed" and not candidate.picked:
                verdict = "failed gate"
            if verdict == "eligible" and self.forced and self.forced not in (kernel.name, kernel.backend):
                verdict = "not forced"
            rows.append((kernel.name, kernel.backend, kernel.kind, kernel.archs_text, str(kernel.priority), verdict, time, reason))
        return rows

    _HEADERS = ("kernel", "backend", "kind", "archs", "priority", "verdict", "tuned", "reason")

    def _title(self) -> str:
        forced = f", forced: {self.forced}" if self.forced else ""
        return f"{self.op} on {self.device or '?'}, problem {self.problem_key or '?'}{forced}"

    def _summary(self) -> str:
        if self.pick is None:
            return f"no eligible kernel: {self.error}"
        return f"pick: {self.pick} ({self.reason or self.pick_reason})"

    def __str__(self) -> str:
        rows = [self._HEADERS, *self._rows()]
        widths = [max(len(row[i]) for row in rows) for i in range(len(self._HEADERS) - 1)]
        lines = [self._title(), self._summary()]
        for row in rows:
            cells = [cell.ljust(width) for cell, width in zip(row, widths)]
            lines.append("  " + "  ".join([*cells, row[-1]]).rstrip())
        return "\n".join(lines)

    def __rich__(self) -> Any:
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        table = Table(title=self._title(), title_justify="left", show_lines=False)
        for header in self._HEADERS:
            table.add_column(header, overflow="fold")
        styles = {"picked": "bold green", "eligible": "", "not forced": "dim", "rejected": "dim", "failed gate": "red"}
        for row in self._rows():
            table.add_row(*row, style=styles[row[5]])
        summary = Text(self._summary(), style="bold" if self.pick else "bold red")
        return Group(table, summary)


def explain(op: Any, *inputs: Any, out: Any = None) -> Explanation:
    """Select for ``op(*inputs, out=out)`` as a call would, without running or caching, and say why.

    ``op`` is a ``kabi.ops`` function or an op name. Validation errors raise as the call would; a problem that
    no kernel can run returns a record with ``pick`` None and every rejection.

    Example::

        >>> kabi.explain(kabi.ops.matmul, a, b).pick
        'cpu.openblas.gemm'
    """
    selection = front_of(op).select(inputs, out, allow_none=True)
    failed = any(c.tuned_time_us is not None and math.isinf(c.tuned_time_us) for c in selection.candidates)
    if not failed or selection.problem is None:
        return Explanation.from_selection(selection)
    from ._tuner import gate_notes

    return Explanation.from_selection(selection, gate_notes(selection.op, selection.problem))
