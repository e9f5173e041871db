"""python/kabi is layered: each module imports only from its own layer or the layers below it, and no chain of
imports comes back to where it started. The imports are read from the source with ``ast``, those inside functions
and under ``TYPE_CHECKING`` included, so a lazy import cannot hide a dependency. docs/architecture.md draws the same
layers."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "kabi"

# Bottom to top. A module belongs to the layer of the longest prefix here that names it or a package above it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("base", ("kabi._core", "kabi._base")),
    ("plugins", ("kabi._plugins",)),
    ("ops", ("kabi.ops",)),
    ("selection", ("kabi._selection",)),
    ("backends", ("kabi.backends",)),
    ("benchmarking", ("kabi._benchmarking",)),
    ("cli", ("kabi.cli",)),
    ("top", ("kabi", "kabi._bootstrap", "kabi.config")),
]


def _modules() -> dict[str, Path]:
    """Every module of python/kabi by dotted name (a package by its ``__init__.py``), and the compiled binding."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["kabi", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    modules["kabi._core"] = PACKAGE / "_core.pyi"
    return modules


MODULES = _modules()


def layer_of(module: str) -> int:
    matches = [(len(prefix), index) for index, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes
               if module == prefix or module.startswith(prefix + ".")]
    assert matches, f"{module} is in no layer: add it to LAYERS (and to docs/architecture.md)"
    return max(matches)[1]


def imports_of(module: str) -> set[str]:
    """The kabi modules ``module`` imports, anywhere in its source."""
    path = MODULES[module]
    if path.suffix == ".pyi":
        return set()
    return imports_in(path.read_text(), module, is_package=path.name == "__init__.py")


def imports_in(source: str, module: str, is_package: bool = False) -> set[str]:
    """The kabi modules that ``source``, the text of ``module``, imports: at any depth, relative ones resolved."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.add(submodule if submodule in MODULES else source)
    return {name for name in found if name == "kabi" or name.startswith("kabi.")}


GRAPH = {module: imports_of(module) - {module} for module in MODULES}


def test_every_module_has_a_layer() -> None:
    for module in MODULES:
        layer_of(module)


@pytest.mark.parametrize("module", sorted(MODULES))
def test_imports_only_from_its_layer_or_below(module: str) -> None:
    upward = sorted(target for target in GRAPH[module] if layer_of(target) > layer_of(module))
    assert not upward, (f"{module} (layer {LAYERS[layer_of(module)][0]}) imports from above it: "
                        + ", ".join(f"{target} ({LAYERS[layer_of(target)][0]})" for target in upward))


def test_no_import_cycle() -> None:
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> None:
        if module in path:
            cycle = path[path.index(module):] + [module]
            pytest.fail("import cycle: " + " -> ".join(cycle))
        if module in done:
            return
        path.append(module)
        for target in sorted(GRAPH[module]):
            visit(target)
        path.pop()
        done.add(module)

    for module in sorted(MODULES):
        visit(module)


def test_the_check_sees_imports_inside_functions() -> None:
    source = "from .. import _core\n\ndef later():\n    from .._selection.tuner import tune\n    import kabi\n"
    assert imports_in(source, "kabi._plugins.discovery") == {"kabi._core", "kabi._selection.tuner", "kabi"}
