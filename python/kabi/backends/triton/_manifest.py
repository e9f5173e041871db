"""Device-binary manifests (docs/manifest.md): writing them with their images, and reading them back to check what
was written. Every device-binary writer of kabi (Triton's compiler, the NVRTC backend) goes through this module.

The C++ loader (``kabi_binaries_load``) is the reader that registers kernels; this reader exists so the Python side
can verify a manifest it wrote, and refuses the same corrupt or mismatched files with the same kind of message
(naming the file and the field).

Example::

    manifest = read_manifest("out/triton.matmul.tiled.bm128_bn128_bk64_w8_s3_g8.sm90.kabi-manifest")
    manifest.entry, manifest.grid, [param.kind for param in manifest.params]
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ... import _core
from ..._base.errors import NotFoundError
from ._manifest_params import SCRATCH_KINDS, ManifestParam
from ._names import MANIFEST_SUFFIX

FORMAT_LINE = "kabi-manifest 1"
# Format 1 plus the fields of ABI 2.4 (input_layouts, a param's divisible_by): written only on a manifest that uses
# them, so that an older libkabi, which could not check what they assume, refuses it by its first line.
FORMAT_2_LINE = "kabi-manifest 2"
# Format 2 plus the zeroed_scratch param of ABI 2.5: written only on a manifest that has one, so that an older
# libkabi, which could not hand the kernel zeroed memory, refuses it by its first line.
FORMAT_3_LINE = "kabi-manifest 3"
_FORMAT_LINES = (FORMAT_LINE, FORMAT_2_LINE, FORMAT_3_LINE)
# The ABI version that introduced each format's fields.
_FORMAT_ABI = {2: "2.4", 3: "2.5"}
ABI_MAJOR = 2
_REQUIRED_KEYS = ("abi_major", "op", "name", "backend", "device", "priority", "dtypes", "layouts", "alignment",
                  "batch_mode", "image", "image_format", "image_fnv1a64", "arch", "entry", "grid", "block",
                  "shared_memory_bytes", "cluster_size")
_OPTIONAL_KEYS = ("archs", "arch_min", "arch_max", "features", "fingerprint", "type_constraints", "input_layouts")
_PARAM_FIELDS = {"tensor": ("index",), "dim": ("name", "size"), "stride": ("index", "dim", "size"),
                 "constant": ("value", "size"), "scratch": ("value",), "zeroed_scratch": ("value",),
                 "attribute": ("index", "size"), "workspace": ()}
# The optional field of the kinds that take it (format 2).
_DIVISIBLE_KINDS = ("dim", "stride")
_LAYOUT_NAMES = ("contiguous", "row_strided", "col_strided", "general")
_DTYPE_NAMES = ("float16", "bfloat16", "float32", "float64", "int8", "int32", "int64", "float8_e4m3fn",
                "float8_e5m2")


class ManifestError(ValueError):
    """A manifest that is corrupt, incomplete or does not match its image; the message names file and field."""


def fnv1a64(data: bytes) -> str:
    """FNV-1a 64-bit hash of ``data`` as 16 lower-case hex digits (the manifest's ``image_fnv1a64``)."""
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{value:016x}"


def _format_needed(input_layouts: tuple, params) -> tuple[int, str]:
    """(the oldest format holding these fields, the first field that needs it, "" for format 1)."""
    zeroed = [f"param {param.text()!r}" for param in params if param.kind == "zeroed_scratch"]
    if zeroed:
        return 3, zeroed[0]
    format_2 = (["input_layouts"] if input_layouts else []) + [
        f"param {param.text()!r}" for param in params if param.divisible_by > 1]
    return (2, format_2[0]) if format_2 else (1, "")


@dataclass(frozen=True)
class Manifest:
    """Every field of a manifest, in the types the format gives them."""

    op: str
    name: str
    backend: str
    device: str
    priority: int
    dtypes: tuple
    layouts: tuple
    alignment: int
    batch_mode: str
    image: str
    image_format: str
    image_fnv1a64: str
    arch: int
    entry: str
    grid: tuple
    block: tuple
    shared_memory_bytes: int
    cluster_size: int
    params: tuple
    abi_major: int = ABI_MAJOR
    archs: tuple = ()
    arch_min: int = 0
    arch_max: int = 0
    features: tuple = ()
    fingerprint: str = ""
    # Per type variable, the dtypes the kernel accepts where they differ from ``dtypes`` ("U: float16").
    type_constraints: str = ""
    # Per input of the op, in input order, the layouts it takes (names as ``layouts``, or ("any",)); () for
    # ``layouts`` on every input.
    input_layouts: tuple = ()
    extra_comments: tuple = field(default=(), compare=False)

    @property
    def format_line(self) -> str:
        """``kabi-manifest 3`` when a zeroed_scratch param is used, else ``kabi-manifest 2`` when a field of ABI 2.4
        is, else ``kabi-manifest 1``: the oldest format that holds every field, so each manifest stays readable by
        every libkabi that can launch it."""
        return _FORMAT_LINES[_format_needed(self.input_layouts, self.params)[0] - 1]

    def text(self) -> str:
        lines = [self.format_line] + [f"# {comment}" for comment in self.extra_comments]
        values = {
            "abi_major": self.abi_major, "op": self.op, "name": self.name, "backend": self.backend,
            "device": self.device, "archs": ",".join(map(str, self.archs)), "arch_min": self.arch_min,
            "arch_max": self.arch_max, "priority": self.priority, "features": ",".join(self.features),
            "dtypes": ",".join(self.dtypes), "layouts": ",".join(self.layouts), "alignment": self.alignment,
            "batch_mode": self.batch_mode, "fingerprint": self.fingerprint, "image": self.image,
            "image_format": self.image_format, "image_fnv1a64": self.image_fnv1a64, "arch": self.arch,
            "entry": self.entry, "grid": "; ".join(self.grid), "block": ", ".join(map(str, self.block)),
            "shared_memory_bytes": self.shared_memory_bytes, "cluster_size": self.cluster_size,
            "type_constraints": self.type_constraints,
            "input_layouts": "; ".join(",".join(names) for names in self.input_layouts),
        }
        # Optional keys are written only when set; the loader reads an absent one as its default.
        optional = ("archs", "arch_min", "arch_max", "fingerprint", "type_constraints", "input_layouts")
        lines += [f"{key} = {value}".rstrip() for key, value in values.items() if key not in optional or value]
        lines += [f"param = {param.text()}" for param in self.params]
        return "\n".join(lines) + "\n"


def write_atomically(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename: a reader (another
    process, or this one after a crash mid-write) sees the old file or the whole new one, never a part. The
    temporary name never ends in ``.kabi-manifest``, so a loader never reads a half-written manifest."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def write_manifest(manifest: Manifest, directory: str | Path) -> Path:
    """Write ``NAME.kabi-manifest`` into ``directory`` (next to its image) and return its path."""
    return write_atomically(Path(directory) / f"{manifest.name}{MANIFEST_SUFFIX}", manifest.text().encode())


def write_binary(manifest: Manifest, image: bytes, directory: str | Path) -> Path:
    """Write ``image`` as the manifest's image file, then the manifest, both atomically, and return the manifest's
    path: once the manifest is visible, its image is whole (concurrent writers of the same binary write the same
    bytes, so the last rename wins harmlessly)."""
    if fnv1a64(image) != manifest.image_fnv1a64:
        raise ValueError(f"{manifest.name}: image_fnv1a64 {manifest.image_fnv1a64} is not the hash of the image")
    write_atomically(Path(directory) / manifest.image, image)
    return write_manifest(manifest, directory)


def ptx_entry_params(ptx: str) -> list[str]:
    """The PTX types (``u64``, ``u32``, ...) of the parameters of the first ``.entry`` in ``ptx``."""
    match = re.search(r"\.entry\s+[\w$]+\s*\((.*?)\)", ptx, re.S)
    if match is None:
        raise ValueError("ptx: no .entry function found")
    return re.findall(r"\.param\s+\.(\w+)", match.group(1))


def check_against_ptx(params: list[ManifestParam], ptx_types: list[str], name: str) -> None:
    """Raise unless ``params`` match the entry's PTX parameter types one for one, in number and width."""
    if len(params) != len(ptx_types):
        raise RuntimeError(f"{name}: the manifest lists {len(params)} parameters, the entry takes {len(ptx_types)}")
    for position, (param, ptx_type) in enumerate(zip(params, ptx_types)):
        width = param.size_bytes
        if ptx_type not in (f"u{8 * width}", f"b{8 * width}", f"s{8 * width}"):
            raise RuntimeError(f"{name}: entry parameter {position} is .{ptx_type} but the manifest says "
                               f"{param.text()!r} ({width} bytes)")


def parse_param(text: str, where: str = "param") -> ManifestParam:
    """One parameter in the manifest's syntax (``stride index=0 dim=-2 size=4``); ManifestError names ``where``."""
    return _parse_param(where, text)


def _split_list(text: str) -> tuple:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _parse_param(where: str, text: str) -> ManifestParam:
    if not text.split():
        raise ManifestError(f"{where}: param: empty (expected a kind: {', '.join(_PARAM_FIELDS)})")
    kind, *items = text.split()
    if kind not in _PARAM_FIELDS:
        raise ManifestError(f"{where}: param: unknown kind {kind!r} (expected one of "
                            f"{', '.join(_PARAM_FIELDS)})")
    fields = []
    for item in items:
        key, sep, value = item.partition("=")
        if sep and key == "divisible_by":
            if kind not in _DIVISIBLE_KINDS:
                raise ManifestError(f"{where}: param {kind}: divisible_by: only dim and stride parameters take one")
            if not re.fullmatch(r"\d+", value) or int(value) & (int(value) - 1):
                raise ManifestError(f"{where}: param {kind}: divisible_by must be 0 or a power of two, got {value!r}")
        elif not sep or key not in _PARAM_FIELDS[kind]:
            raise ManifestError(f"{where}: param {kind}: unexpected item {item!r} (expected "
                                f"{', '.join(key + '=...' for key in _PARAM_FIELDS[kind])})")
        if key != "name" and not re.fullmatch(r"-?\d+", value):
            raise ManifestError(f"{where}: param {kind}: {key} must be an integer, got {value!r}")
        if kind in SCRATCH_KINDS and int(value) < 0:
            raise ManifestError(f"{where}: param {kind}: value must be a count of bytes >= 0, got {value}")
        fields.append((key, value if key == "name" else int(value)))
    missing = set(_PARAM_FIELDS[kind]) - {key for key, _ in fields}
    if missing:
        raise ManifestError(f"{where}: param {kind}: missing {', '.join(sorted(missing))}")
    return ManifestParam(kind, tuple(fields))


def _input_layouts(path: Path, op: str, text: str) -> tuple:
    """``contiguous,row_strided; col_strided`` as (("contiguous", "row_strided"), ("col_strided",)): one entry per
    input of the op (checked where the op is registered), each of layout names or ``any``."""
    entries = tuple(_split_list(entry) for entry in text.split(";"))
    for position, names in enumerate(entries):
        unknown = [name for name in names if name not in _LAYOUT_NAMES + ("any",)]
        if unknown or not names:
            raise ManifestError(f"{path}: input_layouts: entry {position} must be a comma-separated subset of "
                                f"{', '.join(_LAYOUT_NAMES)}, or any; got {text.split(';')[position].strip()!r}")
    try:
        inputs = [tensor["name"] for tensor in _core.op_schema(op)["inputs"]]
    except NotFoundError:
        return entries  # an op this process lacks: the loader refuses the manifest for it
    if len(entries) != len(inputs):
        raise ManifestError(f"{path}: input_layouts: {len(entries)} entries separated by ';'; op {op} has "
                            f"{len(inputs)} inputs ({', '.join(inputs)})")
    return entries


def _integer(path: Path, key: str, value: str) -> int:
    value = value.strip()
    if not re.fullmatch(r"-?\d+", value):
        raise ManifestError(f"{path}: {key} must be an integer, got {value!r}")
    return int(value)


def read_manifest(path: str | Path, *, check_image: bool = True) -> Manifest:
    """Parse and validate a manifest; with ``check_image``, also hash its image. Raises ManifestError."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0].strip() not in _FORMAT_LINES:
        first = lines[0] if lines else ""
        expected = ", ".join(repr(line) for line in _FORMAT_LINES[:-1]) + f" or {_FORMAT_LINES[-1]!r}"
        raise ManifestError(f"{path}: first line must be {expected}, got {first!r}")
    values: dict[str, str] = {}
    params = []
    for line_number, line in enumerate(lines[1:], start=2):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        key, sep, value = stripped.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            raise ManifestError(f"{path}:{line_number}: expected 'key = value', got {stripped!r}")
        if key == "param":
            params.append(_parse_param(f"{path}:{line_number}", value))
        elif key not in _REQUIRED_KEYS and key not in _OPTIONAL_KEYS:
            raise ManifestError(f"{path}:{line_number}: unknown key {key!r}")
        elif key in values:
            raise ManifestError(f"{path}:{line_number}: key {key!r} repeats")
        else:
            values[key] = value
    missing = [key for key in _REQUIRED_KEYS if key not in values]
    if missing:
        raise ManifestError(f"{path}: missing {', '.join(missing)}")
    abi_major = _integer(path, "abi_major", values["abi_major"])
    if abi_major != ABI_MAJOR:
        raise ManifestError(f"{path}: abi_major: written for ABI {abi_major}, this kabi implements {ABI_MAJOR}: "
                            "rebuild the binary and its manifest against this kabi (kabi binaries compile)")
    for key, allowed in (("dtypes", _DTYPE_NAMES), ("layouts", _LAYOUT_NAMES)):
        unknown = [item for item in _split_list(values[key]) if item not in allowed]
        if unknown or not _split_list(values[key]):
            raise ManifestError(f"{path}: {key}: expected a comma-separated subset of {', '.join(allowed)}, "
                                f"got {values[key]!r}")
    if values["batch_mode"] not in ("none", "uniform", "any"):
        raise ManifestError(f"{path}: batch_mode must be none, uniform or any, got {values['batch_mode']!r}")
    if values["image_format"] not in ("cubin", "ptx"):
        raise ManifestError(f"{path}: image_format must be cubin or ptx, got {values['image_format']!r}")
    if not re.fullmatch(r"[0-9a-f]{16}", values["image_fnv1a64"]):
        raise ManifestError(f"{path}: image_fnv1a64 must be 16 lower-case hex digits, got "
                            f"{values['image_fnv1a64']!r}")
    grid = tuple(axis.strip() for axis in values["grid"].split(";"))
    if len(grid) != 3 or not all(grid):
        raise ManifestError(f"{path}: grid must be three expressions separated by ';', got {values['grid']!r}")
    block = tuple(_integer(path, "block", item) for item in values["block"].split(","))
    if len(block) != 3 or min(block) < 1:
        raise ManifestError(f"{path}: block must be three positive integers separated by ',', got "
                            f"{values['block']!r}")
    if not params:
        raise ManifestError(f"{path}: param: a kernel entry needs at least one parameter")
    input_layouts = _input_layouts(path, values["op"], values["input_layouts"]) if "input_layouts" in values else ()
    declared_format = _FORMAT_LINES.index(lines[0].strip()) + 1
    needed_format, field_name = _format_needed(input_layouts, params)
    if needed_format > declared_format:
        raise ManifestError(f"{path}: {field_name}: needs the first line {_FORMAT_LINES[needed_format - 1]!r} (a field "
                            f"of ABI {_FORMAT_ABI[needed_format]}), not {lines[0].strip()!r}")
    if check_image:
        image_path = path.parent / values["image"]
        if not image_path.is_file():
            raise ManifestError(f"{path}: image: {image_path} does not exist")
        actual = fnv1a64(image_path.read_bytes())
        if actual != values["image_fnv1a64"]:
            raise ManifestError(f"{path}: image_fnv1a64: {values['image_fnv1a64']} does not match the image "
                                f"{image_path.name} (hash {actual})")
    return Manifest(
        op=values["op"], name=values["name"], backend=values["backend"], device=values["device"],
        priority=_integer(path, "priority", values["priority"]), dtypes=_split_list(values["dtypes"]),
        layouts=_split_list(values["layouts"]), alignment=_integer(path, "alignment", values["alignment"]),
        batch_mode=values["batch_mode"], image=values["image"], image_format=values["image_format"],
        image_fnv1a64=values["image_fnv1a64"], arch=_integer(path, "arch", values["arch"]), entry=values["entry"],
        grid=grid, block=block, shared_memory_bytes=_integer(path, "shared_memory_bytes",
                                                              values["shared_memory_bytes"]),
        cluster_size=_integer(path, "cluster_size", values["cluster_size"]), params=tuple(params),
        abi_major=abi_major,
        archs=tuple(_integer(path, "archs", item) for item in _split_list(values.get("archs", ""))),
        arch_min=_integer(path, "arch_min", values.get("arch_min", "0")),
        arch_max=_integer(path, "arch_max", values.get("arch_max", "0")),
        features=_split_list(values.get("features", "")), fingerprint=values.get("fingerprint", ""),
        type_constraints=values.get("type_constraints", ""), input_layouts=input_layouts)
