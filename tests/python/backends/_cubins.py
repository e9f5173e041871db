"""Reading a compiled cubin with the cuobjdump that ships with the Triton wheel: its SASS, and the parameter sizes of
its own EIATTR_KPARAM_INFO table, which the compile tests check a manifest's parameters against; loading compiled
binaries through the core's reader, as an installed wheel's are loaded, and checking what the core read against the
manifest; and descriptors of host tensors that claim a CUDA device, for launches that stop before the driver."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import triton

import kabi
from kabi._base.tensors import DEVICE_TYPES, descriptor
from kabi.backends.triton import load_binaries, read_manifest

CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"


def sass(cubin: Path) -> str:
    return subprocess.run([str(CUOBJDUMP), "-sass", str(cubin)], capture_output=True, text=True, check=True).stdout


def cubin_param_sizes(cubin: Path) -> list[int]:
    """Parameter sizes in ordinal order, from the cubin's own EIATTR_KPARAM_INFO table."""
    listing = subprocess.run([str(CUOBJDUMP), "-elf", str(cubin)], capture_output=True, text=True,
                             check=True).stdout
    entries = re.findall(r"Ordinal\s*:\s*(0x[0-9a-f]+)\s+Offset\s*:\s*0x[0-9a-f]+\s+Size\s*:\s*(0x[0-9a-f]+)",
                         listing)
    return [int(size, 16) for _, size in sorted(entries, key=lambda entry: int(entry[0], 16))]


def loaded_by_the_core(binaries: Mapping, directory: Path, op: str) -> Iterator[dict]:
    """Load ``binaries`` ({key: manifest path}) with the core's reader (kabi_binaries_load) from ``directory``, a
    directory of their own, and yield {key: kernel name}; afterwards unregister them from ``op``. A module fixture
    wraps it: ``yield from loaded_by_the_core(binaries, tmp_path_factory.mktemp(...), "linear")``."""
    for manifest_path in binaries.values():
        for suffix in (".cubin", ".kabi-manifest"):
            source = manifest_path.with_name(read_manifest(manifest_path).name + suffix)
            shutil.copy(source, directory / source.name)
    assert load_binaries(directory) == len(binaries)
    yield {key: read_manifest(path).name for key, path in binaries.items()}
    for path in binaries.values():
        kabi.unregister_kernel(op, read_manifest(path).name)


def assert_the_core_read_the_manifest(op: str, name: str, manifest) -> None:
    """The kernel the core registered from ``manifest`` declares what the manifest says."""
    info = kabi.kernel_info(op, name)
    assert info.kind == "device_binary" and info.backend == "triton" and info.device == "cuda"
    assert (info.archs, info.arch_range) == (manifest.archs, (manifest.arch_min, manifest.arch_max))
    assert info.features == manifest.features and info.dtypes == manifest.dtypes
    assert info.layouts == manifest.layouts
    assert info.type_constraints.replace(" ", "") == manifest.type_constraints.replace(" ", "")
    assert tuple(layouts for _, layouts in info.input_layouts) == manifest.input_layouts
    assert (info.alignment, info.priority, info.batch_mode) == (manifest.alignment, manifest.priority,
                                                                manifest.batch_mode)
    assert info.fingerprint == manifest.fingerprint


def claimed_on_cuda(tensor, shift: int = 0):
    """The descriptor of a host tensor claimed to be on cuda:0 (nothing reads it: the launch stops before the
    driver, or at it, for want of a GPU); ``shift`` bytes added to its data pointer."""
    if tensor is None:
        return None
    data, shape, strides, code, bits, _, _ = descriptor(tensor)
    return (data + shift, shape, strides, code, bits, DEVICE_TYPES["cuda"], 0)
