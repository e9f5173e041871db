"""Reading a compiled cubin with the cuobjdump that ships with the Triton wheel: its SASS, and the parameter sizes of
its own EIATTR_KPARAM_INFO table, which the compile tests check a manifest's parameters against."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import triton

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
