"""``kabi bench``: every op against the best peers, side by side in one run, with the roof measured alongside."""

from ._report import render_markdown, replace_section
from ._results import BenchmarkResults, read_document
from ._runner import benchmark
from ._schema import validation_errors
from ._timing import TimingSettings

__all__ = ["BenchmarkResults", "TimingSettings", "benchmark", "read_document", "render_markdown", "replace_section",
           "validation_errors"]
