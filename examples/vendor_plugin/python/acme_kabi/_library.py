"""Where the plugin library of this package is installed."""

from __future__ import annotations

from pathlib import Path


def library_path() -> str:
    """The path of ``libacme_kabi.so``, installed beside this module; kabi loads it with ``kabi_plugin_load``.

    >>> library_path().endswith("libacme_kabi.so")
    True
    """
    return str(Path(__file__).with_name("libacme_kabi.so"))
