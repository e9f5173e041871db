"""Subcommand groups of the ``kabi`` command line, one module each, each with a ``register(subparsers)`` function
(see ``kabi/cli/_main.py``)."""
