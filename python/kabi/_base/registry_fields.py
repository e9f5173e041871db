"""Reading registry TOML: the typed access to a table that every registry reader uses, and its error.

A field of the wrong type, a value its check refuses, a missing required field or an unknown one fails with
``RegistryError`` naming the file (its path from ``registry/`` on) and the dotted field
(``registry/ops/matmul.toml: tolerance.float32.norm: expected a positive number, got -1``).

Example::

    >>> root = TableReader(path, parse_toml(path))
    >>> root.get("name", str)
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Mapping

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

from .errors import InvalidArgumentError

__all__ = ["RegistryError", "TEXT_SOURCE", "TableReader", "display_path", "parse_toml"]


class RegistryError(InvalidArgumentError):
    """A registry file that does not follow the schema; the message names the file and the field."""


# The path an op declaration given as text is reported under, in place of a file name.
TEXT_SOURCE = Path("<op declaration text>")


def display_path(path: Path) -> str:
    """How messages name a declaration's source: its path from ``registry/`` on, or ``<op declaration text>``."""
    if path == TEXT_SOURCE:
        return str(path)
    parts = path.parts
    return "/".join(parts[parts.index("registry"):]) if "registry" in parts else str(path)


class TableReader:
    """Typed access to one TOML table that reports the file and the dotted field path on any mistake."""

    def __init__(self, path: Path, table: Mapping[str, Any], prefix: str = "") -> None:
        self.path, self.table, self.prefix = path, table, prefix
        self.used: set[str] = set()

    def fail(self, field: str, message: str) -> RegistryError:
        return RegistryError(f"{display_path(self.path)}: {self.prefix}{field}: {message}")

    def get(self, field: str, kind: type | tuple[type, ...], default: Any = ..., check: Callable[[Any], str | None] | None = None) -> Any:
        self.used.add(field)
        if field not in self.table:
            if default is ...:
                raise self.fail(field, "missing (required)")
            return default
        value = self.table[field]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind in (int, float, (int, float))):
            expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise self.fail(field, f"expected {expected}, got {value!r}")
        problem = check(value) if check is not None else None
        if problem:
            raise self.fail(field, problem)
        return value

    def names(self, field: str, allowed: tuple[str, ...], default: Any = ...) -> tuple[str, ...]:
        values = self.get(field, list, default)
        for index, value in enumerate(values):
            if value not in allowed:
                raise self.fail(f"{field}[{index}]", f"{value!r} is not one of {', '.join(allowed)}")
        return tuple(values)

    def child(self, field: str) -> TableReader:
        return TableReader(self.path, self.get(field, dict), f"{self.prefix}{field}.")

    def finish(self) -> None:
        unknown = sorted(set(self.table) - self.used)
        if unknown:
            raise self.fail(unknown[0], "unknown field")


def parse_toml(path: Path, text: str | None = None) -> dict[str, Any]:
    """The TOML table of a file, or of ``text`` (reported as ``path``)."""
    try:
        if text is not None:
            return tomllib.loads(text)
        with path.open("rb") as file:
            return tomllib.load(file)
    except tomllib.TOMLDecodeError as error:
        raise RegistryError(f"{display_path(path)}: not valid TOML: {error}") from None
