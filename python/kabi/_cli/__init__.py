"""Subcommand groups of the ``kabi`` command line, one module each (see ``kabi/cli.py``). Modules whose name starts
with ``_`` hold shared helpers."""
