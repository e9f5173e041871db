"""One PNG per run, two panels: throughput per problem of kabi's choice, the oracle and each peer, with the
measured roof as a line; and the speed ratio of kabi's choice over each peer (and the oracle) per problem, with the
suite's geometric mean in the legend. Each problem is drawn in its primary mode (see :mod:`._results`).

matplotlib is an optional dependency (``pip install kabi[bench]``): it is imported only when a plot is drawn, and
:func:`require_matplotlib` fails early, before anything is measured, when it is missing.

Example::

    >>> plot_results(read_document(Path("quick.json")), Path("quick.png"))  # doctest: +SKIP
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Mapping

from .._base.errors import UnavailableError
from ._results import geometric_mean

__all__ = ["plot_results", "require_matplotlib"]


def require_matplotlib() -> None:
    """``UnavailableError`` naming the missing package when matplotlib is not installed."""
    if importlib.util.find_spec("matplotlib") is None:
        raise UnavailableError("kabi bench: plot needs the matplotlib package, which is not installed; "
                               "install it with `pip install matplotlib` (or kabi[bench])")


def _series(problems: list[Mapping[str, Any]]) -> tuple[list[str], dict[str, list[float]], list[float]]:
    """Per implementation (auto, oracle, each peer), TFLOP/s per problem (nan where it has none), and the roof's."""
    names = ["kabi (auto)", "oracle"]
    for problem in problems:
        for item in problem["implementations"]:
            if item["kind"] == "peer" and item["name"] not in names:
                names.append(item["name"])
    series = {name: [] for name in names}
    for problem in problems:
        mode = problem["primary_mode"]
        figures = {item["name"]: item["times"][mode]["tflops"] for item in problem["implementations"]
                   if mode in item["times"]}
        figures["kabi (auto)"] = figures.get("auto", float("nan"))
        figures["oracle"] = figures.get(problem["oracle"].get(mode) or "", float("nan"))
        for name in names:
            series[name].append(figures.get(name, float("nan")))
    roof = [problem["flops"] / (problem["roof_us"] * 1e6) for problem in problems]
    return names, series, roof


def plot_results(document: Mapping[str, Any], path: Path) -> None:
    """Draw the results document into a PNG at ``path``."""
    require_matplotlib()
    from matplotlib.figure import Figure

    problems = document["problems"]
    labels = [f"{problem['key']}\n({problem['primary_mode']})" for problem in problems]
    positions = list(range(len(problems)))
    names, series, roof = _series(problems)
    figure = Figure(figsize=(max(8.0, 0.55 * len(problems) + 3), 10), layout="constrained")
    throughput, ratios = figure.subplots(2, 1)
    device = document["runs"][0]["device"]["name"] if document["runs"] else "?"
    figure.suptitle(f"kabi bench {document['op']} --suite {document['suite']} on {device}")
    markers = "os^vD<>px*"
    for index, name in enumerate(names):
        # The oracle is drawn hollow and larger, so kabi's choice stays visible where the two coincide.
        style = {"markersize": 11, "markerfacecolor": "none", "markeredgewidth": 1.5} if name == "oracle" else {}
        throughput.plot(positions, series[name], marker=markers[index % len(markers)], linestyle="none", label=name,
                        **style)
    throughput.step(positions, roof, where="mid", color="black", linewidth=1.5, label="roof (measured)")
    throughput.set_yscale("log")
    throughput.set_ylabel("TFLOP/s (log scale)")
    throughput.set_title("Throughput per problem")
    throughput.legend(fontsize="small", ncols=min(4, len(names) + 1))
    ratio_names = ["auto/oracle"] + [f"auto/{name}" for name in names[2:]]
    width = 0.8 / max(len(ratio_names), 1)
    for index, ratio in enumerate(ratio_names):
        values = [problem["ratios"].get(problem["primary_mode"], {}).get(ratio, float("nan")) for problem in problems]
        present = [value for value in values if value == value]
        label = f"{ratio} (geomean {geometric_mean(present):.3f})" if present else f"{ratio} (no data)"
        ratios.bar([position + (index - (len(ratio_names) - 1) / 2) * width for position in positions], values,
                   width=width, label=label)
    ratios.axhline(1.0, color="black", linewidth=1)
    ratios.set_ylabel("speed of kabi's choice / speed of X")
    ratios.set_title("kabi's automatic choice against the oracle and each peer (> 1: kabi faster)")
    ratios.legend(fontsize="small", ncols=min(3, len(ratio_names)))
    for axes in (throughput, ratios):
        axes.set_xticks(positions, labels, rotation=60, ha="right", fontsize="x-small")
        axes.grid(axis="y", alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
