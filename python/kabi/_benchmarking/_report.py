"""Markdown from results files: for the README's performance section and ``benchmarks/results/README.md``, so
quoted figures are generated from the JSON rather than retyped.

Per file: what the suite is, the command and machine that produced it, the targets met or missed (with the problems
that miss), and one row per problem: kabi's pick, its time and fraction of the roof, auto/oracle, auto/pick (the pick
forced: the run's noise), auto/peer for each peer, and the tuning time beside Inductor's compile-and-tune time.
:func:`replace_section` rewrites the part of a markdown file between ``<!-- kabi-bench:begin -->`` and
``<!-- kabi-bench:end -->``.

Example::

    >>> print(render_markdown([read_document(Path("quick.json"))]))  # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from .._base.declarations import op_spec
from .._base.errors import InvalidArgumentError
from ._results import INDUCTOR_PEER

__all__ = ["BEGIN_MARKER", "END_MARKER", "render_markdown", "replace_section"]

_VERDICTS = {True: "yes", False: "**no**", None: "no data"}
BEGIN_MARKER = "<!-- kabi-bench:begin -->"
END_MARKER = "<!-- kabi-bench:end -->"


def _number(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _peer_names(problems: Sequence[Mapping[str, Any]]) -> list[str]:
    names: list[str] = []
    for problem in problems:
        for item in problem["implementations"]:
            if item["kind"] == "peer" and item["name"] not in names:
                names.append(item["name"])
    return names


def _implementation(problem: Mapping[str, Any], name: str) -> Mapping[str, Any] | None:
    return next((item for item in problem["implementations"] if item["name"] == name), None)


def _strides_unlike_kabi(problem: Mapping[str, Any], name: str) -> tuple[list[int], list[int]] | None:
    """The peer's output strides and kabi's where both were recorded and they differ (a peer that returns a view of
    a padded buffer skips the copy into a dense result that kabi pays for); else None."""
    peer, auto = _implementation(problem, name), _implementation(problem, "auto")
    peer_strides = None if peer is None else peer.get("output_strides")
    auto_strides = None if auto is None else auto.get("output_strides")
    if peer_strides is None or auto_strides is None or peer_strides == auto_strides:
        return None
    return peer_strides, auto_strides


def _peer_cell(problem: Mapping[str, Any], name: str) -> str:
    ratio = problem["ratios"].get(problem["primary_mode"], {}).get(f"auto/{name}")
    if ratio is not None:
        return f"{ratio:.3f}" + (" †" if _strides_unlike_kabi(problem, name) else "")
    item = _implementation(problem, name)
    return "n/a" if item is None else item["status"]


def _stride_notes(problems: Sequence[Mapping[str, Any]]) -> list[str]:
    notes = []
    for problem in problems:
        for name in _peer_names([problem]):
            unlike = _strides_unlike_kabi(problem, name)
            if unlike is not None:
                notes.append(f"{problem['key']}: {name} returned strides {tuple(unlike[0])}, kabi {tuple(unlike[1])}")
    if not notes:
        return []
    return ["† The peer's output is laid out unlike kabi's, so the two did not produce the same tensor: "
            + "; ".join(notes) + ".", ""]


def _targets(summary: Mapping[str, Any]) -> list[str]:
    lines = ["| target | goal | measured | met | problems below the goal |", "|---|---|---|---|---|"]
    for target in summary["targets"]:
        value = target["value"]
        measured = _number(value) if isinstance(value, float) else ("-" if value is None else str(value))
        misses = ", ".join(target["misses"]) or "-"
        lines.append(f"| {target['ratio']} {target['statistic']} | {target['goal']} | {measured} | "
                     f"{_VERDICTS[target['met']]} | {misses} |")
    return lines


def _problem_rows(problems: Sequence[Mapping[str, Any]]) -> list[str]:
    peers = _peer_names(problems)
    # Files written before auto/pick was recorded get no column of dashes.
    noise_columns = ["auto/pick"] if any("auto/pick" in problem["ratios"].get(problem["primary_mode"], {})
                                         for problem in problems) else []
    header = ["problem", "mode", "kabi pick", "kabi us", "roof fraction", "auto/oracle", *noise_columns,
              *[f"auto/{name}" for name in peers], "kabi tuning s", f"{INDUCTOR_PEER} setup s"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for problem in problems:
        mode = problem["primary_mode"]
        auto = next(item for item in problem["implementations"] if item["kind"] == "auto")
        timing = auto["times"].get(mode)
        inductor_item = _implementation(problem, INDUCTOR_PEER)
        inductor = None if inductor_item is None else inductor_item["setup_s"]
        cells = [problem["key"], mode, problem["kabi"]["pick"] or "-",
                 _number(timing["median_us"], 1) if timing else auto["status"],
                 _number(timing["roof_fraction"]) if timing else "-",
                 _number(problem["ratios"].get(mode, {}).get("auto/oracle")),
                 *(_number(problem["ratios"].get(mode, {}).get(name)) for name in noise_columns),
                 *[_peer_cell(problem, name) for name in peers],
                 _number(problem["kabi"]["tuning_s"], 2), _number(inductor, 2)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _section(document: Mapping[str, Any], plot: Path | None) -> list[str]:
    first = document["runs"][0]
    device = first["device"]
    roof = document["roof"]
    rates = ", ".join(f"{dtype} {rate:.3g} TFLOP/s" for dtype, rate in roof["matrix_tflops"].items())
    suite = op_spec(document["op"]).suites.get(document["suite"])
    lines = [f"### {document['op']} `{document['suite']}` on {device['name']}", "",
             *([f"{suite.description}.", ""] if suite is not None else []),
             f"`{first['command']}` ({first['date']}; torch {first['versions'].get('torch', '?')}, "
             f"kabi {first['versions'].get('kabi', '?')}). Measured roof: {rates}; copy {roof['copy_gbps']:.0f} GB/s."
             + ("" if document["complete"] else " **Incomplete run.**"), ""]
    if plot is not None:
        lines += [f"![{document['op']} {document['suite']}]({plot.as_posix()})", ""]
    lines += _targets(document["summary"]) + [""] + _problem_rows(document["problems"]) + [""]
    lines += _stride_notes(document["problems"])
    return lines


def render_markdown(documents: Sequence[Mapping[str, Any]], plots: Sequence[Path | None] = ()) -> str:
    """Markdown for the results documents, in order; ``plots[i]`` (a relative path) is embedded for document i."""
    lines: list[str] = []
    for index, document in enumerate(documents):
        lines += _section(document, plots[index] if index < len(plots) else None)
    return "\n".join(lines)


def replace_section(text: str, generated: str, *, name: str = "the file") -> str:
    """``text`` with what lies between the begin and end markers replaced by ``generated``."""
    begin, end = text.find(BEGIN_MARKER), text.find(END_MARKER)
    if begin < 0 or end < begin:
        raise InvalidArgumentError(f"kabi bench-report: {name} must hold {BEGIN_MARKER} and then {END_MARKER}, "
                                   f"where the generated section goes")
    return f"{text[:begin + len(BEGIN_MARKER)]}\n{generated}\n{text[end:]}"
