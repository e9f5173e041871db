"""``kabi list``: ops x kernels, with each op's schema, type variables and attributes, and each kernel's device,
archs, dtypes, layouts and priority. :func:`op_table` is also ``kabi info OP``'s."""

from __future__ import annotations

import argparse

from rich.table import Table

from ... import _core
from ..._base.declarations import op_specs
from ..._plugins.discovery import complete_registry
from ...ops._kernel_registration import kernels
from ...ops._schema import op_schema
from .._arguments import known_op


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("list", help="ops and their kernels")
    parser.add_argument("op", nargs="?", help="only this op")
    parser.set_defaults(handler=run)


def _attribute_text(attribute: dict, dtype_in_key: bool) -> str:
    kind = f"enum({', '.join(attribute['enum_values'])})" if attribute["type"] == "enum" else attribute["type"]
    # A dtype attribute reaches the key through the variable it binds.
    keyed = attribute["in_tuning_key"] or (attribute["type_variable"] is not None and dtype_in_key)
    if attribute["type_variable"] is not None:
        kind = f"{attribute['type_variable']}, a dtype: {kind}"
    default = f" = {attribute['default']}" if attribute["has_default"] else " (required)"
    return f"{attribute['name']}: {kind}{default}{'' if keyed else ' (not in the tuning key)'}"


def op_table(op: str) -> Table:
    """The op as declared: schema, inputs and outputs, type variables with their dtypes, attributes with their
    types and defaults, tuning key, and from its registry file the shape order, input generator and suites."""
    schema = _core.op_schema(op)
    table = Table(title=f"{op}: {schema['schema']}", title_justify="left", show_header=False)
    table.add_column("", style="bold")
    table.add_column("", overflow="fold")
    parsed = op_schema(op)
    for kind, patterns in (("inputs", parsed.inputs), ("outputs", parsed.outputs)):
        table.add_row(kind, "; ".join(f"{pattern.name}{'?' if pattern.optional else ''}: {pattern.dims_text} "
                                      f"{pattern.dtype}" for pattern in patterns) or "-")
    table.add_row("type variables", "; ".join(f"{name}: {', '.join(dtypes)}"
                                              for name, dtypes in schema["type_variables"].items()) or "-")
    dtype_in_key = "dtype" in schema["tuning_key"].split(",")
    table.add_row("attributes", "; ".join(_attribute_text(attribute, dtype_in_key)
                                          for attribute in schema["attributes"]) or "-")
    table.add_row("tuning key", schema["tuning_key"])
    spec = op_specs().get(op)
    if spec is not None:
        table.add_row("shape order", ", ".join(spec.shape_order) or "- (shapes as named dims)")
        kinds = [f"{name}: {declaration.kind}" + (f" (total {declaration.total})" if declaration.total else "")
                 for name, declaration in spec.inputs.items()]
        table.add_row("input generator", spec.input_generator or "; ".join(kinds) or "default")
        table.add_row("reference", spec.reference)
        table.add_row("suites", ", ".join(spec.suites) or "-")
    return table


def run(arguments: argparse.Namespace, console) -> int:
    complete_registry()  # plugins may add ops as well as kernels
    ops = [known_op(arguments.op)] if arguments.op else _core.op_list()
    for op in ops:
        console.print(op_table(op))
        table = Table(title=f"{op} kernels", title_justify="left")
        for header in ("kernel", "backend", "kind", "device", "archs", "features", "dtypes", "layouts", "batch", "priority", "plugin"):
            table.add_column(header, overflow="fold")
        for kernel in sorted(kernels(op), key=lambda k: (k.device, -k.priority, k.name)):
            table.add_row(
                kernel.name,
                kernel.backend,
                kernel.kind,
                kernel.device,
                kernel.archs_text,
                ",".join(kernel.features) or "-",
                ",".join(kernel.dtypes),
                kernel.layouts_text,
                kernel.batch_mode,
                str(kernel.priority),
                kernel.plugin or "-",
            )
        console.print(table)
    return 0
