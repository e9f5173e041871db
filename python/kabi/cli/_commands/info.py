"""``kabi info``: versions, devices (archs, features, signatures), plugins loaded or refused and why, and the
device-binary directories of ``KABI_BINARY_PATH`` with the kernels each registered or why it was refused.
``kabi info OP``: the op's schema, type variables, attributes and declaration (as ``kabi list`` shows it)."""

from __future__ import annotations

import argparse
import platform

import torch
from rich.table import Table

from ... import _core
from ..._base.devices import devices
from ..._plugins.discovery import PluginRecord
from ..._plugins.loading import plugins
from ...ops._kernel_registration import kernels
from .._arguments import known_op
from .listing import op_table


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("info", help="versions, devices, plugins and device-binary directories; or one op")
    parser.add_argument("op", nargs="?", help="describe this op instead: schema, type variables, attributes")
    parser.set_defaults(handler=run)


def _versions_table() -> Table:
    abi = _core.abi_version()
    table = Table(title="versions", title_justify="left", show_header=False)
    table.add_column("component")
    table.add_column("version")
    table.add_row("kabi (libkabi)", _core.library_version())
    table.add_row("C ABI", f"{abi >> 16}.{abi & 0xFFFF} (binding built against {_core.HEADER_ABI_VERSION >> 16}.{_core.HEADER_ABI_VERSION & 0xFFFF})")
    table.add_row("python", platform.python_version())
    table.add_row("torch", torch.__version__)
    try:
        import triton

        table.add_row("triton", triton.__version__)
    except ImportError:
        table.add_row("triton", "not installed")
    return table


def _devices_table() -> Table:
    table = Table(title="devices", title_justify="left")
    for header in ("device", "name", "arch", "units", "memory", "features", "signature"):
        table.add_column(header, overflow="fold")
    for device in devices():
        memory = f"{device.total_memory_bytes / 2**30:.0f} GiB" if device.total_memory_bytes else "-"
        table.add_row(
            f"{device.device_type}:{device.index}",
            device.name,
            device.arch_text,
            str(device.compute_units),
            memory,
            " ".join(device.features) or "-",
            device.signature,
        )
    return table


def _plugins_table(records: list[PluginRecord]) -> Table:
    table = Table(title="plugins", title_justify="left")
    for header in ("plugin", "kind", "version", "state", "kernels", "registered", "from", "why refused"):
        table.add_column(header, overflow="fold")
    # Kernels name their plugin; libkabi loads one plugin of a name at most, so the name picks the loaded record,
    # never a refused one that happens to share it.
    registered: dict[str, list[str]] = {}
    for kernel in kernels():
        registered.setdefault(kernel.plugin, []).append(f"{kernel.op}/{kernel.name}")
    for record in records:
        table.add_row(
            record.name,
            record.kind,
            record.version or "-",
            "[green]loaded[/]" if record.loaded else "[red]refused[/]",
            str(record.num_kernels),
            " ".join(registered.get(record.name, []) if record.loaded else []) or "-",
            record.entry_point or record.path or "-",
            record.message or "",
        )
    return table


def _binaries_table(records: list[PluginRecord]) -> Table:
    table = Table(title="binaries (KABI_BINARY_PATH)", title_justify="left")
    for header in ("directory", "state", "kernels", "why refused"):
        table.add_column(header, overflow="fold")
    for record in records:
        table.add_row(
            record.path,
            "[green]loaded[/]" if record.loaded else "[red]refused[/]",
            f"{record.num_kernels} kernels" if record.loaded else "-",
            record.message,
        )
    return table


def run(arguments: argparse.Namespace, console) -> int:
    if arguments.op is not None:
        console.print(op_table(known_op(arguments.op)))
        return 0
    console.print(_versions_table())
    console.print(_devices_table())
    if _core.device_count(2) == 0:
        console.print("cuda: no devices (no CUDA driver, or no GPU)")
    records = plugins()
    console.print(_plugins_table([record for record in records if record.kind != "binaries"]))
    binaries = [record for record in records if record.kind == "binaries"]
    if binaries:
        console.print(_binaries_table(binaries))
    else:
        console.print("binaries: none (KABI_BINARY_PATH names no directory of device binaries)")
    return 0
