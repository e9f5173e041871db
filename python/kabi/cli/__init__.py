"""The ``kabi`` command line (the top layer): ``kabi info``, ``kabi list``, ``kabi explain``, ``kabi run`` and more.
``main`` is the console script's entry point; ``python -m kabi.cli`` runs it too."""

from ._main import build_parser, main

__all__ = ["build_parser", "main"]
