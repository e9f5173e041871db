"""The results file's JSON Schema (``result.schema.json`` beside this module) and a validator for the subset of
JSON Schema it uses: ``type``, ``properties``, ``required``, ``additionalProperties``, ``items``, ``enum``,
``minimum`` and local ``$ref``. Small enough to need no dependency; the schema file stays standard, so any JSON
Schema tool can check a results file too.

Example::

    >>> "$.op: expected string, got 1" in validation_errors({"op": 1})
    True
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Mapping

__all__ = ["SCHEMA_PATH", "result_schema", "validation_errors"]

SCHEMA_PATH = Path(__file__).with_name("result.schema.json")
_TYPES = {
    "object": lambda value: isinstance(value, dict),
    "array": lambda value: isinstance(value, list),
    "string": lambda value: isinstance(value, str),
    "integer": lambda value: isinstance(value, int) and not isinstance(value, bool),
    "number": lambda value: isinstance(value, (int, float)) and not isinstance(value, bool),
    "boolean": lambda value: isinstance(value, bool),
    "null": lambda value: value is None,
}


@functools.lru_cache(maxsize=None)
def result_schema() -> Mapping[str, Any]:
    """The parsed schema of a ``kabi bench`` results file."""
    return json.loads(SCHEMA_PATH.read_text())


def validation_errors(document: Any, schema: Mapping[str, Any] | None = None) -> list[str]:
    """Every way ``document`` departs from the schema (default: the results schema), as ``"$.path: problem"``;
    empty when it conforms."""
    root = schema if schema is not None else result_schema()
    errors: list[str] = []
    _check(document, root, root, "$", errors)
    return errors


def _check(value: Any, schema: Mapping[str, Any], root: Mapping[str, Any], path: str, errors: list[str]) -> None:
    if "$ref" in schema:
        target: Any = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        schema = target
    types = schema.get("type")
    if types is not None:
        allowed = [types] if isinstance(types, str) else types
        if not any(_TYPES[kind](value) for kind in allowed):
            errors.append(f"{path}: expected {' or '.join(allowed)}, got {value!r:.80}")
            return
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: expected one of {schema['enum']}, got {value!r:.80}")
    if "minimum" in schema and _TYPES["number"](value) and value < schema["minimum"]:
        errors.append(f"{path}: expected at least {schema['minimum']}, got {value!r}")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name in schema.get("required", ()):
            if name not in value:
                errors.append(f"{path}: missing {name!r}")
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in properties:
                _check(item, properties[name], root, f"{path}.{name}", errors)
            elif extra is False:
                errors.append(f"{path}: unexpected {name!r}")
            elif isinstance(extra, dict):
                _check(item, extra, root, f"{path}.{name}", errors)
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            _check(item, schema["items"], root, f"{path}[{index}]", errors)
